// Python's arithmetic and string operators on interpreter values.
#pragma once

#include <string>

#include "engine/template/jinja/value.h"

namespace tandem::jinja {

// `op` is one of + - * / // % ** ~. Strings and lists that would grow past
// `max_result_bytes` (e.g. 'x' * 10**9) raise ErrorKind::Limit instead of allocating.
Value binary_operation(const std::string& op, const Value& left, const Value& right,
                       size_t max_result_bytes);
Value negate(const Value& operand);
// Python's printf-style `format % args` for str.
std::string percent_format(const std::string& format, const Value& args);

}  // namespace tandem::jinja
