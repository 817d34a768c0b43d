// Builds a BPE tokenizer (byte-level, or SentencePiece-style with "▁" and byte fallback)
// from a Hugging Face model folder: tokenizer.json (the model, normalizer, pre-tokenizer,
// post-processor, decoder and added tokens) and tokenizer_config.json (which added tokens
// are bos / eos / pad and whether they are added). Every step a file names is either
// implemented exactly or refused with a sentence naming it: a tokenizer that silently
// skipped a step would give the model other ids than it was trained on.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "engine/text/bpe_tokenizer.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_config.h"

namespace tandem::text {

namespace {

// How far beyond the number of tokens a file lists an id may go (reserved gaps).
constexpr std::int64_t kIdGapAllowed = 1 << 16;

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

// What the post-processor puts around the text when special tokens are added.
struct Template {
  std::vector<TokenId> prefix, suffix;
};

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

  // A Split or Replace pattern: {"String": "..."} or {"Regex": "..."}.
  TokenizerRegex pattern_of(const json& node, const std::string& where) const {
    const json& pattern = node.value("pattern", json::object());
    try {
      if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
        return TokenizerRegex(pattern["Regex"].get<std::string>(), RegexDialect::kOniguruma);
      }
      if (pattern.contains("String") && pattern["String"].is_string()) {
        return TokenizerRegex::literal(pattern["String"].get<std::string>());
      }
    } catch (const std::invalid_argument& error) {
      fail(std::string("in its ") + where + ", " + error.what());
    }
    fail(std::string("a ") + where + " has neither a \"Regex\" nor a \"String\" pattern");
  }

  SplitBehavior behavior_of(const json& node, const std::string& where) const {
    const std::string behavior = node.value("behavior", std::string("Isolated"));
    if (behavior == "Isolated") return SplitBehavior::kIsolated;
    if (behavior == "Removed") return SplitBehavior::kRemoved;
    if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (behavior == "Contiguous") return SplitBehavior::kContiguous;
    fail("a " + where + " pre-tokenizer has the unknown behavior \"" + behavior + "\"");
  }

