// Builds a tokenizer from the tokenizer.ggml.* metadata of a GGUF file.
#include <stdexcept>

#include "engine/model/gguf/file.h"
#include "engine/model/gguf/set.h"
#include "engine/text/bpe_tokenizer.h"
#include "engine/text/spm_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace tandem::text {

namespace {

using model::GgufFile;
using model::GgufType;
using model::GgufValue;

class GgufVocabReader {
 public:
  explicit GgufVocabReader(const GgufFile& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("The tokenizer in " + file_.path() + " cannot be used: " + what + ".");
  }

  const GgufValue* find(const std::string& key) const { return file_.find(key); }

  const GgufValue& require(const std::string& key) const {
    const GgufValue* value = file_.find(key);
    if (value == nullptr) {
      fail("the metadata key " + key +
           " is missing (the file may hold weights without a "
           "vocabulary; use the model's original .gguf or its Hugging Face folder)");
    }
    return *value;
  }

  const model::GgufArray& require_array(const std::string& key, GgufType element_type) const {
    const GgufValue& value = require(key);
    if (value.type() != GgufType::kArray || value.as_array().element_type != element_type) {
      fail(key + " should be an array of " + model::gguf_type_name(element_type));
    }
    return value.as_array();
  }

  const std::string& require_string(const std::string& key) const {
    const GgufValue& value = require(key);
    if (value.type() != GgufType::kString) fail(key + " should be a string");
    return value.as_string();
  }

  std::string string_or(const std::string& key, const std::string& fallback) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return fallback;
    if (value->type() != GgufType::kString) fail(key + " should be a string");
    return value->as_string();
  }

  bool bool_or(const std::string& key, bool fallback) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return fallback;
    if (value->type() != GgufType::kBool) fail(key + " should be a bool");
    return value->as_bool();
  }

  std::optional<TokenId> token_id(const std::string& key, std::size_t vocab_size) const {
    const GgufValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (!value->is_integer()) fail(key + " should be an integer");
    const std::int64_t id = value->as_int();
    // llama.cpp writes -1 (as uint32 0xFFFFFFFF in some converters) for "none".
    if (id < 0 || id == 0xFFFFFFFF) return std::nullopt;
    if (static_cast<std::uint64_t>(id) >= vocab_size) {
      fail(key + " is " + std::to_string(id) + ", outside the vocabulary of " +
           std::to_string(vocab_size) + " tokens");
    }
    return static_cast<TokenId>(id);
  }

 private:
  const GgufFile& file_;
};

