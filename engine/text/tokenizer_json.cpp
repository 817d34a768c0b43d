// Builds a BPE tokenizer (byte-level, or SentencePiece-style with "▁" and byte fallback)
// from a Hugging Face model folder: tokenizer.json (the
// model, normalizer, pre-tokenizer and added tokens) and tokenizer_config.json (which
// added tokens are bos / eos / pad and whether they are added).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/text/bpe_tokenizer.h"
#include "engine/text/tokenizer.h"

namespace tandem::text {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A boolean option; absent or null means the default, as in the Hugging Face loaders.
bool flag(const json& node, const char* key, bool fallback) {
  if (!node.is_object() || !node.contains(key) || node[key].is_null()) return fallback;
  return node[key].get<bool>();
}

json read_json(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw std::runtime_error("Could not read " + file.string() +
                             ". Check that the file is readable.");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::parse_error& error) {
    throw std::runtime_error(file.string() + " is not valid JSON (" + error.what() +
                             "). The download may be incomplete; download the file again.");
  }
}

class TokenizerJsonReader {
 public:
  explicit TokenizerJsonReader(fs::path file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("The tokenizer in " + file_.string() + " cannot be used: " + what +
                             ".");
  }

  std::string type_of(const json& node, const std::string& where) const {
    if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
      fail(where + " has no \"type\"");
    }
    return node["type"].get<std::string>();
  }

  void add_normalizer(const json& node, Normalizer& normalizer) const {
    if (node.is_null()) return;
    const std::string type = type_of(node, "the normalizer");
    if (type == "NFC") {
      normalizer.add_normal_form(NormalForm::kNfc);
    } else if (type == "NFD") {
      normalizer.add_normal_form(NormalForm::kNfd);
    } else if (type == "NFKC") {
      normalizer.add_normal_form(NormalForm::kNfkc);
    } else if (type == "NFKD") {
      normalizer.add_normal_form(NormalForm::kNfkd);
    } else if (type == "Prepend") {
      normalizer.add_prepend(node.at("prepend").get<std::string>());
    } else if (type == "Replace") {
      const json& pattern = node.at("pattern");
      if (!pattern.contains("String")) {
        fail("its Replace normalizer uses a regex pattern; Tandem replaces literal strings only");
      }
      normalizer.add_replace(pattern["String"].get<std::string>(),
                             node.at("content").get<std::string>());
    } else if (type == "Sequence") {
      for (const json& step : node.value("normalizers", json::array())) {
        add_normalizer(step, normalizer);
      }
    } else {
      fail("its normalizer \"" + type +
           "\" is not supported; Tandem knows NFC, NFD, NFKC, NFKD, Prepend, Replace and "
           "Sequence");
    }
  }

  static MetaspaceOptions metaspace_options(const json& node) {
    MetaspaceOptions options;
    options.replacement = node.value("replacement", options.replacement);
    // Files written before tokenizers 0.14 say add_prefix_space instead of prepend_scheme.
    const std::string scheme = node.contains("prepend_scheme")
                                   ? node["prepend_scheme"].get<std::string>()
                                   : (flag(node, "add_prefix_space", true) ? "always" : "never");
    options.prepend = scheme == "first"   ? MetaspaceOptions::Prepend::kFirst
                      : scheme == "never" ? MetaspaceOptions::Prepend::kNever
                                          : MetaspaceOptions::Prepend::kAlways;
    options.split = flag(node, "split", true);
    return options;
  }

  void read_decoder(const json& node, BpeOptions& options) const {
    if (node.is_null()) return;
    const std::string type = type_of(node, "the decoder");
    if (type == "Sequence") {
      for (const json& step : node.value("decoders", json::array())) read_decoder(step, options);
    } else if (type == "Metaspace") {
      options.decode_space_mark = true;
      options.strip_leading_space =
          metaspace_options(node).prepend != MetaspaceOptions::Prepend::kNever;
    } else if (type == "Replace") {
      const json& pattern = node.at("pattern");
      if (pattern.value("String", std::string()) != "\xE2\x96\x81" ||
          node.at("content").get<std::string>() != " ") {
        fail("its Replace decoder does something other than turning \"\xE2\x96\x81\" into spaces");
      }
      options.decode_space_mark = true;
    } else if (type == "Strip") {
      if (node.value("start", 0) > 0) options.strip_leading_space = true;
    } else if (type != "ByteLevel" && type != "ByteFallback" && type != "Fuse") {
      fail("its decoder \"" + type +
           "\" is not supported; Tandem knows ByteLevel, Metaspace, Replace, ByteFallback, "
           "Fuse, Strip and Sequence");
    }
  }

  // Adds the regex steps to `pre`; records in `options` whether the words are mapped to
  // the byte-level alphabet or go through Metaspace.
  void add_pre_tokenizer_steps(const json& node, PreTokenizer& pre, BpeOptions& options) const {
    if (node.is_null()) return;
    const std::string type = type_of(node, "the pre_tokenizer");
    if (type == "Sequence") {
      for (const json& step : node.value("pretokenizers", json::array())) {
        add_pre_tokenizer_steps(step, pre, options);
      }
      return;
    }
    if (type == "ByteLevel") {
      if (flag(node, "add_prefix_space", false)) pre.add_prefix_space();
      if (flag(node, "use_regex", true))
        pre.add_split(RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated));
      options.byte_level = true;
      return;
    }
    if (type == "Metaspace") {
      options.metaspace = metaspace_options(node);
      return;
    }
    if (type == "Split") {
      const json& pattern = node.value("pattern", json::object());
      std::string text;
      bool literal = false;
      if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
        text = pattern["Regex"].get<std::string>();
      } else if (pattern.contains("String") && pattern["String"].is_string()) {
        text = pattern["String"].get<std::string>();
        literal = true;
      } else {
        fail("a Split pre-tokenizer has neither a \"Regex\" nor a \"String\" pattern");
      }
      const std::string behavior = node.value("behavior", std::string("Isolated"));
      SplitBehavior split_behavior;
      if (behavior == "Isolated")
        split_behavior = SplitBehavior::kIsolated;
      else if (behavior == "Removed")
        split_behavior = SplitBehavior::kRemoved;
      else if (behavior == "MergedWithPrevious")
        split_behavior = SplitBehavior::kMergedWithPrevious;
      else if (behavior == "MergedWithNext")
        split_behavior = SplitBehavior::kMergedWithNext;
      else if (behavior == "Contiguous")
        split_behavior = SplitBehavior::kContiguous;
      else
        fail("a Split pre-tokenizer has the unknown behavior \"" + behavior + "\"");
      try {
        pre.add_split(RegexSplit(text, split_behavior, flag(node, "invert", false), literal));
      } catch (const std::invalid_argument& error) {
        fail(error.what());
      }
      return;
    }
    fail("its pre-tokenizer \"" + type +
         "\" is not supported; Tandem knows Sequence, Split, ByteLevel and Metaspace");
  }

 private:
  fs::path file_;
};

