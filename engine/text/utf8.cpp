#include "engine/text/utf8.h"

namespace tandem::text {

std::size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC0) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 0;
}

std::size_t utf8_valid_prefix_char(std::string_view bytes) {
  if (bytes.empty()) return 0;
  const auto lead = static_cast<unsigned char>(bytes[0]);
  const std::size_t length = utf8_sequence_length(lead);
  if (length == 0 || length > bytes.size()) return 0;
  char32_t codepoint = length == 1   ? lead
                       : length == 2 ? lead & 0x1Fu
                       : length == 3 ? lead & 0x0Fu
                                     : lead & 0x07u;
  for (std::size_t i = 1; i < length; ++i) {
    const auto byte = static_cast<unsigned char>(bytes[i]);
    if ((byte & 0xC0) != 0x80) return 0;
    codepoint = (codepoint << 6) | (byte & 0x3Fu);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid UTF-8.
  static constexpr char32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (codepoint < kMinimum[length] || codepoint > 0x10FFFF ||
      (codepoint >= 0xD800 && codepoint <= 0xDFFF)) {
    return 0;
  }
  return length;
}

bool is_valid_utf8(std::string_view bytes) {
  while (!bytes.empty()) {
    const std::size_t length = utf8_valid_prefix_char(bytes);
    if (length == 0) return false;
    bytes.remove_prefix(length);
  }
  return true;
}

std::string repair_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const std::size_t length = utf8_valid_prefix_char(bytes);
    if (length == 0) {
      append_utf8(out, 0xFFFD);
      bytes.remove_prefix(1);
    } else {
      out.append(bytes.substr(0, length));
      bytes.remove_prefix(length);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t codepoint) {
  if (codepoint < 0x80) {
    out += static_cast<char>(codepoint);
  } else if (codepoint < 0x800) {
    out += static_cast<char>(0xC0 | (codepoint >> 6));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  } else if (codepoint < 0x10000) {
    out += static_cast<char>(0xE0 | (codepoint >> 12));
    out += static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (codepoint >> 18));
    out += static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (codepoint & 0x3F));
  }
}

char32_t utf8_codepoint_at(std::string_view text, std::size_t at, std::size_t length) {
  const auto lead = static_cast<unsigned char>(text[at]);
  char32_t codepoint = length == 1   ? lead
                       : length == 2 ? lead & 0x1Fu
                       : length == 3 ? lead & 0x0Fu
                                     : lead & 0x07u;
  for (std::size_t i = 1; i < length; ++i) {
    codepoint = (codepoint << 6) | (static_cast<unsigned char>(text[at + i]) & 0x3Fu);
  }
  return codepoint;
}

std::u32string decode_utf8(std::string_view text) {
  std::u32string codepoints;
  codepoints.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[at]));
    if (length == 0 || at + length > text.size()) length = 1;
    codepoints.push_back(utf8_codepoint_at(text, at, length));
    at += length;
  }
  return codepoints;
}

std::string encode_utf8(std::u32string_view codepoints) {
  std::string out;
  out.reserve(codepoints.size());
  for (char32_t codepoint : codepoints) append_utf8(out, codepoint);
  return out;
}

}  // namespace tandem::text
