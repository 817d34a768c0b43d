// Unicode normalization applied to text before pre-tokenization (Hugging Face
// "normalizer"): a sequence of normal forms, computed by utf8proc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

class Normalizer {
 public:
  Normalizer() = default;  // no steps: text passes unchanged
  explicit Normalizer(std::vector<NormalForm> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }
  // `text` must be valid UTF-8.
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalForm> steps_;
};

}  // namespace tandem::text