std::optional<std::string> token_content(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;  // null: the model has no such token
}

std::unique_ptr<Tokenizer> build_tokenizer(const std::string& folder);

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& folder) {
  try {
    return build_tokenizer(folder);
  } catch (const json::exception& error) {
    // A field of an unexpected JSON type ("add_bos_token": "yes"), caught here once
    // instead of at every field.
    throw std::runtime_error("The tokenizer files in " + folder +
                             " have an unexpected structure (" + error.what() +
                             "). Download the model folder again, or give a .gguf file.");
  }
}

namespace {

std::unique_ptr<Tokenizer> build_tokenizer(const std::string& folder) {
  const fs::path tokenizer_file = fs::path(folder) / "tokenizer.json";
  if (!fs::exists(tokenizer_file)) {
    throw std::runtime_error(folder +
                             " has no tokenizer.json. Download the complete model folder, "
                             "or give a .gguf file instead.");
  }
  const json root = read_json(tokenizer_file);
  const TokenizerJsonReader reader(tokenizer_file);
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object()) {
    reader.fail("it has no \"model\" object");
  }
  const json& model = root["model"];
  const std::string model_type = model.value("type", std::string("BPE"));
  if (model_type != "BPE") {
    reader.fail("its model type \"" + model_type +
                "\" is not supported; Tandem reads BPE models from tokenizer.json (and "
                "SentencePiece vocabularies from .gguf files)");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    reader.fail("its model has no \"vocab\" object");
  }

