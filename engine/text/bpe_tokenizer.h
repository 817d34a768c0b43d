// Byte-level BPE (GPT-2 family, Llama 3, Qwen, DeepSeek): text is normalized, cut into
// words by the pre-tokenizer, each word's bytes are written in the byte-level alphabet,
// and the merge list joins adjacent symbols, lowest rank first.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/text/normalizer.h"
#include "engine/text/pre_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace tandem::text {

struct BpeOptions {
  // Llama 3: a word that is already a token skips the merges.
  bool ignore_merges = false;
  // Symbols left without a token become <0xAB> byte tokens instead of being dropped.
  bool byte_fallback = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // `merges` in priority order (rank 0 first), each a pair of byte-level texts. Throws
  // std::invalid_argument when a merge names a token missing from the vocabulary.
  BpeTokenizer(Vocabulary vocab, SpecialTokenPolicy policy,
               const std::vector<std::pair<std::string, std::string>>& merges,
               PreTokenizer pre_tokenizer, Normalizer normalizer, BpeOptions options);

  std::string_view model_name() const override { return "byte-level BPE"; }

 protected:
  void encode_fragment(std::string_view text, bool after_special,
                       std::vector<TokenId>& out) const override;
  std::string normal_piece(const TokenEntry& entry) const override;

 private:
  void encode_word(const std::string& word, std::vector<TokenId>& out) const;
  int merge_rank(std::string_view left, std::string_view right) const;

  // Key: left text, a NUL byte, right text (no byte-level symbol contains NUL).
  std::unordered_map<std::string, int> rank_by_pair_;
  PreTokenizer pre_tokenizer_;
  Normalizer normalizer_;
  BpeOptions options_;
};

}  // namespace tandem::text