  // Returns whether the step writes text in the byte-level alphabet.
  bool add_normalizer(const json& node, Normalizer& normalizer) const {
    if (node.is_null()) return false;
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
      normalizer.add_replace(pattern_of(node, "Replace normalizer"),
                             node.at("content").get<std::string>());
    } else if (type == "Lowercase") {
      normalizer.add_lowercase();
    } else if (type == "Strip") {
      normalizer.add_strip(flag(node, "strip_left", true), flag(node, "strip_right", true));
    } else if (type == "StripAccents") {
      normalizer.add_strip_accents();
    } else if (type == "BertNormalizer") {
      const bool lowercase = flag(node, "lowercase", true);
      if (flag(node, "clean_text", true)) normalizer.add_bert_clean_text();
      if (flag(node, "handle_chinese_chars", true)) normalizer.add_bert_chinese_padding();
      // strip_accents null follows lowercase, as in Hugging Face.
      if (flag(node, "strip_accents", lowercase)) normalizer.add_bert_strip_accents();
      if (lowercase) normalizer.add_lowercase();
    } else if (type == "Nmt") {
      normalizer.add_nmt();
    } else if (type == "ByteLevel") {
      normalizer.add_byte_level_alphabet();
      return true;
    } else if (type == "Sequence") {
      bool byte_level = false;
      for (const json& step : node.value("normalizers", json::array())) {
        byte_level = add_normalizer(step, normalizer) || byte_level;
      }
      return byte_level;
    } else if (type == "Precompiled") {
      // An empty character map changes nothing; a real one is SentencePiece's compiled
      // normalization rules, which Tandem does not read.
      const json& map = node.value("precompiled_charsmap", json());
      if (!map.is_null() && !(map.is_string() && map.get<std::string>().empty())) {
        fail(
            "its normalizer \"Precompiled\" holds SentencePiece's compiled normalization rules, "
            "which Tandem does not read; use the model's .gguf file instead");
      }
    } else {
      fail("its normalizer \"" + type +
           "\" is not supported; Tandem knows NFC, NFD, NFKC, NFKD, Prepend, Replace, "
           "Lowercase, Strip, StripAccents, BertNormalizer, Nmt, ByteLevel, Precompiled (empty) "
           "and Sequence");
    }
    return false;
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
    } else if (type == "ByteLevel") {
      options.byte_level = true;
    } else if (type != "ByteFallback" && type != "Fuse") {
      fail("its decoder \"" + type +
           "\" is not supported; Tandem knows ByteLevel, Metaspace, Replace, ByteFallback, "
           "Fuse, Strip and Sequence (WordPiece, BPEDecoder and CTC belong to models Tandem "
           "does not run)");
    }
  }

  // Adds the steps of `node` to `pre`; returns whether a step writes the byte-level
  // alphabet.
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
      // trim_offsets changes offsets only, never ids.
      if (flag(node, "add_prefix_space", true)) pre.add_prefix_space();
      if (flag(node, "use_regex", true))
        pre.add_split(RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated));
      pre.add_byte_level_alphabet();
      return true;
    }
    if (type == "Metaspace") {
      pre.add_metaspace(metaspace_options(node));
    } else if (type == "Split") {
      pre.add_split(RegexSplit(pattern_of(node, "Split pre-tokenizer"), behavior_of(node, "Split"),
                               flag(node, "invert", false)));
    } else if (type == "Whitespace") {
      pre.add_split(whitespace_words());
    } else if (type == "WhitespaceSplit") {
      pre.add_split(whitespace_split());
    } else if (type == "BertPreTokenizer") {
      pre.add_split(whitespace_split());
      pre.add_split(punctuation_split(SplitBehavior::kIsolated));
    } else if (type == "Digits") {
      pre.add_split(digits_split(flag(node, "individual_digits", false)));
    } else if (type == "Punctuation") {
      pre.add_split(punctuation_split(behavior_of(node, "Punctuation")));
    } else if (type == "CharDelimiterSplit") {
      const std::string delimiter = node.at("delimiter").get<std::string>();
      if (delimiter.empty()) fail("its CharDelimiterSplit has an empty delimiter");
      pre.add_split(char_delimiter_split(delimiter));
    } else if (type == "UnicodeScripts") {
      pre.add_unicode_scripts();
    } else if (type == "FixedLength") {
      const json& length = node.value("length", json(5));
      if (!length.is_number_unsigned() || length.get<std::uint64_t>() == 0) {
        fail("its FixedLength pre-tokenizer has no positive length");
      }
      pre.add_fixed_length(length.get<std::size_t>());
    } else {
      fail("its pre-tokenizer \"" + type +
           "\" is not supported; Tandem knows Sequence, Split, ByteLevel, Metaspace, "
           "Whitespace, WhitespaceSplit, BertPreTokenizer, Digits, Punctuation, "
           "CharDelimiterSplit, UnicodeScripts and FixedLength");
    }
    return false;
  }

  // The special tokens of a post-processor template entry, by their name in the
  // template's special_tokens table.
  std::vector<TokenId> template_ids(const json& processor, const std::string& name) const {
    const json& table = processor.value("special_tokens", json::object());
    if (!table.contains(name)) {
      fail("its post-processor template names \"" + name + "\", which it does not define");
    }
    return table[name].at("ids").get<std::vector<TokenId>>();
  }

  void read_post_processor(const json& node, Template& result) const {
    if (node.is_null()) return;
    const std::string type = type_of(node, "the post_processor");
    if (type == "Sequence") {
      for (const json& step : node.value("processors", json::array())) {
        read_post_processor(step, result);
      }
    } else if (type == "ByteLevel") {
      // Offsets only.
    } else if (type == "TemplateProcessing") {
      bool after_text = false;
      for (const json& piece : node.at("single")) {
        if (piece.contains("Sequence")) {
          if (piece["Sequence"].value("id", std::string("A")) != "A" || after_text) {
            fail("its post-processor template for single texts is not one text");
          }
          after_text = true;
        } else if (piece.contains("SpecialToken")) {
          const std::vector<TokenId> ids =
              template_ids(node, piece["SpecialToken"].at("id").get<std::string>());
          std::vector<TokenId>& side = after_text ? result.suffix : result.prefix;
          side.insert(side.end(), ids.begin(), ids.end());
        } else {
          fail("its post-processor template has a piece that is neither text nor token");
        }
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      result.prefix.push_back(node.at("cls").at(1).get<TokenId>());
      result.suffix.push_back(node.at("sep").at(1).get<TokenId>());
    } else {
      fail("its post-processor \"" + type +
           "\" is not supported; Tandem knows TemplateProcessing, ByteLevel, "
           "RobertaProcessing, BertProcessing and Sequence");
    }
  }

 private:
  fs::path file_;
};

