#include "engine/text/spm_tokenizer.h"

#include <cstdio>
#include <queue>
#include <string>

#include "engine/text/utf8.h"

namespace tandem::text {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (true) {
    const std::size_t found = text.find(from, at);
    if (found == std::string_view::npos) break;
    out.append(text.substr(at, found - at));
    out.append(to);
    at = found + from.size();
  }
  out.append(text.substr(at));
  return out;
}

}  // namespace

SpmTokenizer::SpmTokenizer(Vocabulary vocab, SpecialTokenPolicy policy, bool add_space_prefix)
    : Tokenizer(std::move(vocab), policy), add_space_prefix_(add_space_prefix) {}

void SpmTokenizer::encode_fragment(std::string_view fragment, FragmentPlace place,
                                   std::vector<TokenId>& out) const {
  std::string raw;
  if (add_space_prefix_ && place.after_special) raw = " ";
  raw.append(fragment);
  const std::string text = replace_all(raw, " ", kSpaceMark);
  if (text.empty()) return;

  // Symbols are characters in a linked list. The queue offers the adjacent pair whose
  // joined text is the token with the highest score (leftmost on ties); merges that became
  // stale are skipped by comparing lengths.
  struct Symbol {
    std::size_t begin, length;
    int previous, next;
  };
  std::vector<Symbol> symbols;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[at]));
    if (length == 0 || at + length > text.size()) length = 1;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({at, length, index - 1, index + 1});
    at += length;
  }
  symbols.back().next = -1;

  struct Candidate {
    float score;
    int left, right;
    std::size_t length;
    bool operator<(const Candidate& other) const {
      return score != other.score ? score < other.score : left > other.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto text_of = [&](std::size_t begin, std::size_t length) {
    return std::string_view(text).substr(begin, length);
  };
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::size_t length = symbols[left].length + symbols[right].length;
    const std::string_view joined = text_of(symbols[left].begin, length);
    const auto id = vocab_.find(joined);
    if (!id) return;
    queue.push({vocab_.at(*id).score, left, right, length});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    Symbol& right = symbols[top.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != top.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = top.left;
    consider(left.previous, top.left);
    consider(top.left, left.next);
  }

  // A merge only happens when the joined text is a token, so every final symbol is a
  // token or a single character without one, which falls back to its bytes.
  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text_of(symbols[i].begin, symbols[i].length);
    if (const auto id = vocab_.find(piece))
      out.push_back(*id);
    else
      append_bytes(piece, out);
  }
}

void SpmTokenizer::append_bytes(std::string_view text, std::vector<TokenId>& out) const {
  for (char byte : text) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(byte));
    if (const auto id = vocab_.find(name)) {
      out.push_back(*id);
    } else if (policy_.ids.unknown) {
      out.push_back(*policy_.ids.unknown);
    }
  }
}

std::string SpmTokenizer::normal_piece(const TokenEntry& entry) const {
  return replace_all(entry.text, kSpaceMark, " ");
}

}  // namespace tandem::text
