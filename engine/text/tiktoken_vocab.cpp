// Builds Kimi's tokenizer from a model folder that ships tiktoken.model instead of
// tokenizer.json (Kimi-K2, Kimi-K2.5): one line per token, its bytes in base64 and its
// rank, which is also its id. tokenization_kimi.py (the model's own Python class, which
// Tandem never runs) adds its split pattern and 258 special tokens after the ranks, named by
// tokenizer_config.json's added_tokens_decoder or "<|reserved_token_N|>".
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "engine/text/bpe_tokenizer.h"
#include "engine/text/byte_level.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tokenizer_config.h"

namespace tandem::text {

namespace {

namespace fs = std::filesystem;

// tokenization_kimi.py's num_reserved_special_tokens is 256, and it adds two more.
constexpr int kKimiSpecialTokens = 256 + 2;

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw std::runtime_error("Could not read " + file.string() +
                             ". Check that the file is readable.");
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> decode_base64(std::string_view text) {
  std::string bytes;
  std::uint32_t buffer = 0;
  int bits = 0;
  std::size_t at = 0;
  for (; at < text.size() && text[at] != '='; ++at) {
    const int value = base64_value(text[at]);
    if (value < 0) return std::nullopt;
    buffer = (buffer << 6) | static_cast<std::uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((buffer >> bits) & 0xFF);
    }
  }
  for (; at < text.size(); ++at) {
    if (text[at] != '=') return std::nullopt;
  }
  return bytes;
}

class TiktokenReader {
 public:
  explicit TiktokenReader(fs::path folder) : folder_(std::move(folder)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("The tokenizer in " + (folder_ / "tiktoken.model").string() +
                             " cannot be used: " + what + ".");
  }

  // tiktoken.model names no split pattern; the Python class beside it does. Tandem knows
  // Kimi's, and checks that the folder's class is Kimi's and still splits that way.
  void check_kimi(const std::optional<TokenizerConfig>& config) const {
    const bool is_kimi = config && config->tokenizer_class == "TikTokenTokenizer" &&
                         config->auto_tokenizer.starts_with("tokenization_kimi.");
    if (!is_kimi) {
      fail(
          "it comes without the tokenizer_config.json of Kimi's TikTokenTokenizer, and a "
          "tiktoken vocabulary does not say how it splits text; Tandem runs Kimi's. Download "
          "the model's tokenizer_config.json too");
    }
    const fs::path code = folder_ / "tokenization_kimi.py";
    if (!fs::exists(code)) return;
    const std::string source = read_text(code);
    std::size_t at = 0;
    for (std::string_view alternative : kimi_k2_pattern_alternatives()) {
      at = source.find("r\"\"\"" + std::string(alternative) + "\"\"\"", at);
      if (at == std::string::npos) {
        fail(
            "its tokenization_kimi.py splits text with another pattern than Kimi-K2's, which "
            "is the one Tandem knows");
      }
    }
    if (source.find("num_reserved_special_tokens = 256") == std::string::npos) {
      fail(
          "its tokenization_kimi.py reserves another number of special tokens than "
          "Kimi-K2's 256");
    }
  }

  // Ranks are ids; every rank and every byte string occurs once.
  Vocabulary read_ranks() const {
    const std::string text = read_text(folder_ / "tiktoken.model");
    std::vector<std::string> by_rank;
    std::vector<bool> seen;
    std::istringstream lines(text);
    std::string line;
    std::size_t number = 0;
    while (std::getline(lines, line)) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const std::size_t space = line.find(' ');
      const auto where = [&] { return "line " + std::to_string(number); };
      if (space == std::string::npos) fail(where() + " is not \"<base64> <rank>\"");
      const std::optional<std::string> bytes = decode_base64(line.substr(0, space));
      if (!bytes || bytes->empty()) fail(where() + " does not start with base64 bytes");
      std::size_t consumed = 0;
      long long rank = -1;
      try {
        rank = std::stoll(line.substr(space + 1), &consumed);
      } catch (const std::logic_error&) {
      }
      if (rank < 0 || rank > INT32_MAX || consumed != line.size() - space - 1) {
        fail(where() + " has no valid rank");
      }
      const auto index = static_cast<std::size_t>(rank);
      if (index >= by_rank.size()) {
        by_rank.resize(index + 1);
        seen.resize(index + 1, false);
      }
      if (seen[index]) fail(where() + " repeats the rank " + std::to_string(rank));
      seen[index] = true;
      by_rank[index] = *bytes;
    }
    if (by_rank.empty()) fail("it holds no tokens");
    Vocabulary vocab;
    for (std::size_t rank = 0; rank < by_rank.size(); ++rank) {
      if (!seen[rank]) fail("the rank " + std::to_string(rank) + " is missing");
      // Stored like a byte-level BPE vocabulary, so that pieces and decoding work as there.
      const std::string text = to_byte_level(by_rank[rank]);
      if (vocab.find(text)) fail("two ranks hold the same bytes");
      vocab.add(TokenEntry{text});
    }
    return vocab;
  }

