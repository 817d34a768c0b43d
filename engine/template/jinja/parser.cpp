#include "engine/template/jinja/parser.h"

#include <initializer_list>

#include "engine/template/jinja/error.h"

namespace tandem::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Text:
      return "template text";
    case TokenKind::VariableBegin:
      return "'{{'";
    case TokenKind::VariableEnd:
      return "'}}'";
    case TokenKind::BlockBegin:
      return "'{%'";
    case TokenKind::BlockEnd:
      return "'%}'";
    case TokenKind::Name:
      return "'" + t.text + "'";
    case TokenKind::String:
      return "string literal";
    case TokenKind::Integer:
    case TokenKind::Float:
      return "number " + t.text;
    case TokenKind::Operator:
      return "'" + t.text + "'";
    case TokenKind::EndOfInput:
      return "end of template";
  }
  return "token";
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, int max_depth)
      : tokens_(std::move(tokens)), max_depth_(max_depth) {}

  std::unique_ptr<TemplateTree> run() {
    auto tmpl = std::make_unique<TemplateTree>();
    tmpl->body = parse_body({});
    if (peek().kind != TokenKind::EndOfInput) {
      fail(peek(1), "unexpected " + describe(peek(1)) + ": no block is open");
    }
    return tmpl;
  }

 private:
  // --- token helpers -------------------------------------------------------------------
  const Token& peek(size_t ahead = 0) const {
    const size_t i = std::min(index_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return t;
  }
  bool is_op(const std::string& op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Operator && peek(ahead).text == op;
  }
  bool is_name(const std::string& name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::Name && peek(ahead).text == name;
  }
  bool skip_op(const std::string& op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const std::string& name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const Token& t, const std::string& message) const {
    throw TemplateError(ErrorKind::Syntax, t.line, t.column, message);
  }
  void expect_op(const std::string& op) {
    if (!skip_op(op)) fail(peek(), "expected '" + op + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::Name) fail(peek(), "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (peek().kind != TokenKind::BlockEnd)
      fail(peek(), "expected '%}' to end '" + tag + "', got " + describe(peek()));
    next();
  }
  static SourcePos pos_of(const Token& t) { return SourcePos{t.line, t.column}; }

  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : parser(p) {
      if (++parser.depth_ > parser.max_depth_)
        parser.fail(at,
                    "template nests deeper than the limit of " + std::to_string(parser.max_depth_));
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  static ExprPtr make_expr(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // --- statements ----------------------------------------------------------------------
  // Parses until `{% name %}` with name in `end_names` (left unconsumed) or end of input.
  Body parse_body(std::initializer_list<const char*> end_names) {
    DepthGuard guard(*this, peek());
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::EndOfInput) {
        if (end_names.size() == 0) return body;
        std::string wanted;
        for (const char* n : end_names)
          wanted += std::string(wanted.empty() ? "" : " or ") + "'" + n + "'";
        fail(t, "unexpected end of template: expected " + wanted);
      }
      if (t.kind == TokenKind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->pos = pos_of(t);
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::VariableBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->pos = pos_of(next());
        s->expr = parse_tuple();
        if (peek().kind != TokenKind::VariableEnd)
          fail(peek(), "expected '}}', got " + describe(peek()));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::BlockBegin) {
        const Token& keyword = peek(1);
        if (keyword.kind != TokenKind::Name)
          fail(keyword, "expected a tag name, got " + describe(keyword));
        for (const char* n : end_names)
          if (keyword.text == n) return body;
        next();
        body.push_back(parse_statement());
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  void expect_end_tag(const char* name) {
    next();  // {%
    const Token& t = next();
    if (t.kind != TokenKind::Name || t.text != name)
      fail(t, std::string("expected '") + name + "'");
    expect_block_end(name);
  }

  StmtPtr parse_statement() {
    const Token& keyword = next();
    auto s = std::make_unique<Stmt>();
    s->pos = pos_of(keyword);
    const std::string& tag = keyword.text;
    if (tag == "if") {
      s->kind = StmtKind::If;
      s->conditions.push_back(parse_expression(false));
      expect_block_end("if");
      s->bodies.push_back(parse_body({"elif", "else", "endif"}));
      while (true) {
        const std::string which = peek(1).text;
        if (which == "elif") {
          next();
          next();
          s->conditions.push_back(parse_expression(false));
          expect_block_end("elif");
          s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        } else if (which == "else") {
          next();
          next();
          expect_block_end("else");
          s->else_body = parse_body({"endif"});
        } else {
          break;
        }
      }
      expect_end_tag("endif");
    } else if (tag == "for") {
      s->kind = StmtKind::For;
      s->target = parse_assign_target(false);
      if (!skip_name("in")) fail(peek(), "expected 'in' in for loop, got " + describe(peek()));
      s->expr = parse_expression(false);
      if (skip_name("if")) s->filter = parse_expression(true);
      if (is_name("recursive")) fail(peek(), "recursive for loops are not supported");
      expect_block_end("for");
      ++loop_depth_;
      s->body = parse_body({"endfor", "else"});
      --loop_depth_;
      if (peek(1).text == "else") {
        next();
        next();
        expect_block_end("else");
        s->else_body = parse_body({"endfor"});
      }
      expect_end_tag("endfor");
    } else if (tag == "set") {
      s->kind = StmtKind::Set;
      s->target = parse_assign_target(true);
      if (skip_op("=")) {
        s->expr = parse_tuple();
        expect_block_end("set");
      } else {
        s->block_set = true;
        if (s->target->kind != ExprKind::Name) fail(keyword, "a block set needs a single name");
        if (is_op("|")) s->expr = parse_filters(nullptr);
        expect_block_end("set");
        s->body = parse_body({"endset"});
        expect_end_tag("endset");
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::Macro;
      s->name = expect_name();
      s->params = parse_params();
      expect_block_end("macro");
      const int saved_loops = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"});
      loop_depth_ = saved_loops;
      expect_end_tag("endmacro");
    } else if (tag == "call") {
      s->kind = StmtKind::CallBlock;
      if (is_op("(")) s->params = parse_params();
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::Call) fail(keyword, "'call' needs a macro call");
      expect_block_end("call");
      s->body = parse_body({"endcall"});
      expect_end_tag("endcall");
    } else if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter_chain_head();
      expect_block_end("filter");
      s->body = parse_body({"endfilter"});
      expect_end_tag("endfilter");
    } else if (tag == "with") {
      s->kind = StmtKind::With;
      while (peek().kind != TokenKind::BlockEnd) {
        if (!s->params.empty()) expect_op(",");
        MacroParam assignment;
        assignment.name = expect_name();
        expect_op("=");
        assignment.default_value = parse_expression(true);
        s->params.push_back(std::move(assignment));
      }
      expect_block_end("with");
      s->body = parse_body({"endwith"});
      expect_end_tag("endwith");
    } else if (tag == "generation") {
      // transformers loads its AssistantTracker extension for every chat template.
      s->kind = StmtKind::Generation;
      expect_block_end("generation");
      s->body = parse_body({"endgeneration"});
      expect_end_tag("endgeneration");
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(keyword, "'" + tag + "' outside of a for loop");
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end(tag);
    } else {
      fail(keyword, "unknown tag '" + tag + "'");
    }
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  // `name`, `a, b`, `(a, b)` or, for set, `ns.attr`.
  ExprPtr parse_assign_target(bool allow_attribute) {
    const Token& first = peek();
    if (allow_attribute && peek().kind == TokenKind::Name && is_op(".", 1)) {
      auto e = make_expr(ExprKind::GetAttr, pos_of(first));
      auto obj = make_expr(ExprKind::Name, pos_of(first));
      obj->name = next().text;
      next();
      e->object = std::move(obj);
      e->name = expect_name();
      return e;
    }
    const bool parenthesized = skip_op("(");
    auto tuple = make_expr(ExprKind::Tuple, pos_of(first));
    do {
      if (parenthesized && is_op(")")) break;
      if (!parenthesized && !tuple->items.empty() && (is_name("in") || is_op("="))) break;
      auto name = make_expr(ExprKind::Name, pos_of(peek()));
      name->name = expect_name();
      tuple->items.push_back(std::move(name));
    } while (skip_op(","));
    if (parenthesized) expect_op(")");
    if (tuple->items.size() == 1 && !parenthesized) return std::move(tuple->items[0]);
    return tuple;
  }

  ExprPtr parse_filter_chain_head() {
    auto head = make_expr(ExprKind::Filter, pos_of(peek()));
    head->name = parse_dotted_name();
    parse_call_args(*head);
    if (is_op("|")) return parse_filters(std::move(head));
    return head;
  }

  // --- expressions ---------------------------------------------------------------------
  ExprPtr parse_tuple() {
    const Token& start = peek();
    auto first = parse_expression(true);
    if (!is_op(",")) return first;
    auto tuple = make_expr(ExprKind::Tuple, pos_of(start));
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == TokenKind::VariableEnd || peek().kind == TokenKind::BlockEnd) break;
      tuple->items.push_back(parse_expression(true));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condition) {
    DepthGuard guard(*this, peek());
    if (!with_condition) return parse_or();
    auto expr = parse_or();
    while (is_name("if")) {
      const Token& t = next();
      auto cond = make_expr(ExprKind::Condition, pos_of(t));
      auto test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_expression(true);
      cond->items.push_back(std::move(expr));
      cond->items.push_back(std::move(test));
      cond->items.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, SourcePos pos, ExprPtr left, ExprPtr right) {
    auto e = make_expr(ExprKind::Binary, pos);
    e->name = op;
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    auto left = parse_and();
    while (is_name("or")) {
      const SourcePos p = pos_of(next());
      left = binary("or", p, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    auto left = parse_not();
    while (is_name("and")) {
      const SourcePos p = pos_of(next());
      left = binary("and", p, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this, peek());
      auto e = make_expr(ExprKind::Unary, pos_of(next()));
      e->name = "not";
      e->object = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& start = peek();
    auto first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == TokenKind::Operator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(ExprKind::Compare, pos_of(start));
        cmp->object = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    auto left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      left = binary(t.text, pos_of(t), std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    auto left = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      left = binary("~", pos_of(t), std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    auto left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      left = binary(t.text, pos_of(t), std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    auto left = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      left = binary("**", pos_of(t), std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, peek());
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make_expr(ExprKind::Unary, pos_of(t));
      node->name = t.text;
      node->object = parse_unary(false);
    } else {
      node = parse_postfix(parse_primary());
    }
    if (with_filter) node = parse_filters(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::Name: {
        next();
        auto e = make_expr(ExprKind::Literal, pos_of(t));
        if (t.text == "true" || t.text == "True")
          e->literal = Value(true);
        else if (t.text == "false" || t.text == "False")
          e->literal = Value(false);
        else if (t.text == "none" || t.text == "None")
          e->literal = Value(None{});
        else {
          e->kind = ExprKind::Name;
          e->name = t.text;
        }
        return e;
      }
      case TokenKind::String: {
        auto e = make_expr(ExprKind::Literal, pos_of(t));
        std::string s;
        while (peek().kind == TokenKind::String) s += next().text;  // "a" "b" is "ab"
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenKind::Integer: {
        next();
        auto e = make_expr(ExprKind::Literal, pos_of(t));
        e->literal = Value(t.integer);
        return e;
      }
      case TokenKind::Float: {
        next();
        auto e = make_expr(ExprKind::Literal, pos_of(t));
        e->literal = Value(t.floating);
        return e;
      }
      case TokenKind::Operator:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return make_expr(ExprKind::Tuple, pos_of(t));
          auto first = parse_expression(true);
          if (!is_op(",")) {
            expect_op(")");
            return first;
          }
          auto tuple = make_expr(ExprKind::Tuple, pos_of(t));
          tuple->items.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->items.push_back(parse_expression(true));
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          auto list = make_expr(ExprKind::List, pos_of(t));
          while (!is_op("]")) {
            if (!list->items.empty()) expect_op(",");
            if (is_op("]")) break;
            list->items.push_back(parse_expression(true));
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make_expr(ExprKind::Dict, pos_of(t));
          while (!is_op("}")) {
            if (!dict->items.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->items.push_back(parse_expression(true));
            expect_op(":");
            dict->items.push_back(parse_expression(true));
          }
          expect_op("}");
          return dict;
        }
        break;
      default:
        break;
    }
    fail(t, "unexpected " + describe(t) + " in expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        next();
        if (peek().kind == TokenKind::Integer) {
          auto e = make_expr(ExprKind::GetItem, node->pos);
          auto index = make_expr(ExprKind::Literal, pos_of(peek()));
          index->literal = Value(next().integer);
          e->object = std::move(node);
          e->items.push_back(std::move(index));
          node = std::move(e);
        } else {
          auto e = make_expr(ExprKind::GetAttr, node->pos);
          e->object = std::move(node);
          e->name = expect_name();
          node = std::move(e);
        }
      } else if (is_op("[")) {
        next();
        auto e = make_expr(ExprKind::GetItem, node->pos);
        e->object = std::move(node);
        e->items.push_back(parse_subscript());
        expect_op("]");
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript() {
    const Token& start = peek();
    ExprPtr lower;
    if (!is_op(":")) {
      lower = parse_expression(true);
      if (!is_op(":")) return lower;
    }
    auto slice = make_expr(ExprKind::Slice, pos_of(start));
    next();  // ':'
    ExprPtr upper;
    ExprPtr step;
    if (!is_op("]") && !is_op(":")) upper = parse_expression(true);
    if (skip_op(":") && !is_op("]")) step = parse_expression(true);
    slice->items.push_back(std::move(lower));
    slice->items.push_back(std::move(upper));
    slice->items.push_back(std::move(step));
    return slice;
  }

  void parse_call_args(Expr& call) {
    if (!skip_op("(")) return;
    while (!is_op(")")) {
      if (!call.items.empty() || !call.keywords.empty()) expect_op(",");
      if (is_op(")")) break;
      if (peek().kind == TokenKind::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!call.keywords.empty()) fail(peek(), "positional argument after keyword argument");
        call.items.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make_expr(ExprKind::Call, callee->pos);
    e->object = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek(1).kind == TokenKind::Name) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        const Token& bar = next();
        auto e = make_expr(ExprKind::Filter, pos_of(bar));
        e->object = std::move(node);
        e->name = parse_dotted_name();
        parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        const Token& is = next();
        auto e = make_expr(ExprKind::Test, pos_of(is));
        e->negated = skip_name("not");
        e->object = std::move(node);
        e->name = parse_dotted_name();
        if (is_op("(")) {
          parse_call_args(*e);
        } else {
          const Token& t = peek();
          const bool starts_argument =
              t.kind == TokenKind::String || t.kind == TokenKind::Integer ||
              t.kind == TokenKind::Float ||
              (t.kind == TokenKind::Name && t.text != "else" && t.text != "or" && t.text != "and" &&
               t.text != "if" && t.text != "is" && t.text != "in" && t.text != "not") ||
              (t.kind == TokenKind::Operator && (t.text == "[" || t.text == "{"));
          if (starts_argument) e->items.push_back(parse_postfix(parse_primary()));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int max_depth_;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<TemplateTree> parse_template(std::string_view source, const LexerOptions& options,
                                             int max_nesting_depth) {
  return Parser(tokenize(source, options), max_nesting_depth).run();
}

}  // namespace tandem::jinja