std::unique_ptr<Tokenizer> build_tokenizer(const std::string& folder);

// The transformers classes that build their template from add_bos_token / add_eos_token
// instead of taking tokenizer.json's post-processor, with their defaults.
struct ClassDefaults {
  std::string_view name;
  bool add_bos, add_eos;
};
constexpr ClassDefaults kTemplateFromConfig[] = {
    {"LlamaTokenizer", true, false},      {"LlamaTokenizerFast", true, false},
    {"CodeLlamaTokenizer", true, false},  {"CodeLlamaTokenizerFast", true, false},
    {"GemmaTokenizer", true, false},      {"GemmaTokenizerFast", true, false},
    {"CohereTokenizerFast", true, false},
};

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
  // Ids run from 0 to about the number of tokens the file lists (real vocabularies leave
  // small gaps for reserved tokens); one far beyond would make a table of that size.
  const json no_added = json::array();
  const json& added_list = root.contains("added_tokens") && root["added_tokens"].is_array()
                               ? root["added_tokens"]
                               : no_added;
  const std::int64_t id_limit =
      static_cast<std::int64_t>(model["vocab"].size() + added_list.size()) + kIdGapAllowed;
  const auto check_id = [&](std::int64_t id, const std::string& text) {
    if (id >= id_limit)
      reader.fail("the token \"" + text + "\" has id " + std::to_string(id) + ", far beyond the " +
                  std::to_string(id_limit - kIdGapAllowed) +
                  " tokens the file lists; the file is damaged");
  };
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() > INT32_MAX) {
      reader.fail("the vocabulary entry \"" + text + "\" has no valid id");
    }
    check_id(id.get<std::int64_t>(), text);
    vocab.set(id.get<TokenId>(), TokenEntry{text});
  }
  for (const json& added : added_list) {
    if (!added.contains("id") || !added["id"].is_number_integer() || !added.contains("content") ||
        !added["content"].is_string()) {
      reader.fail("an entry of \"added_tokens\" lacks its id or content");
    }
    TokenEntry entry;
    entry.text = added["content"].get<std::string>();
    if (flag(added, "single_word", false)) {
      reader.fail("its added token \"" + entry.text +
                  "\" matches only as a single word (single_word), which Tandem does not "
                  "support");
    }
    entry.kind = flag(added, "special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    entry.strip_left = flag(added, "lstrip", false);
    entry.strip_right = flag(added, "rstrip", false);
    const auto id = added["id"].get<std::int64_t>();
    if (id < 0 || id > INT32_MAX)
      reader.fail("the added token \"" + entry.text + "\" has no valid id");
    check_id(id, entry.text);
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
  if (model.contains("dropout") && model["dropout"].is_number() &&
      model["dropout"].get<double>() > 0.0) {
    reader.fail(
        "its BPE model has dropout, which makes the reference tokenizer skip merges at "
        "random; set \"dropout\" to null to use it for inference");
  }
  Normalizer normalizer;
  bool byte_level = reader.add_normalizer(root.value("normalizer", json()), normalizer);
  PreTokenizer pre_tokenizer;
  byte_level = reader.add_pre_tokenizer_steps(root.value("pre_tokenizer", json()), pre_tokenizer) ||
               byte_level;
  Template special_template;
  reader.read_post_processor(root.value("post_processor", json()), special_template);
  BpeOptions options;
  options.byte_level = byte_level;
  reader.read_decoder(root.value("decoder", json()), options);
  options.ignore_merges = flag(model, "ignore_merges", false);
  options.byte_fallback = flag(model, "byte_fallback", false);
  options.fuse_unknown = flag(model, "fuse_unk", false);
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
  const std::optional<TokenizerConfig> config = read_tokenizer_config(folder);
  const ClassDefaults* class_defaults = nullptr;
  if (config) {
    const fs::path config_file = fs::path(folder) / "tokenizer_config.json";
    auto resolve = [&](const std::optional<std::string>& content,
                       const char* key) -> std::optional<TokenId> {
      if (!content) return std::nullopt;
      const auto id = vocab.find(*content);
      if (!id) {
        throw std::runtime_error(config_file.string() + " names " + key + " \"" + *content +
                                 "\", which tokenizer.json does not contain. The two files "
                                 "do not belong together; download the model folder again.");
      }
      return id;
    };
    policy.ids.bos = resolve(config->bos, "bos_token");
    policy.ids.eos = resolve(config->eos, "eos_token");
    policy.ids.pad = resolve(config->pad, "pad_token");
    if (!policy.ids.unknown) policy.ids.unknown = resolve(config->unknown, "unk_token");
    for (const ClassDefaults& defaults : kTemplateFromConfig) {
      if (defaults.name == config->tokenizer_class) class_defaults = &defaults;
    }
  }
  const bool has_post_processor =
      root.contains("post_processor") && !root["post_processor"].is_null();
  // Without a class the folder's model type picks one; files without a post-processor
  // come from converters that meant the config's flags.
  const bool class_named = config && !config->tokenizer_class.empty();
  if (class_defaults != nullptr || (!class_named && !has_post_processor)) {
    // The class rebuilds the template from the config's flags (transformers' Llama, Gemma
    // and Cohere tokenizers), or there is no template to follow.
    const bool bos_default = class_defaults != nullptr && class_defaults->add_bos;
    const bool eos_default = class_defaults != nullptr && class_defaults->add_eos;
    policy.add_bos = config && config->add_bos.value_or(bos_default) && policy.ids.bos;
    policy.add_eos = config && config->add_eos.value_or(eos_default) && policy.ids.eos;
  } else {
    // transformers' generic fast tokenizer adds what tokenizer.json's post-processor says,
    // whatever add_bos_token says.
    std::vector<TokenId>& prefix = special_template.prefix;
    std::vector<TokenId>& suffix = special_template.suffix;
    if (!prefix.empty() && policy.ids.bos == prefix.front()) {
      policy.add_bos = true;
      prefix.erase(prefix.begin());
    }
    if (!suffix.empty() && policy.ids.eos == suffix.back()) {
      policy.add_eos = true;
      suffix.pop_back();
    }
    policy.prefix = std::move(prefix);
    policy.suffix = std::move(suffix);
  }
  for (TokenId id : policy.prefix) {
    if (!vocab.contains(id))
      reader.fail("its post-processor adds the unknown id " + std::to_string(id));
  }
  for (TokenId id : policy.suffix) {
    if (!vocab.contains(id))
      reader.fail("its post-processor adds the unknown id " + std::to_string(id));
  }

  return std::make_unique<BpeTokenizer>(std::move(vocab), policy, merges, std::move(pre_tokenizer),
                                        std::move(normalizer), options);
}

}  // namespace

}  // namespace tandem::text
