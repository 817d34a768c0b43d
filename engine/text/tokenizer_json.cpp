// Builds a byte-level BPE tokenizer from a Hugging Face model folder: tokenizer.json (the
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

  void add_normal_forms(const json& node, std::vector<NormalForm>& steps) const {
    if (node.is_null()) return;
    const std::string type = type_of(node, "the normalizer");
    if (type == "NFC")
      steps.push_back(NormalForm::kNfc);
    else if (type == "NFD")
      steps.push_back(NormalForm::kNfd);
    else if (type == "NFKC")
      steps.push_back(NormalForm::kNfkc);
    else if (type == "NFKD")
      steps.push_back(NormalForm::kNfkd);
    else if (type == "Sequence") {
      for (const json& step : node.value("normalizers", json::array()))
        add_normal_forms(step, steps);
    } else {
      fail("its normalizer \"" + type +
           "\" is not supported; Tandem knows NFC, NFD, NFKC, NFKD and Sequence");
    }
  }

  // Returns whether the steps include the byte-level mapping.
  bool add_pre_tokenizer_steps(const json& node, PreTokenizer& pre) const {
    if (node.is_null()) return false;
    const std::string type = type_of(node, "the pre_tokenizer");
    if (type == "Sequence") {
      bool byte_level = false;
      for (const json& step : node.value("pretokenizers", json::array())) {
        byte_level = add_pre_tokenizer_steps(step, pre) || byte_level;
      }
      return byte_level;
    }
    if (type == "ByteLevel") {
      if (node.value("add_prefix_space", false)) pre.add_prefix_space();
      if (node.value("use_regex", true))
        pre.add_split(RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated));
      return true;
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
        pre.add_split(RegexSplit(text, split_behavior, node.value("invert", false), literal));
      } catch (const std::invalid_argument& error) {
        fail(error.what());
      }
      return false;
    }
    fail("its pre-tokenizer \"" + type +
         "\" is not supported; Tandem knows Sequence, Split and ByteLevel");
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
    entry.kind = added.value("special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    entry.strip_left = added.value("lstrip", false);
    entry.strip_right = added.value("rstrip", false);
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

  std::vector<NormalForm> normal_forms;
  reader.add_normal_forms(root.value("normalizer", json()), normal_forms);
  PreTokenizer pre_tokenizer;
  if (!reader.add_pre_tokenizer_steps(root.value("pre_tokenizer", json()), pre_tokenizer)) {
    reader.fail(
        "it has no ByteLevel pre-tokenizer, so it is not a byte-level BPE; use the "
        "model's .gguf file instead");
  }

  BpeOptions options;
  options.ignore_merges = model.value("ignore_merges", false);
  options.byte_fallback = model.value("byte_fallback", false);
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
    policy.add_bos = config.value("add_bos_token", false) && policy.ids.bos.has_value();
    policy.add_eos = config.value("add_eos_token", false) && policy.ids.eos.has_value();
  }

  return std::make_unique<BpeTokenizer>(std::move(vocab), policy, merges, std::move(pre_tokenizer),
                                        Normalizer(std::move(normal_forms)), options);
}

}  // namespace

}  // namespace tandem::text
