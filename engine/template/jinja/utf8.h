// UTF-8 <-> code points for the Jinja interpreter: Python strings count, index and slice
// by code point, not by byte.
#pragma once

#include <string>
#include <string_view>

namespace tandem::jinja {

// Invalid bytes decode as U+FFFD so that a bad input never stops rendering.
std::u32string utf8_decode(std::string_view text);
std::string utf8_encode(std::u32string_view code_points);
void utf8_append(std::string& out, char32_t code_point);
size_t utf8_length(std::string_view text);

}  // namespace tandem::jinja
