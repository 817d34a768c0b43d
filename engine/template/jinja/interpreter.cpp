#include "engine/template/jinja/interpreter.h"

#include "engine/template/jinja/filters.h"
#include "engine/template/jinja/methods.h"
#include "engine/template/jinja/operators.h"
#include "engine/template/jinja/predicates.h"
#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

// How jinja2 names an object's type in "has no attribute" messages.
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

int64_t normalize_index(int64_t index, size_t size) {
  return index < 0 ? index + static_cast<int64_t>(size) : index;
}

// Python's slice.indices(): clamps start/stop for a sequence of `size` elements.
std::vector<size_t> slice_positions(const Value& start_v, const Value& stop_v, const Value& step_v,
                                    size_t size) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool())
      throw ValueError(std::string("slice ") + what + " must be an integer or None");
    return v.as_integer();
  };
  const int64_t n = static_cast<int64_t>(size);
  const int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw ValueError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t when_missing) {
    if (!v) return when_missing;
    int64_t i = *v;
    if (i < 0) i += n;
    if (step > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t start = clamp(as_index(start_v, "start"), step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(as_index(stop_v, "stop"), step > 0 ? n : -1);
  std::vector<size_t> positions;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    positions.push_back(static_cast<size_t>(i));
  return positions;
}

bool references(const Expr* expr, const std::string& name);

bool references(const Body& body, const std::string& name) {
  for (const StmtPtr& stmt : body) {
    if (references(stmt->expr.get(), name) || references(stmt->target.get(), name) ||
        references(stmt->filter.get(), name) || references(stmt->body, name) ||
        references(stmt->else_body, name))
      return true;
    for (const ExprPtr& condition : stmt->conditions)
      if (references(condition.get(), name)) return true;
    for (const Body& branch : stmt->bodies)
      if (references(branch, name)) return true;
    for (const MacroParam& param : stmt->params)
      if (references(param.default_value.get(), name)) return true;
  }
  return false;
}

// Whether `expr` mentions the variable `name` anywhere (jinja2 decides at compile time
// whether a macro takes extra arguments by whether it mentions varargs / kwargs).
bool references(const Expr* expr, const std::string& name) {
  if (!expr) return false;
  if (expr->kind == ExprKind::Name && expr->name == name) return true;
  if (references(expr->object.get(), name)) return true;
  for (const ExprPtr& item : expr->items)
    if (references(item.get(), name)) return true;
  for (const auto& keyword : expr->keywords)
    if (references(keyword.second.get(), name)) return true;
  return false;
}

}  // namespace

Interpreter::Interpreter(const SandboxLimits& limits, const Dict& globals)
    : limits_(limits), globals_(globals), scope_(std::make_shared<Scope>()) {}

std::string Interpreter::render(const TemplateTree& tree) {
  std::string out;
  execute(tree.body, out);
  return out;
}

void Interpreter::append(std::string& out, const std::string& text) const {
  if (out.size() + text.size() > limits_.max_output_bytes)
    throw ValueError(
        "output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes",
        ErrorKind::Limit);
  out += text;
}

void Interpreter::count_iteration(const SourcePos& pos) {
  if (++iterations_ > limits_.max_loop_iterations)
    throw TemplateError(ErrorKind::Limit, pos.line, pos.column,
                        "loops ran more than the limit of " +
                            std::to_string(limits_.max_loop_iterations) + " iterations");
}

Interpreter::Flow Interpreter::execute(const Body& body, std::string& out) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = execute(*stmt, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::execute(const Stmt& stmt, std::string& out) {
  try {
    switch (stmt.kind) {
      case StmtKind::Text:
        append(out, stmt.text);
        break;
      case StmtKind::Output:
        append(out, to_str(evaluate(*stmt.expr)));
        break;
      case StmtKind::If:
        for (size_t i = 0; i < stmt.conditions.size(); ++i)
          if (truthy(evaluate(*stmt.conditions[i]))) return execute(stmt.bodies[i], out);
        return execute(stmt.else_body, out);
      case StmtKind::For:
        execute_for(stmt, out);
        break;
      case StmtKind::Set:
        execute_set(stmt);
        break;
      case StmtKind::Macro:
        scope_->vars[stmt.name] = make_macro(stmt, stmt.name, stmt.params, stmt.body);
        break;
      case StmtKind::CallBlock:
        execute_call_block(stmt, out);
        break;
      case StmtKind::With:
        return execute_with(stmt, out);
      case StmtKind::Generation:
        return execute(stmt.body, out);
      case StmtKind::FilterBlock:
        append(out,
               to_str(evaluate_filter_chain(*stmt.expr, Value(render_body_to_string(stmt.body)))));
        break;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
  } catch (const ValueError& error) {
    throw TemplateError(error.kind(), stmt.pos.line, stmt.pos.column, error.what());
  }
  return Flow::Normal;
}

std::string Interpreter::render_body_to_string(const Body& body) {
  std::string text;
  execute(body, text);
  return text;
}

Value Interpreter::make_loop_object(size_t index, const std::vector<Value>& items) {
  const size_t length = items.size();
  Value loop = Value::dict(DictKind::Loop);
  Dict& d = loop.as_dict();
  d.set("index", Value(index + 1));
  d.set("index0", Value(index));
  d.set("revindex", Value(length - index));
  d.set("revindex0", Value(length - index - 1));
  d.set("first", Value(index == 0));
  d.set("last", Value(index + 1 == length));
  d.set("length", Value(length));
  d.set("depth", Value(1));
  d.set("depth0", Value(0));
  d.set("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
  d.set("nextitem",
        index + 1 < length ? items[index + 1] : Value::undefined("there is no next item"));
  d.set("cycle", Value::function("loop.cycle", [index](const CallArgs& args) -> Value {
          if (args.positional.empty()) throw ValueError("no items for cycling given");
          return args.positional[index % args.positional.size()];
        }));
  return loop;
}

void Interpreter::execute_for(const Stmt& stmt, std::string& out) {
  const Value iterable = evaluate(*stmt.expr);
  std::vector<Value> items;
  try {
    items = iterate(iterable);
  } catch (const ValueError& error) {
    throw TemplateError(error.kind(), stmt.expr->pos.line, stmt.expr->pos.column, error.what());
  }
  auto saved = scope_;
  // Each iteration gets a fresh scope: in jinja2 a name assigned in the loop body reads
  // the outer value again at the start of every iteration, and nothing leaks out.
  auto enter_iteration = [&]() {
    scope_ = std::make_shared<Scope>();
    scope_->parent = saved;
  };
  try {
    if (stmt.filter) {
      // `for x in xs if cond` filters before looping, so loop.length and loop.last
      // count only the items that pass.
      std::vector<Value> kept;
      for (const Value& item : items) {
        count_iteration(stmt.pos);
        enter_iteration();
        assign(*stmt.target, item);
        if (truthy(evaluate(*stmt.filter))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      count_iteration(stmt.pos);
      enter_iteration();
      assign(*stmt.target, items[i]);
      scope_->vars["loop"] = make_loop_object(i, items);
      if (execute(stmt.body, out) == Flow::Break) break;
    }
    scope_ = saved;
  } catch (...) {
    scope_ = saved;
    throw;
  }
  if (items.empty()) execute(stmt.else_body, out);
}

Interpreter::Flow Interpreter::execute_with(const Stmt& stmt, std::string& out) {
  // Values are computed in the enclosing scope, then visible only inside the block.
  auto inner = std::make_shared<Scope>();
  for (const MacroParam& assignment : stmt.params)
    inner->vars[assignment.name] = evaluate(*assignment.default_value);
  auto saved = scope_;
  inner->parent = saved;
  scope_ = inner;
  try {
    const Flow flow = execute(stmt.body, out);
    scope_ = saved;
    return flow;
  } catch (...) {
    scope_ = saved;
    throw;
  }
}

void Interpreter::assign(const Expr& target, const Value& value) {
  if (target.kind == ExprKind::Name) {
    scope_->vars[target.name] = value;
    return;
  }
  if (target.kind == ExprKind::Tuple) {
    std::vector<Value> parts = iterate(value);
    if (parts.size() != target.items.size())
      throw ValueError(
          parts.size() > target.items.size()
              ? "too many values to unpack (expected " + std::to_string(target.items.size()) + ")"
              : "not enough values to unpack (expected " + std::to_string(target.items.size()) +
                    ", got " + std::to_string(parts.size()) + ")");
    for (size_t i = 0; i < parts.size(); ++i) assign(*target.items[i], parts[i]);
    return;
  }
  if (target.kind == ExprKind::GetAttr) {
    const Value object = lookup(target.object->name);
    if (!object.is_dict() || object.as_dict().kind() != DictKind::Namespace)
      throw ValueError("cannot assign attribute on non-namespace object");
    object.as_dict().set(target.name, value);
    return;
  }
  throw ValueError("cannot assign to this expression");
}

void Interpreter::execute_set(const Stmt& stmt) {
  if (!stmt.block_set) {
    assign(*stmt.target, evaluate(*stmt.expr));
    return;
  }
  Value content(render_body_to_string(stmt.body));
  if (stmt.expr) content = evaluate_filter_chain(*stmt.expr, content);
  assign(*stmt.target, content);
}

Value Interpreter::make_macro(const Stmt& macro, const std::string& name,
                              const std::vector<MacroParam>& params, const Body& body) {
  // The macro lives in the scope it closes over; a weak reference avoids the cycle, and
  // closures_ keeps the scope alive for the rest of the render.
  closures_.push_back(scope_);
  std::weak_ptr<Scope> closure = scope_;
  const bool takes_varargs = references(body, "varargs");
  const bool takes_kwargs = references(body, "kwargs");
  return Value::function(
      name,
      [this, &macro, &params, &body, closure, name, takes_varargs,
       takes_kwargs](const CallArgs& args) -> Value {
        if (!takes_varargs && args.positional.size() > params.size())
          throw ValueError("macro '" + name + "' takes not more than " +
                           std::to_string(params.size()) + " argument(s)");
        if (call_depth_ >= limits_.max_call_depth)
          throw TemplateError(ErrorKind::Limit, macro.pos.line, macro.pos.column,
                              "macro calls nest deeper than the limit of " +
                                  std::to_string(limits_.max_call_depth));
        auto frame = std::make_shared<Scope>();
        frame->parent = closure.lock();
        std::vector<Value> extra_positional;
        for (size_t i = 0; i < args.positional.size(); ++i) {
          if (i < params.size())
            frame->vars[params[i].name] = args.positional[i];
          else
            extra_positional.push_back(args.positional[i]);
        }
        Value extra_keywords = Value::dict();
        for (const auto& [key, value] : args.keyword) {
          bool is_param = false;
          for (const MacroParam& p : params) is_param = is_param || p.name == key;
          if (is_param || key == "caller")
            frame->vars[key] = value;
          else if (takes_kwargs)
            extra_keywords.as_dict().set(key, value);
          else
            throw ValueError("macro '" + name + "' takes no keyword argument '" + key + "'");
        }
        frame->vars["varargs"] = Value::tuple(std::move(extra_positional));
        frame->vars["kwargs"] = extra_keywords;
        auto saved = scope_;
        scope_ = frame;
        ++call_depth_;
        try {
          for (const MacroParam& p : params) {
            if (frame->vars.count(p.name)) continue;
            frame->vars[p.name] =
                p.default_value ? evaluate(*p.default_value)
                                : Value::undefined("parameter '" + p.name + "' was not provided");
          }
          std::string text;
          execute(body, text);
          --call_depth_;
          scope_ = saved;
          return Value(std::move(text));
        } catch (...) {
          --call_depth_;
          scope_ = saved;
          throw;
        }
      });
}

void Interpreter::execute_call_block(const Stmt& stmt, std::string& out) {
  const Expr& call_expr = *stmt.expr;
  const Value callee = evaluate(*call_expr.object);
  CallArgs args = evaluate_args(call_expr);
  args.keyword.emplace_back("caller", make_macro(stmt, "caller", stmt.params, stmt.body));
  append(out, to_str(call(callee, args)));
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = globals_.find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Interpreter::get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict() && object.as_dict().kind() != DictKind::Plain) {
    if (const Value* v = object.as_dict().find(name)) return *v;
    return Value::undefined("'" + object_type_repr(object) + "' has no attribute '" + name + "'");
  }
  // Python attributes win over keys: message.items is the dict method.
  if (auto method = bind_method(object, name)) return *method;
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(name)) return *v;
  }
  return Value::undefined("'" + object_type_repr(object) + "' has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict()) {
    if (const Value* v = object.as_dict().find(key)) return *v;
    if (key.is_string()) return get_attribute(object, key.as_string());
    return Value::undefined("'" + object_type_repr(object) + "' has no element " + to_repr(key));
  }
  if ((object.is_list_or_tuple() || object.is_string()) && (key.is_int() || key.is_bool())) {
    if (object.is_string()) {
      const std::u32string chars = utf8_decode(object.as_string());
      const int64_t i = normalize_index(key.as_integer(), chars.size());
      if (i >= 0 && i < static_cast<int64_t>(chars.size()))
        return Value(utf8_encode(chars.substr(static_cast<size_t>(i), 1)));
    } else {
      const auto& items = object.as_list().items;
      const int64_t i = normalize_index(key.as_integer(), items.size());
      if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
    }
    return Value::undefined("'" + object_type_repr(object) + "' has no element " + to_repr(key));
  }
  if (key.is_string()) return get_attribute(object, key.as_string());
  return Value::undefined("'" + object_type_repr(object) + "' has no element " + to_repr(key));
}

Value Interpreter::evaluate_slice(const Value& object, const Expr& slice) {
  if (object.is_undefined()) fail_undefined(object);
  const Value start = slice.items[0] ? evaluate(*slice.items[0]) : Value(None{});
  const Value stop = slice.items[1] ? evaluate(*slice.items[1]) : Value(None{});
  const Value step = slice.items[2] ? evaluate(*slice.items[2]) : Value(None{});
  if (object.is_string()) {
    const std::u32string chars = utf8_decode(object.as_string());
    std::u32string picked;
    for (size_t i : slice_positions(start, stop, step, chars.size())) picked += chars[i];
    return Value(utf8_encode(picked));
  }
  if (object.is_list_or_tuple()) {
    const List& list = object.as_list();
    std::vector<Value> picked;
    for (size_t i : slice_positions(start, stop, step, list.items.size()))
      picked.push_back(list.items[i]);
    return list.is_tuple ? Value::tuple(std::move(picked)) : Value::list(std::move(picked));
  }
  throw ValueError("'" + object.type_name() + "' object is not subscriptable");
}

Value Interpreter::call(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable())
    throw ValueError("'" + callee.type_name() + "' object is not callable");
  Value result = callee.as_callable().invoke(args);
  if (result.is_string() && result.as_string().size() > limits_.max_output_bytes)
    throw ValueError(
        "result exceeds the output limit of " + std::to_string(limits_.max_output_bytes) + " bytes",
        ErrorKind::Limit);
  return result;
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  Value result = run_filter(*this, name, input, args);
  if (result.is_string() && result.as_string().size() > limits_.max_output_bytes)
    throw ValueError(
        "result exceeds the output limit of " + std::to_string(limits_.max_output_bytes) + " bytes",
        ErrorKind::Limit);
  return result;
}

bool Interpreter::apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  return run_test(name, input, args);
}

CallArgs Interpreter::evaluate_args(const Expr& call) {
  CallArgs args;
  for (const ExprPtr& arg : call.items) args.positional.push_back(evaluate(*arg));
  for (const auto& [key, arg] : call.keywords) args.keyword.emplace_back(key, evaluate(*arg));
  return args;
}

Value Interpreter::evaluate_filter_chain(const Expr& chain, const Value& base) {
  // The innermost filter of a {% filter %} or block {% set %} has no object: it filters
  // the block's text. Otherwise the chain ends in an ordinary expression.
  Value input = base;
  if (chain.object) {
    input = chain.object->kind == ExprKind::Filter ? evaluate_filter_chain(*chain.object, base)
                                                   : evaluate(*chain.object);
  }
  try {
    return apply_filter(chain.name, input, evaluate_args(chain));
  } catch (const ValueError& error) {
    throw TemplateError(error.kind(), chain.pos.line, chain.pos.column, error.what());
  }
}

Value Interpreter::evaluate(const Expr& expr) {
  try {
    return evaluate_unchecked(expr);
  } catch (const ValueError& error) {
    throw TemplateError(error.kind(), expr.pos.line, expr.pos.column, error.what());
  }
}

Value Interpreter::evaluate_unchecked(const Expr& expr) {
  switch (expr.kind) {
    case ExprKind::Literal:
      return expr.literal;
    case ExprKind::Name:
      return lookup(expr.name);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : expr.items) items.push_back(evaluate(*item));
      return expr.kind == ExprKind::List ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
    }
    case ExprKind::Dict: {
      Value dict = Value::dict();
      for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
        const Value key = evaluate(*expr.items[i]);
        dict.as_dict().set(key, evaluate(*expr.items[i + 1]));
      }
      return dict;
    }
    case ExprKind::GetAttr:
      return get_attribute(evaluate(*expr.object), expr.name);
    case ExprKind::GetItem: {
      const Value object = evaluate(*expr.object);
      const Expr& index = *expr.items[0];
      if (index.kind == ExprKind::Slice) return evaluate_slice(object, index);
      return get_item(object, evaluate(index));
    }
    case ExprKind::Slice:
      throw ValueError("slice outside of a subscript");
    case ExprKind::Call: {
      const Value callee = evaluate(*expr.object);
      return call(callee, evaluate_args(expr));
    }
    case ExprKind::Filter:
      return evaluate_filter_chain(expr, Value());
    case ExprKind::Test: {
      const bool result = apply_test(expr.name, evaluate(*expr.object), evaluate_args(expr));
      return Value(result != expr.negated);
    }
    case ExprKind::Unary: {
      const Value operand = evaluate(*expr.object);
      if (expr.name == "not") return Value(!truthy(operand));
      if (expr.name == "-") return negate(operand);
      if (operand.is_undefined()) fail_undefined(operand);
      if (!operand.is_number())
        throw ValueError("bad operand type for unary +: '" + operand.type_name() + "'");
      return operand.is_bool() ? Value(operand.as_integer()) : operand;
    }
    case ExprKind::Binary: {
      const Value left = evaluate(*expr.items[0]);
      if (expr.name == "and") return truthy(left) ? evaluate(*expr.items[1]) : left;
      if (expr.name == "or") return truthy(left) ? left : evaluate(*expr.items[1]);
      return binary_operation(expr.name, left, evaluate(*expr.items[1]), limits_.max_output_bytes);
    }
    case ExprKind::Compare: {
      Value left = evaluate(*expr.object);
      for (size_t i = 0; i < expr.ops.size(); ++i) {
        Value right = evaluate(*expr.items[i]);
        const std::string& op = expr.ops[i];
        bool ok = false;
        if (op == "==")
          ok = equals(left, right);
        else if (op == "!=")
          ok = !equals(left, right);
        else if (op == "<")
          ok = less_than(left, right);
        else if (op == ">")
          ok = less_than(right, left);
        else if (op == "<=")
          ok = !less_than(right, left);
        else if (op == ">=")
          ok = !less_than(left, right);
        else
          ok = run_test("in", left, CallArgs{{right}, {}}) == (op == "in");
        if (!ok) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::Condition: {
      if (truthy(evaluate(*expr.items[1]))) return evaluate(*expr.items[0]);
      if (expr.items[2]) return evaluate(*expr.items[2]);
      return Value::undefined(
          "the inline if expression evaluated to false and no else section was defined");
    }
  }
  throw ValueError("unknown expression");
}

}  // namespace tandem::jinja
