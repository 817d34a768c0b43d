// jinja2's built-in filters (length, tojson, map, selectattr, ...).
#pragma once

#include <string>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

class Interpreter;

// Throws ValueError for an unknown filter or bad arguments.
Value run_filter(Interpreter& interpreter, const std::string& name, const Value& input,
                 const CallArgs& args);

}  // namespace tandem::jinja
