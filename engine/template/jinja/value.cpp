#include "engine/template/jinja/value.h"

#include <locale.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {

namespace {

std::string tagged(char tag, const std::string& body) {
  std::string out(1, tag);
  out += body;
  return out;
}

// One string per Python-equal key: 1, 1.0 and True share "i1".
std::string hash_key(const Value& key) {
  if (key.is_string()) return tagged('s', key.as_string());
  if (key.is_int() || key.is_bool()) return tagged('i', std::to_string(key.as_integer()));
  if (key.is_float()) {
    const double d = key.as_float();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18)
      return tagged('i', std::to_string(static_cast<int64_t>(d)));
    return tagged('f', float_repr(d));
  }
  if (key.is_none()) return "n";
  if (key.is_undefined()) return "u";
  if (key.is_tuple()) {
    std::string out = "t(";
    for (const Value& item : key.as_list().items) {
      out += hash_key(item);
      out += ',';
    }
    out += ')';
    return out;
  }
  if (key.is_callable())
    return tagged('c', std::to_string(reinterpret_cast<uintptr_t>(key.identity())));
  throw ValueError("unhashable type: '" + key.type_name() + "'");
}

}  // namespace

Dict::Dict(DictKind kind) : kind_(kind) {}

size_t Dict::size() const {
  return entries_.size();
}

const Value* Dict::find(const std::string& key) const {
  auto it = index_.find(tagged('s', key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(const char* key, Value value) {
  set(Value(key), std::move(value));
}

void Dict::set(const std::string& key, Value value) {
  set(Value(key), std::move(value));
}

void Dict::set(const Value& key, Value value) {
  std::string hashed = hash_key(key);
  auto it = index_.find(hashed);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(hashed), entries_.size());
  entries_.emplace_back(key, std::move(value));
}

Value Value::list(std::vector<Value> items) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  return Value(std::move(l));
}

Value Value::tuple(std::vector<Value> items) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = true;
  return Value(std::move(l));
}

Value Value::dict(DictKind kind) {
  return Value(std::make_shared<Dict>(kind));
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> invoke) {
  return Value(std::make_shared<Callable>(Callable{std::move(name), std::move(invoke)}));
}

const void* Value::identity() const {
  if (auto* l = std::get_if<ListPtr>(&data_)) return l->get();
  if (auto* d = std::get_if<DictPtr>(&data_)) return d->get();
  if (auto* c = std::get_if<CallablePtr>(&data_)) return c->get();
  return nullptr;
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list_or_tuple()) return as_list().is_tuple ? "tuple" : "list";
  if (is_dict()) {
    switch (as_dict().kind()) {
      case DictKind::Plain:
        return "dict";
      case DictKind::Namespace:
        return "Namespace";
      case DictKind::Loop:
        return "LoopContext";
    }
  }
  return "function";
}

bool truthy(const Value& v) {
  if (v.is_undefined() || v.is_none()) return false;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int() != 0;
  if (v.is_float()) return v.as_float() != 0.0;
  if (v.is_string()) return !v.as_string().empty();
  if (v.is_list_or_tuple()) return !v.as_list().items.empty();
  if (v.is_dict()) return v.as_dict().kind() != DictKind::Plain || v.as_dict().size() != 0;
  return true;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out the way Python's repr
  // does: positional for 1e-4 <= |d| < 1e16, else d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits +
            std::string(static_cast<size_t>(exponent + 1 - static_cast<int>(digits.size())), '0') +
            ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent + 1)) + "." +
            digits.substr(static_cast<size_t>(exponent + 1));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  }
  return negative ? "-" + out : out;
}

