#include "engine/template/jinja/predicates.h"

#include <algorithm>

#include "engine/template/jinja/arguments.h"
#include "engine/template/jinja/methods.h"
#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw ValueError("'in <string>' requires string as left operand, not " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_mapping()) return container.as_dict().find(item) != nullptr;
  if (container.is_undefined()) return false;  // jinja2's Undefined iterates as empty
  const std::vector<Value> items = iterate(container);
  return std::any_of(items.begin(), items.end(), [&](const Value& v) { return equals(v, item); });
}

int64_t require_integer(const Value& v, const std::string& test) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) {
    if (v.as_float() != static_cast<double>(static_cast<int64_t>(v.as_float())))
      return 1;  // a non-integral float is neither odd nor even nor divisible
    return static_cast<int64_t>(v.as_float());
  }
  if (!v.is_number()) throw ValueError("test '" + test + "' needs a number, not " + v.type_name());
  return v.as_integer();
}

}  // namespace

bool run_test(const std::string& name, const Value& v, const CallArgs& args) {
  auto no_args = [&]() { bind_arguments(name, args, {}); };
  auto one_arg = [&]() { return bind_arguments(name, args, {{"other", std::nullopt}})[0]; };
  if (name == "defined") return no_args(), !v.is_undefined();
  if (name == "undefined") return no_args(), v.is_undefined();
  if (name == "none") return no_args(), v.is_none();
  if (name == "boolean") return no_args(), v.is_bool();
  if (name == "true") return no_args(), v.is_bool() && v.as_bool();
  if (name == "false") return no_args(), v.is_bool() && !v.as_bool();
  if (name == "integer") return no_args(), v.is_int();
  if (name == "float") return no_args(), v.is_float();
  if (name == "number") return no_args(), v.is_number();
  if (name == "string") return no_args(), v.is_string();
  if (name == "mapping") return no_args(), v.is_mapping();
  // Python: anything iter() accepts; jinja2's Undefined iterates as empty.
  if (name == "iterable")
    return no_args(), v.is_undefined() || v.is_string() || v.is_list_or_tuple() || v.is_mapping();
  // Python: has len() and [] (dicts too); jinja2's Undefined has both.
  if (name == "sequence")
    return no_args(), v.is_undefined() || v.is_string() || v.is_list_or_tuple() || v.is_mapping();
  if (name == "callable") return no_args(), v.is_callable() || v.is_undefined();
  if (name == "escaped") return no_args(), false;
  if (name == "odd") return no_args(), require_integer(v, name) % 2 != 0;
  if (name == "even") return no_args(), require_integer(v, name) % 2 == 0;
  if (name == "divisibleby") {
    const int64_t n = require_integer(bind_arguments(name, args, {{"num", std::nullopt}})[0], name);
    if (n == 0) throw ValueError("integer division or modulo by zero");
    return require_integer(v, name) % n == 0;
  }
  if (name == "lower")
    return no_args(), v.is_string() && python_lower(v.as_string()) == v.as_string();
  if (name == "upper")
    return no_args(), v.is_string() && python_upper(v.as_string()) == v.as_string();
  if (name == "equalto" || name == "eq" || name == "==") return equals(v, one_arg());
  if (name == "ne" || name == "!=") return !equals(v, one_arg());
  if (name == "lt" || name == "lessthan" || name == "<") return less_than(v, one_arg());
  if (name == "gt" || name == "greaterthan" || name == ">") return less_than(one_arg(), v);
  if (name == "le" || name == "<=") return !less_than(one_arg(), v);
  if (name == "ge" || name == ">=") return !less_than(v, one_arg());
  if (name == "in") return contains(bind_arguments(name, args, {{"seq", std::nullopt}})[0], v);
  if (name == "sameas") {
    const Value other = one_arg();
    if (v.identity() || other.identity()) return v.identity() == other.identity();
    // Scalars: CPython shares None, booleans, small ints and literal strings, so `is`
    // holds for equal values of one type.
    return v.type_name() == other.type_name() && equals(v, other);
  }
  throw ValueError("no test named '" + name + "'");
}

}  // namespace tandem::jinja
