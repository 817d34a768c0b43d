#include "engine/text/tokenizer_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace tandem::text {

namespace {

using nlohmann::json;

std::optional<std::string> token_content(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& value = config[key];
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;  // null: the model has no such token
}

std::optional<bool> optional_flag(const json& config, const char* key) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  return config[key].get<bool>();
}

bool flag(const json& node, const char* key) {
  return node.contains(key) && !node[key].is_null() && node[key].get<bool>();
}

}  // namespace

std::optional<TokenizerConfig> read_tokenizer_config(const std::filesystem::path& folder) {
  const std::filesystem::path file = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(file)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw std::runtime_error("Could not read " + file.string() +
                             ". Check that the file is readable.");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    const json root = json::parse(text.str());
    if (!root.is_object()) throw std::runtime_error(file.string() + " is not a JSON object.");
    TokenizerConfig config;
    config.bos = token_content(root, "bos_token");
    config.eos = token_content(root, "eos_token");
    config.pad = token_content(root, "pad_token");
    config.unknown = token_content(root, "unk_token");
    config.add_bos = optional_flag(root, "add_bos_token");
    config.add_eos = optional_flag(root, "add_eos_token");
    if (root.contains("tokenizer_class") && root["tokenizer_class"].is_string()) {
      config.tokenizer_class = root["tokenizer_class"].get<std::string>();
    }
    if (root.contains("auto_map") && root["auto_map"].is_object() &&
        root["auto_map"].contains("AutoTokenizer")) {
      const json& classes = root["auto_map"]["AutoTokenizer"];
      if (classes.is_string()) config.auto_tokenizer = classes.get<std::string>();
      if (classes.is_array() && !classes.empty() && classes[0].is_string()) {
        config.auto_tokenizer = classes[0].get<std::string>();
      }
    }
    if (root.contains("added_tokens_decoder") && root["added_tokens_decoder"].is_object()) {
      for (const auto& [key, token] : root["added_tokens_decoder"].items()) {
        TokenizerConfig::AddedToken added;
        std::size_t consumed = 0;
        const long long id = std::stoll(key, &consumed);
        if (consumed != key.size() || id < 0 || id > INT32_MAX) {
          throw std::runtime_error(file.string() + " lists the added token id \"" + key +
                                   "\", which is not a token id. Download the file again.");
        }
        added.id = static_cast<TokenId>(id);
        added.content = token.at("content").get<std::string>();
        added.special = flag(token, "special");
        added.strip_left = flag(token, "lstrip");
        added.strip_right = flag(token, "rstrip");
        added.single_word = flag(token, "single_word");
        config.added_tokens.push_back(std::move(added));
      }
    }
    return config;
  } catch (const json::parse_error& error) {
    throw std::runtime_error(file.string() + " is not valid JSON (" + error.what() +
                             "). The download may be incomplete; download the file again.");
  } catch (const json::exception& error) {
    throw std::runtime_error(file.string() + " has an unexpected structure (" + error.what() +
                             "). Download the model folder again.");
  } catch (const std::logic_error&) {  // std::stoll on a key that is not a number
    throw std::runtime_error(file.string() +
                             " lists an added token whose id is not a number. Download the "
                             "file again.");
  }
}

}  // namespace tandem::text
