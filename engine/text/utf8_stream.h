// Streaming detokenization: tokens arrive one at a time and a token may end in the middle
// of a UTF-8 character (byte tokens, or BPE pieces that split an emoji). The text shown
// to the user must only ever contain whole characters.
#pragma once

#include <string>
#include <string_view>

#include "engine/text/vocabulary.h"

namespace tandem::text {

class Tokenizer;

// Joins byte chunks and releases only complete UTF-8 characters. A sequence that can
// never complete (a stray continuation byte, an invalid lead) is released as U+FFFD.
class Utf8Assembler {
 public:
  std::string push(std::string_view bytes);
  // Releases what is held back; an unfinished character becomes U+FFFD.
  std::string finish();
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false);

  // The complete text that `id` finishes; may be empty while a character is incomplete.
  std::string push(TokenId id);
  // The rest at the end of generation.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool at_start_ = true;
  Utf8Assembler assembler_;
};

}  // namespace tandem::text
