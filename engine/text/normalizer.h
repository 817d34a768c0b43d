// Text normalization before pre-tokenization (Hugging Face "normalizer"): Unicode normal
// forms computed by utf8proc, and the Prepend / Replace steps that SentencePiece-style
// tokenizer.json files use to write spaces as "▁".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  Normalizer() = default;  // no steps: text passes unchanged
  explicit Normalizer(const std::vector<NormalForm>& forms);

  // Steps run in the order they are added.
  void add_normal_form(NormalForm form);
  // Puts `prefix` before any non-empty text.
  void add_prepend(std::string prefix);
  // Replaces every occurrence of `from` (a literal) by `to`.
  void add_replace(std::string from, std::string to);

  bool empty() const { return steps_.empty(); }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    enum class Kind { kNormalForm, kPrepend, kReplace } kind;
    NormalForm form = NormalForm::kNfc;
    std::string from, to;  // kPrepend uses `to` only
  };
  std::vector<Step> steps_;
};

}  // namespace tandem::text
