// The token table every tokenizer shares: id -> text, score and kind, and text -> id.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem::text {

using TokenId = std::int32_t;

// The kinds GGUF stores in tokenizer.ggml.token_type (1..6), in the same order.
enum class TokenKind : std::uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // bos, eos, chat markers: text only when specials are parsed
  kUserDefined = 4,  // added words that are always matched before the model runs
  kUnused = 5,
  kByte = 6,  // SentencePiece byte fallback, text "<0xAB>"
};

struct TokenEntry {
  std::string text;
  float score = 0.0f;
  TokenKind kind = TokenKind::kNormal;
  // Hugging Face added-token options: the match swallows whitespace on that side.
  bool strip_left = false;
  bool strip_right = false;
};

class Vocabulary {
 public:
  // Appends a token; its id is the previous size. A repeated text maps to the last id,
  // as llama.cpp does, so ids agree with it on the few vocabularies that repeat a text.
  TokenId add(TokenEntry entry);
  // Grows the table with unused placeholders when `id` lies beyond it.
  void set(TokenId id, TokenEntry entry);

  std::size_t size() const { return entries_.size(); }
  bool contains(TokenId id) const { return id >= 0 && static_cast<std::size_t>(id) < size(); }
  const TokenEntry& at(TokenId id) const { return entries_.at(static_cast<std::size_t>(id)); }
  TokenEntry& at(TokenId id) { return entries_.at(static_cast<std::size_t>(id)); }
  std::optional<TokenId> find(std::string_view text) const;

 private:
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const {
      return std::hash<std::string_view>{}(text);
    }
  };

  std::vector<TokenEntry> entries_;
  std::unordered_map<std::string, TokenId, TextHash, std::equal_to<>> ids_by_text_;
};

}  // namespace tandem::text
