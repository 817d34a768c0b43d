#include "engine/text/tokenizer.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "engine/model/manifest.h"
#include "engine/text/utf8.h"

namespace tandem::text {

Tokenizer::Tokenizer(Vocabulary vocab, SpecialTokenPolicy policy)
    : vocab_(std::move(vocab)), policy_(policy), specials_(vocab_) {}

bool Tokenizer::is_control(TokenId id) const {
  return vocab_.contains(id) && vocab_.at(id).kind == TokenKind::kControl;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool parse_special,
                                       bool add_special) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = repair_utf8(text);
    text = repaired;
  }
  std::vector<TokenId> ids;
  if (add_special && policy_.add_bos && policy_.ids.bos) ids.push_back(*policy_.ids.bos);
  if (add_special) ids.insert(ids.end(), policy_.prefix.begin(), policy_.prefix.end());
  FragmentPlace place{true, true};
  for (const TextFragment& fragment : specials_.partition(text, parse_special)) {
    if (fragment.token != TextFragment::kNoToken) {
      ids.push_back(fragment.token);
      place.after_special = true;
    } else {
      encode_fragment(fragment.text, place, ids);
      place.after_special = false;
    }
    place.at_text_start = false;
  }
  if (add_special) ids.insert(ids.end(), policy_.suffix.begin(), policy_.suffix.end());
  if (add_special && policy_.add_eos && policy_.ids.eos) ids.push_back(*policy_.ids.eos);
  return ids;
}

std::string Tokenizer::token_piece(TokenId id, bool render_special) const {
  if (!vocab_.contains(id)) {
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                            std::to_string(vocab_.size()) + " tokens");
  }
  const TokenEntry& entry = vocab_.at(id);
  switch (entry.kind) {
    case TokenKind::kControl:
    case TokenKind::kUnknown:
      return render_special ? entry.text : std::string();
    case TokenKind::kUserDefined:
      return entry.text;
    case TokenKind::kByte: {
      // "<0xAB>": the byte itself. A byte token with other text is shown as it is.
      const std::string& text = entry.text;
      unsigned value = 0;
      const bool is_hex_byte = text.size() == 6 && text.compare(0, 3, "<0x") == 0 &&
                               text[5] == '>' &&
                               std::sscanf(text.c_str() + 3, "%2x", &value) == 1 &&
                               std::isxdigit(static_cast<unsigned char>(text[3])) &&
                               std::isxdigit(static_cast<unsigned char>(text[4]));
      return is_hex_byte ? std::string(1, static_cast<char>(value)) : text;
    }
    case TokenKind::kNormal:
    case TokenKind::kUnused:
      return normal_piece(entry);
  }
  return entry.text;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string text;
  bool at_start = true;
  for (TokenId id : ids) {
    std::string piece = token_piece(id, render_special);
    // Only the very start of the text loses its space; a rendered special token counts
    // as text, as in the Hugging Face Strip decoder.
    if (at_start && !piece.empty()) {
      if (strips_leading_space() && piece.front() == ' ') piece.erase(0, 1);
      at_start = false;
    }
    text += piece;
  }
  return text;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw std::runtime_error(path + " does not exist. Give a model folder or a .gguf file.");
  }
  if (fs::is_directory(status)) {
    // A folder converted from a GGUF model keeps the source's vocabulary in its base.gguf.
    if (const std::string base = model::converted_gguf(path); !base.empty())
      return load_gguf_tokenizer(base);
    // Kimi ships tiktoken.model instead of tokenizer.json; tokenizer.json wins when both exist.
    if (!fs::exists(fs::path(path) / "tokenizer.json") &&
        fs::exists(fs::path(path) / "tiktoken.model")) {
      return load_tiktoken_tokenizer(path);
    }
    return load_tokenizer_json(path);
  }
  const std::string extension = fs::path(path).extension().string();
  if (extension == ".gguf") return load_gguf_tokenizer(path);
  if (fs::path(path).filename() == "tokenizer.json") {
    return load_tokenizer_json(fs::path(path).parent_path().string());
  }
  if (fs::path(path).filename() == "tiktoken.model") {
    return load_tiktoken_tokenizer(fs::path(path).parent_path().string());
  }
  throw std::runtime_error(path +
                           " is neither a model folder nor a .gguf file. Give the folder that "
                           "holds tokenizer.json (or tiktoken.model), or a .gguf file.");
}

}  // namespace tandem::text
