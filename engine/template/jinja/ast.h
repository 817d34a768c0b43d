// The syntax tree of a parsed template: expressions and statements.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

struct SourcePos {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Literal,    // literal
  Name,       // name
  List,       // items
  Tuple,      // items
  Dict,       // keys (items[2i]) and values (items[2i+1])
  GetAttr,    // object.name
  GetItem,    // object[index]
  Slice,      // items: start, stop, step (each may be null)
  Call,       // object(args, keywords)
  Filter,     // object | name(args, keywords); object is null inside {% filter %}
  Test,       // object is [not] name(args)
  Unary,      // op ("-", "+", "not") operand=object
  Binary,     // op: + - * / // % ** ~ and or; items: left, right
  Compare,    // object, then ops[i] against items[i]: ==, !=, <, >, <=, >=, in, notin
  Condition,  // items: then, test, else (else may be null)
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value literal;
  std::string name;  // variable, attribute, filter or test name; operator for Unary/Binary
  ExprPtr object;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  bool negated = false;  // `is not`
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // conditions[i] guards bodies[i]; else_body
  For,          // target in expr [if filter] body, else_body
  Set,          // target = expr; or block set: target = body | filters (expr = filter chain)
  Macro,        // name(params = defaults) body
  CallBlock,    // {% call(params) expr %} body
  FilterBlock,  // {% filter expr %} body, expr a Filter chain rooted at null
  Break,
  Continue,
  With,        // {% with params[i].name = params[i].default_value, ... %} body
  Generation,  // {% generation %} body: Hugging Face's marker for assistant text, renders body
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr target;  // Name, Tuple of Names, or GetAttr on a namespace
  ExprPtr filter;  // for-loop `if` filter
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
  bool block_set = false;
};

struct TemplateTree {
  Body body;
};

}  // namespace tandem::jinja