 private:
  fs::path folder_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tiktoken_tokenizer(const std::string& folder) {
  const TiktokenReader reader(folder);
  const std::optional<TokenizerConfig> config = read_tokenizer_config(folder);
  reader.check_kimi(config);
  Vocabulary vocab = reader.read_ranks();

  const auto base_count = static_cast<TokenId>(vocab.size());
  std::map<TokenId, const TokenizerConfig::AddedToken*> added_by_id;
  for (const TokenizerConfig::AddedToken& added : config->added_tokens) {
    added_by_id[added.id] = &added;
  }
  for (TokenId id = base_count; id < base_count + kKimiSpecialTokens; ++id) {
    TokenEntry entry;
    entry.kind = TokenKind::kControl;
    const auto it = added_by_id.find(id);
    if (it != added_by_id.end()) {
      entry.text = it->second->content;
      entry.strip_left = it->second->strip_left;
      entry.strip_right = it->second->strip_right;
      if (it->second->single_word) {
        reader.fail("its added token \"" + entry.text +
                    "\" matches only as a single word (single_word), which Tandem does not "
                    "support");
      }
    } else {
      entry.text = "<|reserved_token_" + std::to_string(id) + "|>";
    }
    vocab.set(id, std::move(entry));
  }
  for (const TokenizerConfig::AddedToken& added : config->added_tokens) {
    if (added.id < base_count + kKimiSpecialTokens && added.id >= base_count) continue;
    // Added tokens outside the special range are matched as text always is.
    TokenEntry entry{added.content};
    entry.kind = added.special ? TokenKind::kControl : TokenKind::kUserDefined;
    entry.strip_left = added.strip_left;
    entry.strip_right = added.strip_right;
    vocab.set(added.id, std::move(entry));
  }

  SpecialTokenPolicy policy;
  auto resolve = [&](const std::optional<std::string>& content, const char* fallback,
                     const char* key) -> std::optional<TokenId> {
    const std::string text = content ? *content : std::string(fallback);
    if (text.empty()) return std::nullopt;
    const auto id = vocab.find(text);
    if (!id) {
      reader.fail(std::string(key) + " \"" + text +
                  "\" of tokenizer_config.json is not among its tokens; the files do not "
                  "belong together, download the model folder again");
    }
    return id;
  };
  // The class's defaults when the config names none; it adds neither when encoding.
  policy.ids.bos = resolve(config->bos, "[BOS]", "bos_token");
  policy.ids.eos = resolve(config->eos, "[EOS]", "eos_token");
  policy.ids.pad = resolve(config->pad, "", "pad_token");
  policy.ids.unknown = resolve(config->unknown, "", "unk_token");

  NamedPreTokenizer named = pre_tokenizer_for_gguf("kimi-k2");
  BpeOptions options;
  options.ignore_merges = named.ignore_merges;
  options.merges_by_rank = named.merges_by_rank;
  return std::make_unique<BpeTokenizer>(std::move(vocab), policy,
                                        std::vector<std::pair<std::string, std::string>>(),
                                        std::move(named.pre_tokenizer), Normalizer(), options);
}

}  // namespace tandem::text