  Vocabulary vocab;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() > INT32_MAX) {
      reader.fail("the vocabulary entry \"" + text + "\" has no valid id");
    }
    vocab.set(id.get<TokenId>(), TokenEntry{text});
  }
  for (const json& added : root.value("added_tokens", json::array())) {
    if (!added.contains("id") || !added["id"].is_number_integer() || !added.contains("content") ||
        !added["content"].is_string()) {
      reader.fail("an entry of \"added_tokens\" lacks its id or content");
    }
    TokenEntry entry;
    entry.text = added["content"].get<std::string>();
    entry.kind = flag(added, "special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    entry.strip_left = flag(added, "lstrip", false);
    entry.strip_right = flag(added, "rstrip", false);
    const auto id = added["id"].get<std::int64_t>();
    if (id < 0 || id > INT32_MAX)
      reader.fail("the added token \"" + entry.text + "\" has no valid id");
    vocab.set(static_cast<TokenId>(id), std::move(entry));
  }

  std::vector<std::pair<std::string, std::string>> merges;
  for (const json& merge : model.value("merges", json::array())) {
    // Two forms exist: "a b" (tokenizers before 0.20) and ["a", "b"] (0.20 and later).
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const std::size_t space = text.find(' ', 1);
      if (space == std::string::npos) reader.fail("the merge \"" + text + "\" has no space");
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      reader.fail("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  auto non_empty_string = [&](const char* key) {
    return model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty();
  };
  if (non_empty_string("continuing_subword_prefix") || non_empty_string("end_of_word_suffix")) {
    reader.fail(
        "its BPE model marks word pieces (continuing_subword_prefix or "
        "end_of_word_suffix), which Tandem does not support");
  }
  Normalizer normalizer;
  reader.add_normalizer(root.value("normalizer", json()), normalizer);
  BpeOptions options;
  options.byte_level = false;
  PreTokenizer pre_tokenizer;
  reader.add_pre_tokenizer_steps(root.value("pre_tokenizer", json()), pre_tokenizer, options);
  reader.read_decoder(root.value("decoder", json()), options);
  options.ignore_merges = flag(model, "ignore_merges", false);
  options.byte_fallback = flag(model, "byte_fallback", false);
  if (options.byte_fallback) {
    for (TokenId id = 0; id < static_cast<TokenId>(vocab.size()); ++id) {
      TokenEntry& entry = vocab.at(id);
      if (entry.kind == TokenKind::kNormal && entry.text.size() == 6 &&
          entry.text.compare(0, 3, "<0x") == 0 && entry.text[5] == '>') {
        entry.kind = TokenKind::kByte;
      }
    }
  }

  SpecialTokenPolicy policy;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    policy.ids.unknown = vocab.find(model["unk_token"].get<std::string>());
  }
  const fs::path config_file = fs::path(folder) / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    const json config = read_json(config_file);
    auto resolve = [&](const char* key) -> std::optional<TokenId> {
      const auto content = token_content(config, key);
      if (!content) return std::nullopt;
      const auto id = vocab.find(*content);
      if (!id) {
        throw std::runtime_error(config_file.string() + " names " + key + " \"" + *content +
                                 "\", which tokenizer.json does not contain. The two files "
                                 "do not belong together; download the model folder again.");
      }
      return id;
    };
    policy.ids.bos = resolve("bos_token");
    policy.ids.eos = resolve("eos_token");
    policy.ids.pad = resolve("pad_token");
    if (!policy.ids.unknown) policy.ids.unknown = resolve("unk_token");
    policy.add_bos = flag(config, "add_bos_token", false) && policy.ids.bos.has_value();
    policy.add_eos = flag(config, "add_eos_token", false) && policy.ids.eos.has_value();
  }

  return std::make_unique<BpeTokenizer>(std::move(vocab), policy, merges, std::move(pre_tokenizer),
                                        std::move(normalizer), options);
}

}  // namespace

}  // namespace tandem::text
