// jinja2's built-in tests, the predicates of `x is name(args)` (defined, string, odd, ...).
#pragma once

#include <string>

#include "engine/text/jinja_value.h"

namespace tandem::jinja {

class Interpreter;

// Throws ValueError for an unknown test or bad arguments.
bool run_test(Interpreter& interpreter, const std::string& name, const Value& input,
              const CallArgs& args);

}  // namespace tandem::jinja
