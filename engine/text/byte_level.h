// GPT-2's byte-level alphabet: every byte gets a printable code point so that BPE
// vocabularies can be stored as text. Bytes that are printable Latin-1 keep their own code
// point; the 68 others take U+0100 upwards in byte order.
#pragma once

#include <string>
#include <string_view>

namespace tandem::text {

std::string to_byte_level(std::string_view bytes);
// The inverse. Code points outside the alphabet (an added token's raw text) are kept as
// their UTF-8 bytes.
std::string from_byte_level(std::string_view text);

}  // namespace tandem::text
