#include "engine/text/utf8_stream.h"

#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"

namespace tandem::text {

std::string Utf8Assembler::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string ready;
  std::string_view rest = pending_;
  while (!rest.empty()) {
    const std::size_t length = utf8_valid_prefix_char(rest);
    if (length > 0) {
      ready.append(rest.substr(0, length));
      rest.remove_prefix(length);
      continue;
    }
    // Invalid now: either the character is not finished yet, or it never will be.
    const std::size_t expected = utf8_sequence_length(static_cast<unsigned char>(rest[0]));
    bool could_complete = expected > rest.size();
    for (std::size_t i = 1; could_complete && i < rest.size(); ++i) {
      could_complete = (static_cast<unsigned char>(rest[i]) & 0xC0) == 0x80;
    }
    if (could_complete) break;
    append_utf8(ready, 0xFFFD);
    rest.remove_prefix(1);
  }
  pending_.assign(rest);
  return ready;
}

std::string Utf8Assembler::finish() {
  std::string rest = pending_.empty() ? std::string() : repair_utf8(pending_);
  pending_.clear();
  return rest;
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer), render_special_(render_special) {}

std::string StreamingDetokenizer::push(TokenId id) {
  std::string piece = tokenizer_.token_piece(id, render_special_);
  // Same rule as Tokenizer::decode: the space encode() put before the text is dropped.
  if (at_start_ && !piece.empty()) {
    if (tokenizer_.strips_leading_space() && piece.front() == ' ') piece.erase(0, 1);
    at_start_ = false;
  }
  return assembler_.push(piece);
}

std::string StreamingDetokenizer::finish() {
  return assembler_.finish();
}

}  // namespace tandem::text
