// SentencePiece-style vocabularies (Llama 1/2, Mistral, Phi-3) as GGUF stores them: spaces
// are written "▁", adjacent pieces merge by the highest score, and characters without a
// token fall back to <0xAB> byte tokens.
#pragma once

#include "engine/text/tokenizer.h"

namespace tandem::text {

class SpmTokenizer final : public Tokenizer {
 public:
  // add_space_prefix: a space goes before the text and after each special token, as
  // SentencePiece's add_dummy_prefix does.
  SpmTokenizer(Vocabulary vocab, SpecialTokenPolicy policy, bool add_space_prefix);

  std::string_view model_name() const override { return "SentencePiece"; }
  bool strips_leading_space() const override { return add_space_prefix_; }

 protected:
  void encode_fragment(std::string_view text, FragmentPlace place,
                       std::vector<TokenId>& out) const override;
  std::string normal_piece(const TokenEntry& entry) const override;

 private:
  void append_bytes(std::string_view text, std::vector<TokenId>& out) const;

  bool add_space_prefix_;
};

}  // namespace tandem::text
