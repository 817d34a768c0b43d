// Methods of Python's str, dict and list that templates call (`s.strip()`,
// `d.items()`, ...). Methods that mutate are refused, as in jinja2's
// ImmutableSandboxedEnvironment.
#pragma once

#include <optional>
#include <string>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

// The bound method `object.name`, or nothing when the type has no such method.
std::optional<Value> bind_method(const Value& object, const std::string& name);

// Python str helpers shared with the filters.
std::string python_strip(const std::string& s, const Value& chars, bool left, bool right);
Value python_split(const std::string& s, const Value& separator, int64_t max_split,
                   bool from_right);
std::string python_replace(const std::string& s, const std::string& old_text,
                           const std::string& new_text, int64_t count);
std::string python_upper(const std::string& s);
std::string python_lower(const std::string& s);
std::string python_title(const std::string& s);
std::string python_capitalize(const std::string& s);

}  // namespace tandem::jinja
