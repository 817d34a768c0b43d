// Values of the Jinja interpreter, with Python's semantics: templates are written against
// Python objects, and byte-identical output needs Python's str(), repr(), truthiness,
// equality and ordering.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "engine/template/jinja/error.h"

namespace tandem::jinja {

class Value;

// A jinja2 Undefined: what a missing variable, key or attribute evaluates to. It renders
// as nothing, is falsy and iterates as empty; most other uses raise with `reason`.
struct Undefined {
  std::string reason;  // e.g. "'x' is undefined", "'dict object' has no attribute 'y'"
};

struct None {};

// A Python list, or a tuple when `is_tuple` (they print and compare differently).
struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

// What kind of Python object a string-keyed mapping stands for.
enum class DictKind {
  Plain,      // dict
  Namespace,  // jinja2's namespace(): the only object whose attributes `set` may assign
  Loop,       // the `loop` variable of a for loop
};

// An insertion-ordered dict (Python dicts keep insertion order, and templates iterate
// tool schemas and print them in that order). Keys are any hashable value, with Python's
// equality: 1, 1.0 and True are one key.
class Dict {
 public:
  explicit Dict(DictKind kind = DictKind::Plain);  // out of line, as size()

  const Value* find(const std::string& key) const;
  // Throws ValueError for an unhashable key (list, dict).
  const Value* find(const Value& key) const;
  const Value* find(const char* key) const { return find(std::string(key)); }
  void set(const std::string& key, Value value);
  void set(const char* key, Value value);
  void set(const Value& key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  // Out of line, with the constructor: Value is not complete here, and clang instantiates
  // the entries' vector where these would be defined.
  size_t size() const;
  DictKind kind() const { return kind_; }

 private:
  DictKind kind_;
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;  // by hash_key() of the key
};

// Arguments of a call: f(a, b, key=c).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A function, bound method or macro. `name` is what error messages and str() show.
struct Callable {
  std::string name;
  std::function<Value(const CallArgs&)> invoke;
};

class Value {
 public:
  using ListPtr = std::shared_ptr<List>;
  using DictPtr = std::shared_ptr<Dict>;
  using CallablePtr = std::shared_ptr<Callable>;

  Value() : data_(Undefined{}) {}
  Value(Undefined u) : data_(std::move(u)) {}
  Value(None) : data_(None{}) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(int64_t{i}) {}
  Value(int64_t i) : data_(i) {}
  Value(size_t i) : data_(static_cast<int64_t>(i)) {}
  Value(double d) : data_(d) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(std::string_view s) : data_(std::string(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  Value(ListPtr l) : data_(std::move(l)) {}
  Value(DictPtr d) : data_(std::move(d)) {}
  Value(CallablePtr c) : data_(std::move(c)) {}

  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict(DictKind kind = DictKind::Plain);
  static Value function(std::string name, std::function<Value(const CallArgs&)> invoke);
  static Value undefined(std::string reason) { return Value(Undefined{std::move(reason)}); }

  bool is_undefined() const { return std::holds_alternative<Undefined>(data_); }
  bool is_none() const { return std::holds_alternative<None>(data_); }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  // Python's numbers include bool (True + 1 == 2).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_list_or_tuple() const { return std::holds_alternative<ListPtr>(data_); }
  bool is_list() const { return is_list_or_tuple() && !as_list().is_tuple; }
  bool is_tuple() const { return is_list_or_tuple() && as_list().is_tuple; }
  bool is_dict() const { return std::holds_alternative<DictPtr>(data_); }
  bool is_mapping() const { return is_dict() && as_dict().kind() == DictKind::Plain; }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // Integer value of an int or bool.
  int64_t as_integer() const { return is_bool() ? (as_bool() ? 1 : 0) : as_int(); }
  // Numeric value of an int, bool or float.
  double as_double() const { return is_float() ? as_float() : static_cast<double>(as_integer()); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  List& as_list() const { return *std::get<ListPtr>(data_); }
  Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  const std::string& undefined_reason() const { return std::get<Undefined>(data_).reason; }

  // Identity of a shared object (lists, dicts, callables), for `is sameas`.
  const void* identity() const;

  // Python's type name: 'str', 'int', 'dict', ... (used in error messages).
  std::string type_name() const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr, DictPtr, CallablePtr>
      data_;
};

// Python's bool(x).
bool truthy(const Value& v);
// Python's str(x), as {{ x }} prints it (Undefined prints as nothing).
std::string to_str(const Value& v);
// Python's repr(x), as str() of a list or dict shows its elements.
std::string to_repr(const Value& v);
// Python's float.__repr__: shortest round-trip digits, '1.0', '1e+16', 'inf'.
std::string float_repr(double d);
// Python's float(text): surrounding whitespace, a sign, '_' between digits, inf and nan.
// Independent of the C locale, which a Qt application sets from the environment.
std::optional<double> parse_float(const std::string& text);
// Python's ==.
bool equals(const Value& a, const Value& b);
// Python's <; throws ValueError for types Python cannot order.
bool less_than(const Value& a, const Value& b);

// Python's iter(x) collected: list and tuple items, dict keys, a string's characters;
// Undefined iterates as empty. Throws ValueError for values Python cannot iterate.
std::vector<Value> iterate(const Value& v);

// Throws ValueError carrying the undefined value's reason.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace tandem::jinja
