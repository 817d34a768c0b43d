// The tokenizer interface of the engine: text <-> token ids for one model, loaded from a
// Hugging Face model folder (tokenizer.json) or from the metadata of a .gguf file.
//
//   auto tokenizer = tandem::text::load_tokenizer("/models/Qwen3-30B-A3B");
//   std::vector<TokenId> ids = tokenizer->encode("<|im_start|>user\nHi", true);
//   std::string text = tokenizer->decode(ids);
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/special_tokens.h"
#include "engine/text/vocabulary.h"

namespace tandem::text {

struct SpecialTokenIds {
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::optional<TokenId> pad;
  std::optional<TokenId> unknown;
};

struct SpecialTokenPolicy {
  SpecialTokenIds ids;
  bool add_bos = false;  // encode(..., add_special = true) puts bos first
  bool add_eos = false;  // ... and eos last
  // Other tokens a tokenizer.json post-processor puts after bos and before eos
  // ("[gMASK]<sop>", "[CLS]" ... "[SEP]").
  std::vector<TokenId> prefix, suffix;
};

// A loaded tokenizer never changes: encode and decode may run on several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // parse_special: control tokens written in `text` ("<|im_end|>") become their ids;
  // otherwise they are tokenized as plain text. add_special: bos/eos as the model asks.
  // Invalid UTF-8 in `text` is replaced by U+FFFD.
  std::vector<TokenId> encode(std::string_view text, bool parse_special,
                              bool add_special = false) const;
  // The bytes of the tokens; control tokens are rendered only with `render_special`.
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const;

  // The bytes one token stands for ("Hello" for "ĠHello", "\n" for "<0x0A>"). A piece may
  // be part of a UTF-8 character; StreamingDetokenizer joins pieces safely.
  std::string token_piece(TokenId id, bool render_special = false) const;
  // The token as the vocabulary stores it ("ĠHello", "▁Hello", "<|im_end|>").
  const std::string& token_text(TokenId id) const { return vocab_.at(id).text; }
  TokenKind token_kind(TokenId id) const { return vocab_.at(id).kind; }
  std::optional<TokenId> find_token(std::string_view text) const { return vocab_.find(text); }
  std::size_t vocab_size() const { return vocab_.size(); }

  const SpecialTokenIds& special_ids() const { return policy_.ids; }
  bool adds_bos() const { return policy_.add_bos; }
  bool adds_eos() const { return policy_.add_eos; }
  // True for control tokens (bos, eos, chat markers), which decode() hides.
  bool is_control(TokenId id) const;

  // "byte-level BPE", "SentencePiece BPE" (tokenizer.json) or "SentencePiece" (GGUF);
  // for messages and the CLI.
  virtual std::string_view model_name() const = 0;
  // Whether decode() strips the space that encode() put before the text.
  virtual bool strips_leading_space() const { return false; }

 protected:
  Tokenizer(Vocabulary vocab, SpecialTokenPolicy policy);

  // Where a run of raw text between special tokens lies in the whole text.
  struct FragmentPlace {
    bool at_text_start;  // it starts the text
    bool after_special;  // it starts the text or follows a special token
  };
  virtual void encode_fragment(std::string_view text, FragmentPlace place,
                               std::vector<TokenId>& out) const = 0;
  // The bytes of a normal token.
  virtual std::string normal_piece(const TokenEntry& entry) const = 0;

  Vocabulary vocab_;
  SpecialTokenPolicy policy_;

 private:
  SpecialTokenMatcher specials_;
};

// Loads the tokenizer of `path`: a model folder with tokenizer.json (and optionally
// tokenizer_config.json) or with Kimi's tiktoken.model, the tokenizer.json file itself, or a
// .gguf file. Throws
// std::runtime_error with a sentence naming the file, what is wrong and what to do.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The loaders load_tokenizer chooses between.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& folder);
std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& folder);
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& gguf_path);

}  // namespace tandem::text
