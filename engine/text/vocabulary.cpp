#include "engine/text/vocabulary.h"

namespace tandem::text {

TokenId Vocabulary::add(TokenEntry entry) {
  const auto id = static_cast<TokenId>(entries_.size());
  ids_by_text_[entry.text] = id;
  entries_.push_back(std::move(entry));
  return id;
}

void Vocabulary::set(TokenId id, TokenEntry entry) {
  const auto index = static_cast<std::size_t>(id);
  if (index >= entries_.size())
    entries_.resize(index + 1, TokenEntry{"", 0.0f, TokenKind::kUnused});
  const auto old = ids_by_text_.find(entries_[index].text);
  if (old != ids_by_text_.end() && old->second == id) ids_by_text_.erase(old);
  ids_by_text_[entry.text] = id;
  entries_[index] = std::move(entry);
}

std::optional<TokenId> Vocabulary::find(std::string_view text) const {
  const auto it = ids_by_text_.find(text);
  if (it == ids_by_text_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tandem::text
