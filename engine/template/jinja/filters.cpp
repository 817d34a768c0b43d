#include "engine/template/jinja/filters.h"

#include <cerrno>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_map>

#include "engine/template/jinja/arguments.h"
#include "engine/template/jinja/interpreter.h"
#include "engine/template/jinja/json.h"
#include "engine/template/jinja/methods.h"
#include "engine/template/jinja/operators.h"
#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

using FilterFunction = std::function<Value(Interpreter&, const Value&, const CallArgs&)>;

const Value kNone{None{}};

std::vector<Value> bind(const char* name, const CallArgs& args,
                        const std::vector<Parameter>& params) {
  return bind_arguments(name, args, params);
}

Value length(const Value& v) {
  if (v.is_undefined()) return Value(0);
  if (v.is_string()) return Value(utf8_length(v.as_string()));
  if (v.is_list_or_tuple()) return Value(v.as_list().items.size());
  if (v.is_dict()) return Value(v.as_dict().size());
  throw ValueError("object of type '" + v.type_name() + "' has no len()");
}

// Follows a dotted attribute path ("a.b" or "items.0") the way jinja2's
// make_attrgetter does, integer parts indexing.
Value attribute_path(Interpreter& in, const Value& item, const std::string& path) {
  Value current = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(),
                                                      [](char c) { return c >= '0' && c <= '9'; });
    if (numeric) {
      std::int64_t index = 0;
      const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), index);
      if (error != std::errc() || end != part.data() + part.size())
        throw ValueError("the index " + part.substr(0, 30) + " in attribute \"" +
                             path.substr(0, 60) + "\" is too large",
                         ErrorKind::Limit);
      current = in.get_item(current, Value(index));
    } else {
      current = in.get_item(current, Value(part));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return current;
}

// Sort key: strings compare case-insensitively unless asked otherwise (jinja2's
// ignore_case).
Value sort_key(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = attribute.is_string() ? attribute_path(in, item, attribute.as_string()) : item;
  if (!case_sensitive && key.is_string()) return Value(python_lower(key.as_string()));
  return key;
}

