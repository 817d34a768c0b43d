// jinja2's built-in tests, the predicates of `x is name(args)` (defined, string, odd, ...).
#pragma once

#include <string>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

// Throws ValueError for an unknown test or bad arguments.
bool run_test(const std::string& name, const Value& input, const CallArgs& args);

}  // namespace tandem::jinja
