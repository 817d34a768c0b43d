// UTF-8 facts the tokenizers need: sequence lengths, validation and repair.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::text {

// Bytes in the sequence that `lead` starts: 1 to 4, or 0 for a byte that cannot lead
// (a continuation byte or 0xF8..0xFF).
std::size_t utf8_sequence_length(unsigned char lead);

// Length of the valid sequence at the start of `bytes`, or 0 when it is invalid or cut.
std::size_t utf8_valid_prefix_char(std::string_view bytes);

bool is_valid_utf8(std::string_view bytes);

// Replaces every invalid or truncated sequence by U+FFFD so that the regex engine and the
// normalizer, which require valid UTF-8, can run on any input.
std::string repair_utf8(std::string_view bytes);

void append_utf8(std::string& out, char32_t codepoint);

// The code point of the `length`-byte sequence at `at` (valid UTF-8).
char32_t utf8_codepoint_at(std::string_view text, std::size_t at, std::size_t length);
// The code points of valid UTF-8 `text`.
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view codepoints);

}  // namespace tandem::text
