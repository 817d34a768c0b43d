// JSON in and out of the interpreter: nlohmann JSON documents become values, and values
// serialise exactly like Python's json.dumps (which chat templates' tojson is).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

// Object key order is kept as given: pass ordered_json to keep a document's own order
// (nlohmann::json sorts keys).
Value value_from_json(const nlohmann::ordered_json& json);
Value value_from_json(const nlohmann::json& json);
nlohmann::ordered_json value_to_json(const Value& value);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // json.dumps(indent=...): spaces, or null for one line
  std::string item_separator = ", ";  // json.dumps's default separators depend on indent
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // true escapes every non-ASCII character as \uXXXX
};

// json.dumps. Throws ValueError for values JSON cannot hold (Undefined, functions).
std::string json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace tandem::jinja