TokenKind token_kind_from_gguf(std::int64_t type) {
  if (type >= 1 && type <= 6) return static_cast<TokenKind>(type);
  return TokenKind::kNormal;  // 0 ("undefined") and unknown numbers read as normal text
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& gguf_path) {
  // The vocabulary is in the first part of a split set.
  const auto split = model::parse_gguf_split_name(gguf_path);
  const GgufFile file(split ? split->part_path(1) : gguf_path);
  const GgufVocabReader reader(file);

  const std::string model_type = reader.require_string("tokenizer.ggml.model");
  // "gemma4" and "whitespace" are BPE vocabularies whose tokens are plain UTF-8.
  if (model_type != "gpt2" && model_type != "llama" && model_type != "gemma4" &&
      model_type != "whitespace") {
    reader.fail("its tokenizer type \"" + model_type +
                "\" is not supported; Tandem reads \"gpt2\" (byte-level BPE), \"gemma4\" and "
                "\"whitespace\" (BPE) and \"llama\" (SentencePiece) vocabularies");
  }

  const auto& tokens = reader.require_array("tokenizer.ggml.tokens", GgufType::kString);
  const model::GgufArray* scores = nullptr;
  if (reader.find("tokenizer.ggml.scores") != nullptr) {
    scores = &reader.require_array("tokenizer.ggml.scores", GgufType::kFloat32);
  }
  const model::GgufArray* types = nullptr;
  if (const GgufValue* value = reader.find("tokenizer.ggml.token_type")) {
    if (value->type() != GgufType::kArray ||
        (!value->as_array().elements.empty() && !value->as_array().elements[0].is_integer())) {
      reader.fail("tokenizer.ggml.token_type should be an array of integers");
    }
    types = &value->as_array();
  }
  const std::size_t count = tokens.elements.size();
  if (scores != nullptr && scores->elements.size() != count) {
    reader.fail("tokenizer.ggml.scores has " + std::to_string(scores->elements.size()) +
                " entries for " + std::to_string(count) + " tokens");
  }
  if (types != nullptr && types->elements.size() != count) {
    reader.fail("tokenizer.ggml.token_type has " + std::to_string(types->elements.size()) +
                " entries for " + std::to_string(count) + " tokens");
  }
  if (count == 0) reader.fail("tokenizer.ggml.tokens is empty");

  Vocabulary vocab;
  for (std::size_t i = 0; i < count; ++i) {
    TokenEntry entry;
    entry.text = tokens.elements[i].as_string();
    if (scores != nullptr) entry.score = static_cast<float>(scores->elements[i].as_float());
    if (types != nullptr) entry.kind = token_kind_from_gguf(types->elements[i].as_int());
    vocab.add(std::move(entry));
  }

  const bool is_spm = model_type == "llama";
  SpecialTokenPolicy policy;
  policy.ids.bos = reader.token_id("tokenizer.ggml.bos_token_id", count);
  policy.ids.eos = reader.token_id("tokenizer.ggml.eos_token_id", count);
  policy.ids.pad = reader.token_id("tokenizer.ggml.padding_token_id", count);
  policy.ids.unknown = reader.token_id("tokenizer.ggml.unknown_token_id", count);
  policy.add_eos = reader.bool_or("tokenizer.ggml.add_eos_token", false);

  if (is_spm) {
    // SentencePiece models add bos unless the file says otherwise.
    policy.add_bos = reader.bool_or("tokenizer.ggml.add_bos_token", true);
    return std::make_unique<SpmTokenizer>(std::move(vocab), policy,
                                          reader.bool_or("tokenizer.ggml.add_space_prefix", true));
  }

  // llama.cpp runs Gemma 4 vocabularies with their own pre-tokenizer whatever the file says.
  const std::string pre = model_type == "gemma4"
                              ? std::string("gemma4")
                              : reader.string_or("tokenizer.ggml.pre", "default");
  NamedPreTokenizer named;
  try {
    named = pre_tokenizer_for_gguf(pre);
  } catch (const std::invalid_argument& error) {
    reader.fail(error.what());
  }
  // BPE models add bos only when told, except for the families llama.cpp defaults to it.
  policy.add_bos = reader.bool_or("tokenizer.ggml.add_bos_token", named.adds_bos);
  if (named.forces_bos) policy.add_bos = true;

  std::vector<std::pair<std::string, std::string>> merges;
  // tiktoken vocabularies (Kimi-K2) merge by rank and may come without a merge list.
  if (!named.merges_by_rank || reader.find("tokenizer.ggml.merges") != nullptr) {
    const auto& merge_texts = reader.require_array("tokenizer.ggml.merges", GgufType::kString);
    merges.reserve(merge_texts.elements.size());
    for (const GgufValue& merge : merge_texts.elements) {
      const std::string& text = merge.as_string();
      // Merge texts hold no spaces (byte-level writes a space as "Ġ"), so the first space
      // separates the pair; searching from 1 keeps a pair whose left side is " " intact.
      const std::size_t space = text.find(' ', 1);
      if (space == std::string::npos) {
        reader.fail("the merge \"" + text + "\" is not two symbols separated by a space");
      }
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    }
  }
  if (named.merges_by_rank) merges.clear();

  Normalizer normalizer;
  if (named.escapes_spaces) normalizer.add_replace(" ", "\xE2\x96\x81");
  if (model_type == "whitespace" && reader.bool_or("tokenizer.ggml.normalizer.lowercase", false)) {
    normalizer.add_lowercase();
  }
  BpeOptions options;
  options.byte_level = named.byte_level;
  options.byte_fallback = !named.byte_level;
  options.decode_space_mark = named.escapes_spaces;
  options.ignore_merges = named.ignore_merges;
  options.merges_by_rank = named.merges_by_rank;
  options.whole_newline_runs = named.newline_runs_whole;
  return std::make_unique<BpeTokenizer>(std::move(vocab), policy, merges,
                                        std::move(named.pre_tokenizer), std::move(normalizer),
                                        options);
}

}  // namespace tandem::text
