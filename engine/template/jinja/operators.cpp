#include "engine/template/jinja/operators.h"

#include <locale.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw ValueError("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

void check_size(size_t bytes, size_t max_bytes) {
  if (bytes > max_bytes)
    throw ValueError(
        "result would exceed the output limit of " + std::to_string(max_bytes) + " bytes",
        ErrorKind::Limit);
}

// Python's integers do not overflow; a template whose arithmetic leaves 64 bits is refused
// (a limit, like the output and step limits) instead of wrapping or invoking undefined
// behaviour.
[[noreturn]] void integer_overflow(const std::string& op) {
  throw ValueError("the integer result of " + op + " is too large", ErrorKind::Limit);
}

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) integer_overflow("+");
  return r;
}
int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) integer_overflow("-");
  return r;
}
int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) integer_overflow("*");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) integer_overflow("//");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++; the answer is 0
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(const Value& seq, int64_t times, size_t max_bytes) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    check_size(seq.as_string().size() * static_cast<size_t>(times), max_bytes);
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  const List& l = seq.as_list();
  check_size(l.items.size() * static_cast<size_t>(times) * sizeof(Value), max_bytes);
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) items.insert(items.end(), l.items.begin(), l.items.end());
  return l.is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

// Applies printf-style width, precision and '-' of `spec` ("%-10.3") to a string, by
// code points as Python does.
std::string pad_text(const std::string& text, const std::string& spec) {
  const bool left = spec.find('-') != std::string::npos;
  size_t i = 1;
  while (i < spec.size() && std::string("-+ #0").find(spec[i]) != std::string::npos) ++i;
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
    width = width * 10 + static_cast<size_t>(spec[i++] - '0');
  std::u32string chars = utf8_decode(text);
  if (i < spec.size() && spec[i] == '.') {
    size_t precision = 0;
    for (++i; i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])); ++i)
      precision = precision * 10 + static_cast<size_t>(spec[i] - '0');
    if (chars.size() > precision) chars.resize(precision);
  }
  std::string body = utf8_encode(chars);
  if (chars.size() >= width) return body;
  const std::string fill(width - chars.size(), ' ');
  return left ? body + fill : fill + body;
}

// printf of one double with a '.' decimal point whatever locale the process runs in.
void print_in_c_locale(char* buffer, size_t size, const std::string& format, double value) {
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  const locale_t previous = uselocale(c_locale);
  std::snprintf(buffer, size, format.c_str(), value);
  uselocale(previous);
}

}  // namespace

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_number()) {
    if (v.as_integer() == INT64_MIN) integer_overflow("unary -");
    return Value(-v.as_integer());
  }
  throw ValueError("bad operand type for unary -: '" + v.type_name() + "'");
}

