// BPE as Hugging Face runs it. Byte-level (GPT-2 family, Llama 3, Qwen, DeepSeek): text is
// normalized, cut into words by the pre-tokenizer, each word's bytes are written in the
// byte-level alphabet, and the merge list joins adjacent symbols, lowest rank first.
// SentencePiece-style (Llama 2, Mistral as tokenizer.json): words keep their characters,
// spaces are written "▁" and characters without a token fall back to <0xAB> tokens.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/text/normalizer.h"
#include "engine/text/pre_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace tandem::text {

// How spaces are written before the model sees the text.
struct MetaspaceOptions {
  std::string replacement = "\xE2\x96\x81";  // "▁"
  enum class Prepend { kNever, kFirst, kAlways } prepend = Prepend::kAlways;
  bool split = false;  // each "▁" starts a new word
};

struct BpeOptions {
  // False for SentencePiece-style vocabularies, whose tokens are plain UTF-8 with "▁".
  bool byte_level = true;
  // A Metaspace pre-tokenizer (replaces spaces after the other pre-tokenizer steps).
  std::optional<MetaspaceOptions> metaspace;
  // Decoding: "▁" reads as a space (Metaspace or Replace decoders).
  bool decode_space_mark = false;
  // Decoding: the first space of the text is dropped (Strip decoder, Metaspace prepend).
  bool strip_leading_space = false;
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

  std::string_view model_name() const override {
    return options_.byte_level ? "byte-level BPE" : "SentencePiece BPE";
  }
  bool strips_leading_space() const override { return options_.strip_leading_space; }

 protected:
  void encode_fragment(std::string_view text, FragmentPlace place,
                       std::vector<TokenId>& out) const override;
  std::string normal_piece(const TokenEntry& entry) const override;

 private:
  void encode_word(const std::string& word, std::vector<TokenId>& out) const;
  std::vector<std::string> apply_metaspace(std::vector<std::string> words,
                                           bool at_text_start) const;
  int merge_rank(std::string_view left, std::string_view right) const;

  // Key: left text, a NUL byte, right text (no byte-level symbol contains NUL).
  std::unordered_map<std::string, int> rank_by_pair_;
  PreTokenizer pre_tokenizer_;
  Normalizer normalizer_;
  BpeOptions options_;
};

}  // namespace tandem::text
