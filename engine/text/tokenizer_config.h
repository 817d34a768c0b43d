// tokenizer_config.json: what a Hugging Face model folder says about its special tokens
// beside the vocabulary file (which tokens are bos / eos / pad / unk, whether bos and eos
// are added, the added tokens by id, and the tokenizer class transformers would load).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/text/vocabulary.h"

namespace tandem::text {

struct TokenizerConfig {
  // Contents of the named tokens; absent or null in the file: none.
  std::optional<std::string> bos, eos, pad, unknown;
  std::optional<bool> add_bos, add_eos;  // absent: the tokenizer class decides
  std::string tokenizer_class;           // "LlamaTokenizerFast", "TikTokenTokenizer", ...
  std::string auto_tokenizer;  // auto_map.AutoTokenizer: "tokenization_kimi.TikTokenTokenizer"

  struct AddedToken {
    TokenId id;
    std::string content;
    bool special = false;
    bool strip_left = false, strip_right = false;
    bool single_word = false;
  };
  std::vector<AddedToken> added_tokens;  // added_tokens_decoder, by id
};

// Reads `folder`/tokenizer_config.json, or nothing when the folder has none. Throws
// std::runtime_error with a sentence naming the file when it is not valid JSON or a field
// has the wrong type.
std::optional<TokenizerConfig> read_tokenizer_config(const std::filesystem::path& folder);

}  // namespace tandem::text
