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

struct BpeOptions {
  // False for SentencePiece-style vocabularies, whose tokens are plain UTF-8 with "▁". The
  // pre-tokenizer writes words in the byte alphabet; this says how tokens decode.
  bool byte_level = true;
  // Decoding: "▁" reads as a space (Metaspace or Replace decoders).
  bool decode_space_mark = false;
  // Decoding: the first space of the text is dropped (Strip decoder, Metaspace prepend).
  bool strip_leading_space = false;
  // Llama 3, tiktoken: a word that is already a token skips the merges.
  bool ignore_merges = false;
  // tiktoken: no merge list; two adjacent pieces merge when their joined text is a token,
  // the one with the lowest id first.
  bool merges_by_rank = false;
  // Gemma 4: a word of newlines only that is a token is taken whole.
  bool whole_newline_runs = false;
  // Characters without a token become <0xAB> byte tokens instead of the unknown token.
  bool byte_fallback = false;
  // Consecutive unknown characters of a word give one unknown token.
  bool fuse_unknown = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // `merges` in priority order (rank 0 first), each a pair of token texts; unused with
  // merges_by_rank.
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
  // A token for the whole word when the options allow taking it whole.
  std::optional<TokenId> whole_word(const std::string& word) const;
  int merge_rank(std::string_view left, std::string_view right) const;

  // Key: left text, a NUL byte, right text (no byte-level symbol contains NUL).
  std::unordered_map<std::string, int> rank_by_pair_;
  PreTokenizer pre_tokenizer_;
  Normalizer normalizer_;
  BpeOptions options_;
};

}  // namespace tandem::text