std::vector<Value> sorted(Interpreter& in, std::vector<Value> items, bool reverse,
                          bool case_sensitive, const Value& attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items)
    keyed.emplace_back(sort_key(in, item, attribute, case_sensitive), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

// The test arguments of select/reject/selectattr/rejectattr start at `first`.
CallArgs tail_args(const CallArgs& args, size_t first) {
  CallArgs rest;
  if (args.positional.size() > first)
    rest.positional.assign(args.positional.begin() + static_cast<long>(first),
                           args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

Value select_or_reject(Interpreter& in, const Value& input, const CallArgs& args, bool by_attribute,
                       bool keep) {
  const size_t test_at = by_attribute ? 1 : 0;
  if (by_attribute && args.positional.empty()) throw ValueError("missing attribute name");
  std::vector<Value> out;
  for (const Value& item : iterate(input)) {
    const Value subject =
        by_attribute ? attribute_path(in, item, to_str(args.positional[0])) : item;
    bool passes;
    if (args.positional.size() > test_at) {
      passes =
          in.apply_test(to_str(args.positional[test_at]), subject, tail_args(args, test_at + 1));
    } else {
      passes = truthy(subject);
    }
    if (passes == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double python_round(double x, int64_t digits) {
  // Python rounds the exact binary value half to even (round(2.675, 2) == 2.67); glibc's
  // printf rounds the same way.
  if (digits >= 0 && digits < 300 && std::isfinite(x)) {
    char buffer[512];
    const auto written = std::to_chars(buffer, buffer + sizeof buffer, x, std::chars_format::fixed,
                                       static_cast<int>(digits));
    if (written.ec == std::errc()) return parse_float(std::string(buffer, written.ptr)).value_or(x);
  }
  const double scale = std::pow(10.0, static_cast<double>(digits));
  return std::nearbyint(x * scale) / scale;
}

std::optional<int64_t> parse_int(std::string s, int64_t base) {
  s = python_strip(s, kNone, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  size_t start = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (s.size() > start + 1 && s[start] == '0') {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[start + 1])));
      const int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefixed && (base == 0 || base == prefixed)) {
        base = prefixed;
        s.erase(start, 2);
      }
    }
    if (base == 0) base = 10;
  }
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (end == s.c_str() || *end != '\0') return std::nullopt;
  if (errno == ERANGE)  // Python would give the exact big integer; 64 bits cannot
    throw ValueError("the integer " + s.substr(0, 30) + " is too large", ErrorKind::Limit);
  return value;
}

const std::unordered_map<std::string, FilterFunction>& filters() {
  static const std::unordered_map<std::string, FilterFunction> table = {
      {"length",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("length", a, {});
         return length(v);
       }},
      {"count",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("count", a, {});
         return length(v);
       }},
      {"string",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("string", a, {});
         return Value(to_str(v));
       }},
      {"safe",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("safe", a, {});
         return Value(to_str(v));
       }},
      {"escape",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("escape", a, {});
         return Value(html_escape(to_str(v)));
       }},
      {"e",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("e", a, {});
         return Value(html_escape(to_str(v)));
       }},
      {"forceescape",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("forceescape", a, {});
         return Value(html_escape(to_str(v)));
       }},
      {"upper",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("upper", a, {});
         return Value(python_upper(to_str(v)));
       }},
      {"lower",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("lower", a, {});
         return Value(python_lower(to_str(v)));
       }},
      {"capitalize",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("capitalize", a, {});
         return Value(python_capitalize(to_str(v)));
       }},
      {"title",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("title", a, {});
         // jinja2 capitalises each piece after a run of '-', whitespace or an opening bracket.
         const std::u32string chars = utf8_decode(to_str(v));
         std::string out;
         bool word_start = true;
         for (char32_t c : chars) {
           const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                                  c == ' ' || (c >= 9 && c <= 13);
           const std::string one = utf8_encode(std::u32string(1, c));
           if (separator)
             out += one;
           else
             out += word_start ? python_upper(one) : python_lower(one);
           word_start = separator;
         }
         return Value(out);
       }},
      {"trim",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("trim", a, {{"chars", kNone}});
         return Value(python_strip(to_str(v), p[0], true, true));
       }},
      {"replace",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p =
             bind("replace", a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", kNone}});
         return Value(python_replace(to_str(v), to_str(p[0]), to_str(p[1]),
                                     p[2].is_none() ? -1 : p[2].as_integer()));
       }},
      {"tojson",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("tojson", a,
                       {{"ensure_ascii", Value(false)},
                        {"indent", kNone},
                        {"separators", kNone},
                        {"sort_keys", Value(false)}});
         JsonDumpOptions options;
         options.ensure_ascii = truthy(p[0]);
         if (p[1].is_int())
           options.indent =
               std::string(static_cast<size_t>(std::max<int64_t>(0, p[1].as_int())), ' ');
         else if (p[1].is_string())
           options.indent = p[1].as_string();
         else if (!p[1].is_none())
           throw ValueError("tojson indent must be an integer, a string or None");
         if (options.indent) options.item_separator = ",";
         if (!p[2].is_none()) {
           const std::vector<Value> seps = iterate(p[2]);
           if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
             throw ValueError("tojson separators must be a pair of strings");
           options.item_separator = seps[0].as_string();
           options.key_separator = seps[1].as_string();
         }
         options.sort_keys = truthy(p[3]);
         return Value(json_dumps(v, options));
       }},
      {"items",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("items", a, {});
         if (v.is_undefined()) return Value::list();
         if (!v.is_mapping()) throw ValueError("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [key, value] : v.as_dict().entries())
           out.push_back(Value::tuple({Value(key), value}));
         return Value::list(std::move(out));
       }},
      {"list",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("list", a, {});
         return Value::list(iterate(v));
       }},
      {"join",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("join", a, {{"d", Value("")}, {"attribute", kNone}});
         std::string out;
         bool first = true;
         for (const Value& item : iterate(v)) {
           if (!first) out += to_str(p[0]);
           first = false;
           out += to_str(p[1].is_none() ? item : attribute_path(in, item, to_str(p[1])));
           if (out.size() > in.limits().max_output_bytes)
             throw ValueError("join result exceeds the output limit", ErrorKind::Limit);
         }
         return Value(out);
       }},
      {"first",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("first", a, {});
         const std::vector<Value> items = iterate(v);
         return items.empty() ? Value::undefined("No first item, sequence was empty.")
                              : items.front();
       }},
      {"last",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("last", a, {});
         const std::vector<Value> items = iterate(v);
         return items.empty() ? Value::undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"reverse",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("reverse", a, {});
         if (v.is_string()) {
           std::u32string chars = utf8_decode(v.as_string());
           std::reverse(chars.begin(), chars.end());
           return Value(utf8_encode(chars));
         }
         std::vector<Value> items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"default",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("default", a, {{"default_value", Value("")}, {"boolean", Value(false)}});
         if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
         return v;
       }},
      {"map",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         std::vector<Value> out;
         std::optional<Value> attribute;
         Value fallback;
         CallArgs filter_args;
         for (const auto& [key, value] : a.keyword) {
           if (key == "attribute")
             attribute = value;
           else if (key == "default")
             fallback = value;
           else
             filter_args.keyword.emplace_back(key, value);
         }
         if (!attribute && a.positional.empty())
           throw ValueError("map requires a filter name or attribute=");
         if (!attribute)
           filter_args.positional.assign(a.positional.begin() + 1, a.positional.end());
         for (const Value& item : iterate(v)) {
           if (attribute) {
             Value got = attribute_path(in, item, to_str(*attribute));
             out.push_back(got.is_undefined() && !fallback.is_undefined() ? fallback : got);
           } else {
             out.push_back(in.apply_filter(to_str(a.positional[0]), item, filter_args));
           }
         }
         return Value::list(std::move(out));
       }},
      {"select", [](Interpreter& in, const Value& v,
                    const CallArgs& a) { return select_or_reject(in, v, a, false, true); }},
      {"reject", [](Interpreter& in, const Value& v,
                    const CallArgs& a) { return select_or_reject(in, v, a, false, false); }},
      {"selectattr", [](Interpreter& in, const Value& v,
                        const CallArgs& a) { return select_or_reject(in, v, a, true, true); }},
      {"rejectattr", [](Interpreter& in, const Value& v,
                        const CallArgs& a) { return select_or_reject(in, v, a, true, false); }},
      {"attr",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("attr", a, {{"name", std::nullopt}});
         return in.get_attribute(v, to_str(p[0]));
       }},
      {"int",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("int", a, {{"default", Value(0)}, {"base", Value(10)}});
         if (v.is_int()) return v;
         if (v.is_bool()) return Value(v.as_integer());
         if (v.is_float()) return Value(static_cast<int64_t>(std::trunc(v.as_float())));
         if (v.is_string()) {
           if (auto parsed = parse_int(v.as_string(), p[1].as_integer())) return Value(*parsed);
           if (auto d = parse_float(v.as_string()); d && std::isfinite(*d))
             return Value(static_cast<int64_t>(std::trunc(*d)));
         }
         return p[0];
       }},
      {"float",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("float", a, {{"default", Value(0.0)}});
         if (v.is_number()) return Value(v.as_double());
         if (v.is_string()) {
           if (auto d = parse_float(v.as_string())) return Value(*d);
         }
         return p[0];
       }},
      {"abs",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("abs", a, {});
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         if (v.is_number()) {
           if (v.as_integer() == INT64_MIN)
             throw ValueError("the integer result of abs is too large", ErrorKind::Limit);
           return Value(static_cast<int64_t>(std::llabs(v.as_integer())));
         }
         throw ValueError("bad operand type for abs(): '" + v.type_name() + "'");
       }},
      {"round",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("round", a, {{"precision", Value(0)}, {"method", Value("common")}});
         if (!v.is_number()) throw ValueError("round needs a number, not " + v.type_name());
         const std::string method = to_str(p[1]);
         const int64_t digits = p[0].as_integer();
         if (method == "common") {
           if (!v.is_float()) return Value(v.as_integer());
           return Value(python_round(v.as_float(), digits));
         }
         const double scale = std::pow(10.0, static_cast<double>(digits));
         if (method == "floor") return Value(std::floor(v.as_double() * scale) / scale);
         if (method == "ceil") return Value(std::ceil(v.as_double() * scale) / scale);
         throw ValueError("method must be common, ceil or floor");
       }},
      {"indent",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("indent", a,
                       {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
         const std::string pad =
             p[0].is_string()
                 ? p[0].as_string()
                 : std::string(static_cast<size_t>(std::max<int64_t>(0, p[0].as_integer())), ' ');
         const std::string text = to_str(v);
         std::vector<std::string> lines;
         size_t start = 0;
         for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
           lines.push_back(text.substr(start, nl - start));
         lines.push_back(text.substr(start));
         std::string out;
         for (size_t i = 0; i < lines.size(); ++i) {
           if (i) out += '\n';
           const bool indent_this = i == 0 ? truthy(p[1]) : (truthy(p[2]) || !lines[i].empty());
           if (indent_this) out += pad;
           out += lines[i];
         }
         return Value(out);
       }},
      {"unique",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("unique", a, {{"case_sensitive", Value(false)}, {"attribute", kNone}});
         std::vector<Value> seen;
         std::vector<Value> out;
         for (const Value& item : iterate(v)) {
           const Value key = sort_key(in, item, p[1], truthy(p[0]));
           if (std::none_of(seen.begin(), seen.end(),
                            [&](const Value& s) { return equals(s, key); })) {
             seen.push_back(key);
             out.push_back(item);
           }
         }
         return Value::list(std::move(out));
       }},
      {"sort",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind(
             "sort", a,
             {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", kNone}});
         return Value::list(sorted(in, iterate(v), truthy(p[0]), truthy(p[1]), p[2]));
       }},
      {"dictsort",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind(
             "dictsort", a,
             {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
         if (!v.is_mapping()) throw ValueError("dictsort needs a mapping");
         const int64_t position = to_str(p[1]) == "value" ? 1 : 0;
         std::vector<Value> pairs;
         for (const auto& [key, value] : v.as_dict().entries())
           pairs.push_back(Value::tuple({Value(key), value}));
         return Value::list(sorted(in, std::move(pairs), truthy(p[2]), truthy(p[0]),
                                   Value(std::to_string(position))));
       }},
      {"min",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("min", a, {{"case_sensitive", Value(false)}, {"attribute", kNone}});
         std::vector<Value> items = sorted(in, iterate(v), false, truthy(p[0]), p[1]);
         return items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                              : items.front();
       }},
      {"max",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("max", a, {{"case_sensitive", Value(false)}, {"attribute", kNone}});
         std::vector<Value> items = sorted(in, iterate(v), true, truthy(p[0]), p[1]);
         return items.empty() ? Value::undefined("No aggregated item, sequence was empty.")
                              : items.front();
       }},
      {"sum",
       [](Interpreter& in, const Value& v, const CallArgs& a) {
         auto p = bind("sum", a, {{"attribute", kNone}, {"start", Value(0)}});
         Value total = p[1];
         for (const Value& item : iterate(v))
           total = binary_operation("+", total,
                                    p[0].is_none() ? item : attribute_path(in, item, to_str(p[0])),
                                    in.limits().max_output_bytes);
         return total;
       }},
      {"batch",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("batch", a, {{"linecount", std::nullopt}, {"fill_with", kNone}});
         const int64_t size = p[0].as_integer();
         if (size <= 0) throw ValueError("batch size must be positive");
         std::vector<Value> batches;
         std::vector<Value> current;
         for (const Value& item : iterate(v)) {
           current.push_back(item);
           if (static_cast<int64_t>(current.size()) == size) {
             batches.push_back(Value::list(std::move(current)));
             current.clear();
           }
         }
         if (!current.empty()) {
           if (!p[1].is_none())
             while (static_cast<int64_t>(current.size()) < size) current.push_back(p[1]);
           batches.push_back(Value::list(std::move(current)));
         }
         return Value::list(std::move(batches));
       }},
      {"wordcount",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         bind("wordcount", a, {});
         int64_t words = 0;
         bool in_word = false;
         for (char32_t c : utf8_decode(to_str(v))) {
           const bool word_char =
               (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '_' ||
               (c > 0x7F &&
                python_strip(utf8_encode(std::u32string(1, c)), kNone, true, true).size() > 0);
           if (word_char && !in_word) ++words;
           in_word = word_char;
         }
         return Value(words);
       }},
      {"center",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("center", a, {{"width", Value(80)}});
         const std::string s = to_str(v);
         const int64_t len = static_cast<int64_t>(utf8_length(s));
         const int64_t width = p[0].as_integer();
         if (width <= len) return Value(s);
         // Python's str.center: the odd space goes left only when the width is odd too.
         const int64_t total = width - len;
         const int64_t left = total / 2 + (total & width & 1);
         return Value(std::string(static_cast<size_t>(left), ' ') + s +
                      std::string(static_cast<size_t>(total - left), ' '));
       }},
      {"format",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         if (!a.keyword.empty()) throw ValueError("format with keyword arguments is not supported");
         const Value args = a.positional.size() == 1 && !a.positional[0].is_tuple()
                                ? a.positional[0]
                                : Value::tuple(a.positional);
         return Value(percent_format(to_str(v), args.is_tuple() ? args : Value::tuple({args})));
       }},
      {"truncate",
       [](Interpreter&, const Value& v, const CallArgs& a) {
         auto p = bind("truncate", a,
                       {{"length", Value(255)},
                        {"killwords", Value(false)},
                        {"end", Value("...")},
                        {"leeway", Value(5)}});
         const std::u32string s = utf8_decode(to_str(v));
         const std::u32string end = utf8_decode(to_str(p[2]));
         const size_t length = static_cast<size_t>(std::max<int64_t>(0, p[0].as_integer()));
         if (s.size() <= length + static_cast<size_t>(std::max<int64_t>(0, p[3].as_integer())))
           return Value(to_str(v));
         const size_t keep = length > end.size() ? length - end.size() : 0;
         std::u32string head = s.substr(0, keep);
         if (!truthy(p[1])) {
           const size_t space = head.rfind(U' ');
           if (space != std::u32string::npos) head = head.substr(0, space);
         }
         return Value(utf8_encode(head + end));
       }},
  };
  return table;
}

}  // namespace

Value run_filter(Interpreter& interpreter, const std::string& name, const Value& input,
                 const CallArgs& args) {
  const std::string canonical = name == "d" ? "default" : name;
  const auto& table = filters();
  auto it = table.find(canonical);
  if (it == table.end()) throw ValueError("no filter named '" + name + "'");
  return it->second(interpreter, input, args);
}

}  // namespace tandem::jinja