Value binary_operation(const std::string& op, const Value& a, const Value& b, size_t max_bytes) {
  if (op == "~") {
    std::string out = to_str(a);
    check_size(out.size() + to_str(b).size(), max_bytes);
    out += to_str(b);
    return Value(std::move(out));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const bool numbers = a.is_number() && b.is_number();
  const bool any_float = a.is_float() || b.is_float();
  if (op == "+") {
    if (numbers)
      return any_float ? Value(a.as_double() + b.as_double())
                       : Value(checked_add(a.as_integer(), b.as_integer()));
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size(), max_bytes);
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list_or_tuple() && b.is_list_or_tuple() &&
        a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return a.as_list().is_tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    if (a.is_string())
      throw ValueError("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() +
                       "\") to str");
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (numbers)
      return any_float ? Value(a.as_double() - b.as_double())
                       : Value(checked_sub(a.as_integer(), b.as_integer()));
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (numbers)
      return any_float ? Value(a.as_double() * b.as_double())
                       : Value(checked_mul(a.as_integer(), b.as_integer()));
    if ((a.is_string() || a.is_list_or_tuple()) && (b.is_int() || b.is_bool()))
      return repeat(a, b.as_integer(), max_bytes);
    if ((b.is_string() || b.is_list_or_tuple()) && (a.is_int() || a.is_bool()))
      return repeat(b, a.as_integer(), max_bytes);
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) throw ValueError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) throw ValueError("integer division or modulo by zero");
    if (any_float) return Value(std::floor(a.as_double() / b.as_double()));
    return Value(floor_div(a.as_integer(), b.as_integer()));
  }
  if (op == "%") {
    if (a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) throw ValueError("integer division or modulo by zero");
    if (any_float) {
      const double x = a.as_double();
      const double y = b.as_double();
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value(r);
    }
    return Value(floor_mod(a.as_integer(), b.as_integer()));
  }
  if (op == "**") {
    if (!numbers) unsupported(op, a, b);
    if (!any_float && b.as_integer() >= 0) {
      // By squaring: a huge exponent of 0, 1 or -1 takes 64 steps, not 2^63. For |base| >= 2
      // a square that overflows while bits remain would make the result overflow too.
      int64_t result = 1;
      int64_t base = a.as_integer();
      for (int64_t e = b.as_integer(); e > 0;) {
        if ((e & 1) != 0 && __builtin_mul_overflow(result, base, &result)) integer_overflow("**");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) integer_overflow("**");
      }
      return Value(result);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  throw ValueError("unknown operator " + op);
}

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> values;
  if (args.is_tuple())
    values = args.as_list().items;
  else
    values.push_back(args);
  size_t next_arg = 0;
  auto take = [&]() -> const Value& {
    if (next_arg >= values.size()) throw ValueError("not enough arguments for format string");
    return values[next_arg++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw ValueError("incomplete format");
    // Flags, width and precision as printf understands them.
    std::string spec = "%";
    while (i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos)
      spec += format[i++];
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
      spec += format[i++];
    if (i < format.size() && format[i] == '.') {
      spec += format[i++];
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i])))
        spec += format[i++];
    }
    if (i >= format.size()) throw ValueError("incomplete format");
    const char conv = format[i];
    char buf[512];
    switch (conv) {
      case '%':
        out += '%';
        break;
      case 's':
      case 'r':
      case 'c': {
        const Value& v = take();
        std::string text;
        if (conv == 'c') {
          if (v.is_int())
            utf8_append(text, static_cast<char32_t>(v.as_int()));
          else if (v.is_string() && utf8_length(v.as_string()) == 1)
            text = v.as_string();
          else
            throw ValueError("%c requires an int or a single character");
        } else {
          text = conv == 's' ? to_str(v) : to_repr(v);
        }
        out += pad_text(text, spec);
        break;
      }
      case 'd':
      case 'i': {
        const Value& v = take();
        if (!v.is_number())
          throw ValueError("%d format: a real number is required, not " + v.type_name());
        std::snprintf(
            buf, sizeof buf, (spec + "lld").c_str(),
            static_cast<long long>(v.is_float() ? std::trunc(v.as_float()) : v.as_integer()));
        out += buf;
        break;
      }
      case 'f':
      case 'e':
      case 'g':
      case 'x':
      case 'X':
      case 'o': {
        const Value& v = take();
        if (!v.is_number())
          throw ValueError(std::string("%") + conv + " format: a number is required, not " +
                           v.type_name());
        if (conv == 'x' || conv == 'X' || conv == 'o')
          std::snprintf(buf, sizeof buf, (spec + "ll" + conv).c_str(),
                        static_cast<long long>(v.as_integer()));
        else
          print_in_c_locale(buf, sizeof buf, spec + conv, v.as_double());
        out += buf;
        break;
      }
      default:
        throw ValueError(std::string("unsupported format character '") + conv + "'");
    }
  }
  if (next_arg < values.size() && args.is_tuple())
    throw ValueError("not all arguments converted during string formatting");
  return out;
}

}  // namespace tandem::jinja
