// Binds the positional and keyword arguments of a call to named parameters, the way
// Python does for filters, tests and methods.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

struct Parameter {
  std::string name;
  std::optional<Value> default_value;  // empty: the argument is required
};

// Returns one value per parameter. Throws ValueError for a missing required argument,
// too many arguments, or an unknown keyword; `function` names the callee in the message.
std::vector<Value> bind_arguments(const std::string& function, const CallArgs& args,
                                  const std::vector<Parameter>& params);

}  // namespace tandem::jinja