std::optional<double> parse_float(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (begin < end && space(text[begin])) ++begin;
  while (end > begin && space(text[end - 1])) --end;
  std::string cleaned;
  for (size_t i = begin; i < end; ++i) {
    if (text[i] == '_') {
      const bool between_digits = i > begin && i + 1 < end &&
                                  std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                                  std::isdigit(static_cast<unsigned char>(text[i + 1]));
      if (!between_digits) return std::nullopt;
      continue;
    }
    cleaned += text[i];
  }
  if (cleaned.empty()) return std::nullopt;
  bool negative = false;
  size_t start = 0;
  if (cleaned[0] == '+' || cleaned[0] == '-') {
    negative = cleaned[0] == '-';
    start = 1;
  }
  double value = 0;
  const char* first = cleaned.data() + start;
  const char* last = cleaned.data() + cleaned.size();
  const auto result = std::from_chars(first, last, value);
  if (result.ptr != last) return std::nullopt;
  if (result.ec == std::errc::result_out_of_range) {
    // from_chars leaves the value alone; Python gives inf, or 0 for a tiny number.
    static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
    value = strtod_l(first, nullptr, c_locale);
  } else if (result.ec != std::errc()) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

namespace {

// Python prints these code points escaped in repr() because they are not printable.
bool is_printable(char32_t cp) {
  // Python's str.isprintable(): not control (Cc), format (Cf), surrogate, private use or
  // separator (Zs/Zl/Zp) other than ' '. Unassigned code points are treated as printable.
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kNonPrintable[] = {
      {0x0000, 0x001F},   {0x007F, 0x00A0},   {0x00AD, 0x00AD},    {0x0600, 0x0605},
      {0x061C, 0x061C},   {0x06DD, 0x06DD},   {0x070F, 0x070F},    {0x0890, 0x0891},
      {0x08E2, 0x08E2},   {0x1680, 0x1680},   {0x180E, 0x180E},    {0x2000, 0x200F},
      {0x2028, 0x202F},   {0x205F, 0x2064},   {0x2066, 0x206F},    {0x3000, 0x3000},
      {0xD800, 0xF8FF},   {0xFEFF, 0xFEFF},   {0xFFF9, 0xFFFB},    {0x110BD, 0x110BD},
      {0x110CD, 0x110CD}, {0x13430, 0x1343F}, {0x1BCA0, 0x1BCA3},  {0x1D173, 0x1D17A},
      {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xF0000, 0x10FFFF},
  };
  for (const Range& r : kNonPrintable)
    if (cp >= r.first && cp <= r.last) return false;
  return true;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : utf8_decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (!is_printable(cp)) {
      char buf[16];
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      utf8_append(out, cp);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string to_repr(const Value& v) {
  if (v.is_string()) return string_repr(v.as_string());
  if (v.is_list_or_tuple()) {
    const List& l = v.as_list();
    std::string out = l.is_tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += to_repr(l.items[i]);
    }
    if (l.is_tuple && l.items.size() == 1) out += ",";
    out += l.is_tuple ? ")" : "]";
    return out;
  }
  if (v.is_dict()) {
    const Dict& d = v.as_dict();
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : d.entries()) {
      if (!first) out += ", ";
      first = false;
      out += to_repr(key) + ": " + to_repr(value);
    }
    out += "}";
    if (d.kind() == DictKind::Namespace) return "<Namespace " + out + ">";
    if (d.kind() == DictKind::Loop) return "<LoopContext>";
    return out;
  }
  if (v.is_undefined()) return "Undefined";
  return to_str(v);
}

std::string to_str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.as_bool() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.as_int());
  if (v.is_float()) return float_repr(v.as_float());
  if (v.is_string()) return v.as_string();
  if (v.is_callable()) return "<function " + v.as_callable().name + ">";
  return to_repr(v);
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_integer() == b.as_integer();
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list_or_tuple() && b.is_list_or_tuple()) {
    const List& x = a.as_list();
    const List& y = b.as_list();
    if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
      if (!equals(x.items[i], y.items[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict& x = a.as_dict();
    const Dict& y = b.as_dict();
    if (x.kind() != DictKind::Plain || y.kind() != DictKind::Plain) return &x == &y;
    if (x.size() != y.size()) return false;
    for (const auto& [key, value] : x.entries()) {
      const Value* other = y.find(key);
      if (!other || !equals(value, *other)) return false;
    }
    return true;
  }
  if (a.is_callable() && b.is_callable()) return a.identity() == b.identity();
  return false;
}

void fail_undefined(const Value& v) {
  throw ValueError(v.undefined_reason().empty() ? "value is undefined" : v.undefined_reason(),
                   ErrorKind::Undefined);
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list_or_tuple()) return v.as_list().items;
  if (v.is_dict()) {
    std::vector<Value> keys;
    for (const auto& entry : v.as_dict().entries()) keys.emplace_back(entry.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (char32_t cp : utf8_decode(v.as_string()))
      chars.emplace_back(utf8_encode(std::u32string(1, cp)));
    return chars;
  }
  throw ValueError("'" + v.type_name() + "' object is not iterable");
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_integer() < b.as_integer();
  }
  // UTF-8 byte order is code point order, which is how Python orders str.
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list_or_tuple() && b.is_list_or_tuple() &&
      a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw ValueError("'<' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

}  // namespace tandem::jinja
