// Finding special and added tokens in raw text before the tokenizer model sees it: a
// chat marker such as "<|im_start|>" must become its own id, never a run of BPE pieces.
#pragma once

#include <string_view>
#include <vector>

#include "engine/text/vocabulary.h"

namespace tandem::text {

struct TextFragment {
  std::string_view text;  // raw text for the model when token is kNoToken
  TokenId token = kNoToken;
  static constexpr TokenId kNoToken = -1;
};

class SpecialTokenMatcher {
 public:
  // Collects the control, user-defined and unknown tokens of `vocab`.
  explicit SpecialTokenMatcher(const Vocabulary& vocab);

  // Splits `text` into raw fragments and matched tokens, leftmost first and longest first
  // at one position. User-defined tokens are always matched; control and unknown tokens
  // only when `parse_special` is set, so untrusted text cannot inject chat markers.
  std::vector<TextFragment> partition(std::string_view text, bool parse_special) const;

 private:
  struct Candidate {
    TokenId id;
    std::string_view text;  // points into the vocabulary, which outlives the matcher
    bool always;            // user-defined: matched even without parse_special
    bool strip_left, strip_right;
  };
  const Vocabulary& vocab_;
  // Candidates by first byte, longest first.
  std::vector<std::vector<Candidate>> by_first_byte_;
};

}  // namespace tandem::text
