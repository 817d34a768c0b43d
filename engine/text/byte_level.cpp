#include "engine/text/byte_level.h"

#include <array>
#include <unordered_map>

#include "engine/text/utf8.h"

namespace tandem::text {

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> text_of_byte;
  std::unordered_map<char32_t, unsigned char> byte_of_codepoint;

  ByteAlphabet() {
    char32_t next_extra = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                             (byte >= 0xAE && byte <= 0xFF);
      const char32_t codepoint = printable ? static_cast<char32_t>(byte) : next_extra++;
      append_utf8(text_of_byte[byte], codepoint);
      byte_of_codepoint[codepoint] = static_cast<unsigned char>(byte);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet instance;
  return instance;
}

}  // namespace

std::string to_byte_level(std::string_view bytes) {
  const ByteAlphabet& table = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes) out += table.text_of_byte[static_cast<unsigned char>(byte)];
  return out;
}

std::string from_byte_level(std::string_view text) {
  const ByteAlphabet& table = alphabet();
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    std::size_t length = utf8_valid_prefix_char(text);
    if (length == 0) {
      out += text[0];
      text.remove_prefix(1);
      continue;
    }
    const auto lead = static_cast<unsigned char>(text[0]);
    char32_t codepoint = length == 1   ? lead
                         : length == 2 ? lead & 0x1Fu
                         : length == 3 ? lead & 0x0Fu
                                       : lead & 0x07u;
    for (std::size_t i = 1; i < length; ++i) {
      codepoint = (codepoint << 6) | (static_cast<unsigned char>(text[i]) & 0x3Fu);
    }
    const auto it = table.byte_of_codepoint.find(codepoint);
    if (it != table.byte_of_codepoint.end()) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text.substr(0, length));
    }
    text.remove_prefix(length);
  }
  return out;
}

}  // namespace tandem::text
