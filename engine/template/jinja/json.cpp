#include "engine/template/jinja/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/template/jinja/utf8.h"

namespace tandem::jinja {
namespace {

template <typename Json>
Value from_json(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value(None{});
    case nlohmann::json::value_t::boolean:
      return Value(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(json.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value dict = Value::dict();
      for (auto it = json.begin(); it != json.end(); ++it)
        dict.as_dict().set(it.key(), from_json(it.value()));
      return dict;
    }
    default:
      return Value(None{});
  }
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : utf8_decode(s)) {
    char buf[16];
    switch (cp) {
      case U'"':
        out += "\\\"";
        break;
      case U'\\':
        out += "\\\\";
        break;
      case U'\n':
        out += "\\n";
        break;
      case U'\r':
        out += "\\r";
        break;
      case U'\t':
        out += "\\t";
        break;
      case U'\b':
        out += "\\b";
        break;
      case U'\f':
        out += "\\f";
        break;
      default:
        if (cp < 0x20 || (ensure_ascii && cp > 0x7E)) {
          if (cp >= 0x10000) {
            const char32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x",
                          static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          }
          out += buf;
        } else {
          utf8_append(out, cp);
        }
    }
  }
  out += '"';
}

// json.dumps turns non-string keys into strings: 1 -> "1", True -> "true", None -> "null".
std::string json_key(const Value& key) {
  if (key.is_string()) return key.as_string();
  if (key.is_bool()) return key.as_bool() ? "true" : "false";
  if (key.is_none()) return "null";
  if (key.is_int()) return std::to_string(key.as_int());
  if (key.is_float()) return float_repr(key.as_float());
  throw ValueError("keys must be str, int, float, bool or None, not " + key.type_name());
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& options, int level) {
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    if (std::isnan(d))
      out += "NaN";
    else if (std::isinf(d))
      out += d > 0 ? "Infinity" : "-Infinity";
    else
      out += float_repr(d);
  } else if (v.is_string()) {
    dump_string(out, v.as_string(), options.ensure_ascii);
  } else if (v.is_list_or_tuple() || v.is_mapping()) {
    const bool is_list = v.is_list_or_tuple();
    const size_t count = is_list ? v.as_list().items.size() : v.as_dict().size();
    out += is_list ? '[' : '{';
    if (count == 0) {
      out += is_list ? ']' : '}';
      return;
    }
    std::string newline_indent;
    if (options.indent) {
      newline_indent = "\n";
      for (int i = 0; i <= level; ++i) newline_indent += *options.indent;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    if (!is_list) {
      for (const auto& entry : v.as_dict().entries()) entries.push_back(&entry);
      if (options.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return less_than(a->first, b->first); });
    }
    for (size_t i = 0; i < count; ++i) {
      if (i) out += options.item_separator;
      out += newline_indent;
      if (is_list) {
        dump(out, v.as_list().items[i], options, level + 1);
      } else {
        dump_string(out, json_key(entries[i]->first), options.ensure_ascii);
        out += options.key_separator;
        dump(out, entries[i]->second, options, level + 1);
      }
    }
    if (options.indent) {
      out += '\n';
      for (int i = 0; i < level; ++i) out += *options.indent;
    }
    out += is_list ? ']' : '}';
  } else if (v.is_undefined()) {
    throw ValueError("Object of type Undefined is not JSON serializable");
  } else {
    throw ValueError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json) {
  return from_json(json);
}
Value value_from_json(const nlohmann::json& json) {
  return from_json(json);
}

nlohmann::ordered_json value_to_json(const Value& v) {
  if (v.is_none() || v.is_undefined()) return nullptr;
  if (v.is_bool()) return v.as_bool();
  if (v.is_int()) return v.as_int();
  if (v.is_float()) return v.as_float();
  if (v.is_string()) return v.as_string();
  if (v.is_list_or_tuple()) {
    nlohmann::ordered_json array = nlohmann::ordered_json::array();
    for (const Value& item : v.as_list().items) array.push_back(value_to_json(item));
    return array;
  }
  if (v.is_dict()) {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (const auto& [key, value] : v.as_dict().entries())
      object[key.is_string() ? key.as_string() : to_str(key)] = value_to_json(value);
    return object;
  }
  return to_str(v);
}

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump(out, value, options, 0);
  return out;
}

}  // namespace tandem::jinja
