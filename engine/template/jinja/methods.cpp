#include "engine/template/jinja/methods.h"

#include <algorithm>

#include "engine/template/jinja/arguments.h"
#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

bool is_python_space(char32_t cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 28 && cp <= 32) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Case mapping for ASCII, Latin-1, Greek and Cyrillic: the scripts chat templates and
// their variables realistically contain. Other scripts pass through unchanged.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) {
  return to_upper(c) != c || to_lower(c) != c;
}

std::u32string map_chars(const std::string& s, char32_t (*fn)(char32_t)) {
  std::u32string chars = utf8_decode(s);
  for (char32_t& c : chars) c = fn(c);
  return chars;
}

[[noreturn]] void refuse_mutation(const Value& object, const std::string& name) {
  throw ValueError("access to attribute '" + name + "' of '" + object.type_name() +
                       "' object is unsafe: templates may not modify values",
                   ErrorKind::Security);
}

const Value kNone{None{}};

std::string require_string(const Value& v, const std::string& what) {
  if (!v.is_string()) throw ValueError(what + " must be str, not " + v.type_name());
  return v.as_string();
}

// str.startswith / endswith accept a string or a tuple of strings.
bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
  auto one = [&](const Value& a) {
    const std::string x =
        require_string(a, at_start ? "startswith first arg" : "endswith first arg");
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0
                    : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list_or_tuple()) {
    for (const Value& a : affix.as_list().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

std::string python_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '{' && i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < format.size() && format[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = format.find('}', i);
      if (close == std::string::npos) throw ValueError("Single '{' encountered in format string");
      const std::string field = format.substr(i + 1, close - i - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        throw ValueError("format specifications in str.format are not supported");
      const Value* value = nullptr;
      if (field.empty()) {
        if (auto_index >= args.positional.size())
          throw ValueError("Replacement index out of range");
        value = &args.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t index = std::stoul(field);
        if (index >= args.positional.size()) throw ValueError("Replacement index out of range");
        value = &args.positional[index];
      } else {
        for (const auto& [key, v] : args.keyword)
          if (key == field) value = &v;
        if (!value) throw ValueError("KeyError: '" + field + "'");
      }
      out += to_str(*value);
      i = close;
    } else if (c == '}') {
      throw ValueError("Single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<Value> string_method(const Value& self, const std::string& name) {
  const std::string s = self.as_string();
  auto method = [&](auto fn) { return Value::function("str." + name, fn); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip";
    const bool right = name != "lstrip";
    return method([s, left, right, name](const CallArgs& a) {
      auto v = bind_arguments(name, a, {{"chars", kNone}});
      return Value(python_strip(s, v[0], left, right));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool from_right = name == "rsplit";
    return method([s, from_right, name](const CallArgs& a) {
      auto v = bind_arguments(name, a, {{"sep", kNone}, {"maxsplit", Value(-1)}});
      if (!v[1].is_int()) throw ValueError("maxsplit must be an integer");
      return python_split(s, v[0], v[1].as_int(), from_right);
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool at_start = name == "startswith";
    return method([s, at_start, name](const CallArgs& a) {
      auto v = bind_arguments(name, a, {{"prefix", std::nullopt}});
      return Value(affix_matches(s, v[0], at_start));
    });
  }
  if (name == "replace") {
    return method([s](const CallArgs& a) {
      auto v = bind_arguments("replace", a,
                              {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value(-1)}});
      return Value(python_replace(s, require_string(v[0], "replace() argument 1"),
                                  require_string(v[1], "replace() argument 2"), v[2].as_integer()));
    });
  }
  if (name == "upper") return method([s](const CallArgs&) { return Value(python_upper(s)); });
  if (name == "lower") return method([s](const CallArgs&) { return Value(python_lower(s)); });
  if (name == "title") return method([s](const CallArgs&) { return Value(python_title(s)); });
  if (name == "capitalize")
    return method([s](const CallArgs&) { return Value(python_capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    return method([s, name](const CallArgs& a) {
      auto v = bind_arguments(name, a, {{"sub", std::nullopt}});
      const std::string sub = require_string(v[0], name + "() argument");
      const size_t byte = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (byte == std::string::npos) {
        if (name.find("index") != std::string::npos) throw ValueError("substring not found");
        return Value(-1);
      }
      return Value(utf8_length(std::string_view(s).substr(0, byte)));
    });
  }
  if (name == "count") {
    return method([s](const CallArgs& a) {
      auto v = bind_arguments("count", a, {{"sub", std::nullopt}});
      const std::string sub = require_string(v[0], "count() argument");
      if (sub.empty()) return Value(utf8_length(s) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  }
  if (name == "join") {
    return method([s](const CallArgs& a) {
      auto v = bind_arguments("join", a, {{"iterable", std::nullopt}});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v[0])) {
        if (!first) out += s;
        first = false;
        out += require_string(item, "sequence item");
      }
      return Value(out);
    });
  }
  if (name == "splitlines") {
    return method([s](const CallArgs&) {
      std::vector<Value> lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.emplace_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.emplace_back(s.substr(start));
      return Value::list(std::move(lines));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper") {
    return method([s, name](const CallArgs&) {
      const std::u32string chars = utf8_decode(s);
      if (chars.empty()) return Value(false);
      auto digit = [](char32_t c) { return c >= '0' && c <= '9'; };
      auto alpha = [](char32_t c) { return is_cased(c); };
      if (name == "isdigit") return Value(std::all_of(chars.begin(), chars.end(), digit));
      if (name == "isalpha") return Value(std::all_of(chars.begin(), chars.end(), alpha));
      if (name == "isalnum")
        return Value(std::all_of(chars.begin(), chars.end(),
                                 [&](char32_t c) { return digit(c) || alpha(c); }));
      if (name == "isspace") return Value(std::all_of(chars.begin(), chars.end(), is_python_space));
      const bool want_lower = name == "islower";
      bool any_cased = false;
      for (char32_t c : chars) {
        if (!is_cased(c)) continue;
        any_cased = true;
        if ((to_lower(c) == c) != want_lower) return Value(false);
      }
      return Value(any_cased);
    });
  }
  if (name == "format")
    return method([s](const CallArgs& a) { return Value(python_format(s, a)); });
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& self, const std::string& name) {
  auto method = [&](auto fn) { return Value::function("dict." + name, fn); };
  if (name == "get") {
    return method([self](const CallArgs& a) {
      auto v = bind_arguments("get", a, {{"key", std::nullopt}, {"default", kNone}});
      if (const Value* found = self.as_dict().find(v[0])) return *found;
      return v[1];
    });
  }
  if (name == "items") {
    return method([self](const CallArgs&) {
      std::vector<Value> items;
      for (const auto& [key, value] : self.as_dict().entries())
        items.push_back(Value::tuple({Value(key), value}));
      return Value::list(std::move(items));
    });
  }
  if (name == "keys") return method([self](const CallArgs&) { return Value::list(iterate(self)); });
  if (name == "values") {
    return method([self](const CallArgs&) {
      std::vector<Value> values;
      for (const auto& entry : self.as_dict().entries()) values.push_back(entry.second);
      return Value::list(std::move(values));
    });
  }
  if (name == "copy") {
    return method([self](const CallArgs&) {
      Value copy = Value::dict();
      for (const auto& [key, value] : self.as_dict().entries()) copy.as_dict().set(key, value);
      return copy;
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
      name == "clear")
    return method([self, name](const CallArgs&) -> Value { refuse_mutation(self, name); });
  return std::nullopt;
}

std::optional<Value> list_method(const Value& self, const std::string& name) {
  auto method = [&](auto fn) { return Value::function(self.type_name() + "." + name, fn); };
  if (name == "index") {
    return method([self](const CallArgs& a) {
      auto v = bind_arguments("index", a, {{"value", std::nullopt}});
      const auto& items = self.as_list().items;
      for (size_t i = 0; i < items.size(); ++i)
        if (equals(items[i], v[0])) return Value(i);
      throw ValueError(to_repr(v[0]) + " is not in list");
    });
  }
  if (name == "count") {
    return method([self](const CallArgs& a) {
      auto v = bind_arguments("count", a, {{"value", std::nullopt}});
      int64_t n = 0;
      for (const Value& item : self.as_list().items) n += equals(item, v[0]);
      return Value(n);
    });
  }
  if (name == "copy" && !self.is_tuple())
    return method([self](const CallArgs&) { return Value::list(self.as_list().items); });
  if (!self.is_tuple() &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return method([self, name](const CallArgs&) -> Value { refuse_mutation(self, name); });
  return std::nullopt;
}

}  // namespace

std::optional<Value> bind_method(const Value& object, const std::string& name) {
  if (object.is_string()) return string_method(object, name);
  if (object.is_mapping()) return dict_method(object, name);
  if (object.is_list_or_tuple()) return list_method(object, name);
  return std::nullopt;
}

std::string python_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string text = utf8_decode(s);
  std::u32string strip_set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) strip_set = utf8_decode(require_string(chars, "strip arg"));
  auto strip = [&](char32_t c) {
    return whitespace ? is_python_space(c) : strip_set.find(c) != std::u32string::npos;
  };
  size_t begin = 0;
  size_t end = text.size();
  if (left)
    while (begin < end && strip(text[begin])) ++begin;
  if (right)
    while (end > begin && strip(text[end - 1])) --end;
  return utf8_encode(std::u32string_view(text).substr(begin, end - begin));
}

Value python_split(const std::string& s, const Value& separator, int64_t max_split,
                   bool from_right) {
  std::vector<std::string> parts;
  if (separator.is_none() || separator.is_undefined()) {
    // Runs of whitespace separate; leading and trailing whitespace yields no empty parts.
    const std::u32string text = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_python_space(text[i])) ++i;
      if (i >= text.size()) break;
      size_t j = i;
      while (j < text.size() && !is_python_space(text[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (max_split >= 0 && static_cast<int64_t>(words.size()) > max_split) {
      if (!from_right) {
        // The unsplit remainder keeps its whitespace, as in Python.
        const size_t keep = static_cast<size_t>(max_split);
        for (size_t k = 0; k < keep; ++k)
          parts.push_back(
              utf8_encode(text.substr(words[k].first, words[k].second - words[k].first)));
        parts.push_back(utf8_encode(text.substr(words[keep].first)));
      } else {
        const size_t first_whole = words.size() - static_cast<size_t>(max_split);
        parts.push_back(utf8_encode(text.substr(0, words[first_whole - 1].second)));
        for (size_t k = first_whole; k < words.size(); ++k)
          parts.push_back(
              utf8_encode(text.substr(words[k].first, words[k].second - words[k].first)));
      }
    } else {
      for (const auto& [b, e] : words) parts.push_back(utf8_encode(text.substr(b, e - b)));
    }
  } else {
    const std::string sep = require_string(separator, "separator");
    if (sep.empty()) throw ValueError("empty separator");
    if (!from_right) {
      size_t start = 0;
      int64_t splits = 0;
      size_t p;
      while ((max_split < 0 || splits < max_split) &&
             (p = s.find(sep, start)) != std::string::npos) {
        parts.push_back(s.substr(start, p - start));
        start = p + sep.size();
        ++splits;
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      int64_t splits = 0;
      std::vector<std::string> reversed;
      while (max_split < 0 || splits < max_split) {
        if (end < sep.size()) break;
        const size_t p = s.rfind(sep, end - sep.size());
        if (p == std::string::npos) break;
        reversed.push_back(s.substr(p + sep.size(), end - p - sep.size()));
        end = p;
        ++splits;
      }
      reversed.push_back(s.substr(0, end));
      parts.assign(reversed.rbegin(), reversed.rend());
    }
  }
  std::vector<Value> values;
  for (std::string& part : parts) values.emplace_back(std::move(part));
  return Value::list(std::move(values));
}

std::string python_replace(const std::string& s, const std::string& old_text,
                           const std::string& new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every character and at the end.
    const std::u32string chars = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : chars) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      utf8_append(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  size_t p;
  while ((count < 0 || done < count) && (p = s.find(old_text, start)) != std::string::npos) {
    out.append(s, start, p - start);
    out += new_text;
    start = p + old_text.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

std::string python_upper(const std::string& s) {
  return utf8_encode(map_chars(s, to_upper));
}
std::string python_lower(const std::string& s) {
  return utf8_encode(map_chars(s, to_lower));
}

std::string python_title(const std::string& s) {
  std::u32string chars = utf8_decode(s);
  bool previous_cased = false;
  for (char32_t& c : chars) {
    c = previous_cased ? to_lower(c) : to_upper(c);
    previous_cased = is_cased(c);
  }
  return utf8_encode(chars);
}

std::string python_capitalize(const std::string& s) {
  std::u32string chars = utf8_decode(s);
  for (size_t i = 0; i < chars.size(); ++i)
    chars[i] = i == 0 ? to_upper(chars[i]) : to_lower(chars[i]);
  return utf8_encode(chars);
}

}  // namespace tandem::jinja
