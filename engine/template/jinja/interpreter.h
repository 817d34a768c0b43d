// Renders a parsed template: scopes, statements, expressions, macros, and the sandbox
// limits that bound loops, recursion and output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/template/jinja/ast.h"
#include "engine/template/jinja/value.h"

namespace tandem::jinja {

// Bounds that stop a hostile or broken template; hitting one raises ErrorKind::Limit.
struct SandboxLimits {
  size_t max_output_bytes = 16u << 20;     // the rendered text, and any string built on the way
  uint64_t max_loop_iterations = 1000000;  // summed over all loops of one render
  int max_call_depth = 100;                // nested macro calls (recursion)
  int max_nesting_depth = 256;             // nesting of expressions and blocks in the source
  int64_t max_range_length = 100000;       // range(), as jinja2's sandbox (MAX_RANGE)
};

class Interpreter {
 public:
  // `globals` holds the functions and variables visible everywhere (lowest priority).
  Interpreter(const SandboxLimits& limits, const Dict& globals);

  std::string render(const TemplateTree& tree);

  // The building blocks filters and tests call back into.
  Value get_attribute(const Value& object, const std::string& name);
  Value get_item(const Value& object, const Value& key);
  Value call(const Value& callee, const CallArgs& args);
  Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, const CallArgs& args);
  const SandboxLimits& limits() const { return limits_; }

 private:
  struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
  };
  enum class Flow { Normal, Break, Continue };

  Flow execute(const Body& body, std::string& out);
  Flow execute(const Stmt& stmt, std::string& out);
  void execute_for(const Stmt& stmt, std::string& out);
  Flow execute_with(const Stmt& stmt, std::string& out);
  void execute_set(const Stmt& stmt);
  void execute_call_block(const Stmt& stmt, std::string& out);
  Value evaluate(const Expr& expr);
  Value evaluate_unchecked(const Expr& expr);
  Value evaluate_filter_chain(const Expr& chain, const Value& base);
  Value evaluate_slice(const Value& object, const Expr& slice);
  CallArgs evaluate_args(const Expr& call);
  Value lookup(const std::string& name) const;
  void assign(const Expr& target, const Value& value);
  Value make_macro(const Stmt& macro, const std::string& name,
                   const std::vector<MacroParam>& params, const Body& body);
  Value make_loop_object(size_t index, const std::vector<Value>& items);
  std::string render_body_to_string(const Body& body);
  void append(std::string& out, const std::string& text) const;
  void count_iteration(const SourcePos& pos);

  SandboxLimits limits_;
  const Dict& globals_;
  std::shared_ptr<Scope> scope_;
  std::vector<std::shared_ptr<Scope>> closures_;  // scopes that macros close over
  uint64_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace tandem::jinja
