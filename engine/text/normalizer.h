// Text normalization before pre-tokenization (Hugging Face "normalizer"): Unicode normal
// forms computed by utf8proc, the Prepend / Replace steps that SentencePiece-style files use
// to write spaces as "▁", and the character filters and maps of Hugging Face's Lowercase,
// Strip, StripAccents, BertNormalizer, Nmt and ByteLevel normalizers.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer_regex.h"

namespace tandem::text {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  Normalizer();  // no steps: text passes unchanged
  explicit Normalizer(const std::vector<NormalForm>& forms);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  // Steps run in the order they are added.
  void add_normal_form(NormalForm form);
  // Puts `prefix` before any non-empty text.
  void add_prepend(std::string prefix);
  // Replaces every occurrence of `from` (a literal) by `to`.
  void add_replace(std::string from, std::string to);
  // Replaces every match of `pattern`, empty ones included, by `to`.
  void add_replace(TokenizerRegex pattern, std::string to);
  // Rust's char::to_lowercase, code point by code point (no final-sigma rule).
  void add_lowercase();
  // Drops whitespace at the start and/or the end.
  void add_strip(bool left, bool right);
  // Drops combining marks (every M category).
  void add_strip_accents();
  // BertNormalizer's steps, in its order: control characters dropped and whitespace made
  // spaces; CJK ideographs padded with spaces; NFD without nonspacing marks.
  void add_bert_clean_text();
  void add_bert_chinese_padding();
  void add_bert_strip_accents();
  // Nmt: control characters dropped, some spaces and marks made plain spaces.
  void add_nmt();
  // ByteLevel: the whole text written in GPT-2's byte alphabet.
  void add_byte_level_alphabet();

  bool empty() const { return steps_.empty(); }

  struct Result {
    std::string text;
    // Whether the first character of `text` comes from the first character of the input
    // (false when a step dropped the characters before it).
    bool starts_at_origin = true;
  };
  // `text` must be valid UTF-8.
  Result normalize(std::string_view text) const;
  std::string apply(std::string_view text) const { return normalize(text).text; }

 private:
  struct Step;
  std::vector<Step> steps_;
};

}  // namespace tandem::text
