#include "engine/text/special_tokens.h"

#include <algorithm>

namespace tandem::text {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const Vocabulary& vocab)
    : vocab_(vocab), by_first_byte_(256) {
  for (TokenId id = 0; id < static_cast<TokenId>(vocab.size()); ++id) {
    const TokenEntry& entry = vocab.at(id);
    if (entry.text.empty()) continue;
    if (entry.kind != TokenKind::kControl && entry.kind != TokenKind::kUserDefined &&
        entry.kind != TokenKind::kUnknown) {
      continue;
    }
    // A repeated text resolves to the id the vocabulary maps it to.
    if (vocab.find(entry.text) != id) continue;
    by_first_byte_[static_cast<unsigned char>(entry.text[0])].push_back(
        {id, entry.text, entry.kind == TokenKind::kUserDefined, entry.strip_left,
         entry.strip_right});
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const Candidate& a, const Candidate& b) {
      return a.text.size() > b.text.size();
    });
  }
}

std::vector<TextFragment> SpecialTokenMatcher::partition(std::string_view text,
                                                         bool parse_special) const {
  std::vector<TextFragment> fragments;
  std::size_t raw_begin = 0;
  std::size_t position = 0;
  while (position < text.size()) {
    const Candidate* found = nullptr;
    for (const Candidate& candidate : by_first_byte_[static_cast<unsigned char>(text[position])]) {
      if (!parse_special && !candidate.always) continue;
      if (text.compare(position, candidate.text.size(), candidate.text) == 0) {
        found = &candidate;
        break;
      }
    }
    if (found == nullptr) {
      ++position;
      continue;
    }
    std::size_t raw_end = position;
    if (found->strip_left) {
      while (raw_end > raw_begin && is_space(text[raw_end - 1])) --raw_end;
    }
    if (raw_end > raw_begin) fragments.push_back({text.substr(raw_begin, raw_end - raw_begin)});
    fragments.push_back({{}, found->id});
    position += found->text.size();
    if (found->strip_right) {
      while (position < text.size() && is_space(text[position])) ++position;
    }
    raw_begin = position;
  }
  if (raw_begin < text.size()) fragments.push_back({text.substr(raw_begin)});
  return fragments;
}

}  // namespace tandem::text
