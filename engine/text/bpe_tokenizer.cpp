#include "engine/text/bpe_tokenizer.h"

#include <cstdio>
#include <limits>
#include <queue>

#include "engine/text/byte_level.h"
#include "engine/text/utf8.h"

namespace tandem::text {

namespace {

std::string pair_key(std::string_view left, std::string_view right) {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left);
  key += '\0';
  key.append(right);
  return key;
}

}  // namespace

BpeTokenizer::BpeTokenizer(Vocabulary vocab, SpecialTokenPolicy policy,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           PreTokenizer pre_tokenizer, Normalizer normalizer, BpeOptions options)
    : Tokenizer(std::move(vocab), policy),
      pre_tokenizer_(std::move(pre_tokenizer)),
      normalizer_(std::move(normalizer)),
      options_(options) {
  rank_by_pair_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    // A later duplicate never wins over the earlier, higher-priority rank.
    rank_by_pair_.emplace(pair_key(merges[rank].first, merges[rank].second),
                          static_cast<int>(rank));
  }
}

int BpeTokenizer::merge_rank(std::string_view left, std::string_view right) const {
  if (options_.merges_by_rank) {
    std::string joined;
    joined.reserve(left.size() + right.size());
    joined.append(left);
    joined.append(right);
    const auto id = vocab_.find(joined);
    return id && vocab_.at(*id).kind == TokenKind::kNormal ? *id : -1;
  }
  const auto it = rank_by_pair_.find(pair_key(left, right));
  return it == rank_by_pair_.end() ? -1 : it->second;
}

void BpeTokenizer::encode_fragment(std::string_view text, FragmentPlace place,
                                   std::vector<TokenId>& out) const {
  Normalizer::Result normalized{std::string(text), true};
  if (!normalizer_.empty()) normalized = normalizer_.normalize(text);
  const bool at_origin = place.at_text_start && normalized.starts_at_origin;
  for (const std::string& word : pre_tokenizer_.split(normalized.text, at_origin)) {
    encode_word(word, out);
  }
}

std::optional<TokenId> BpeTokenizer::whole_word(const std::string& word) const {
  const bool newline_run =
      options_.whole_newline_runs && word.find_first_not_of('\n') == std::string::npos;
  if (!options_.ignore_merges && !newline_run) return std::nullopt;
  const auto id = vocab_.find(word);
  // Only the model's own tokens: special and added tokens are matched before, or not at all.
  if (!id) return std::nullopt;
  const TokenKind kind = vocab_.at(*id).kind;
  if (kind != TokenKind::kNormal && kind != TokenKind::kByte) return std::nullopt;
  return id;
}

void BpeTokenizer::encode_word(const std::string& word, std::vector<TokenId>& out) const {
  if (const auto id = whole_word(word)) {
    out.push_back(*id);
    return;
  }
  // Symbols form a doubly linked list over the word's characters; a merge joins a symbol
  // with its right neighbour. The queue holds candidate merges ordered by rank, then by
  // position, and stale entries are recognised by the texts they were made for.
  struct Symbol {
    std::size_t begin, length;
    int previous, next;
  };
  std::vector<Symbol> symbols;
  for (std::size_t at = 0; at < word.size();) {
    std::size_t length = utf8_sequence_length(static_cast<unsigned char>(word[at]));
    if (length == 0 || at + length > word.size()) length = 1;
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({at, length, index - 1, index + 1});
    at += length;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int rank;
    int left;
    std::size_t left_length, right_length;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto text_of = [&](int i) {
    return std::string_view(word).substr(symbols[i].begin, symbols[i].length);
  };
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    const int rank = merge_rank(text_of(left), text_of(right));
    if (rank >= 0) queue.push({rank, left, symbols[left].length, symbols[right].length});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (left.length != top.left_length || right.length != top.right_length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].previous = top.left;
    if (left.previous >= 0) consider(left.previous);
    consider(top.left);
  }

  bool unknown_pending = false;  // the last token of this word is a fusable unknown
  auto push_unknown = [&] {
    if (!policy_.ids.unknown) return;
    if (options_.fuse_unknown && unknown_pending) return;
    out.push_back(*policy_.ids.unknown);
    unknown_pending = true;
  };
  for (int i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text_of(i);
    if (const auto id = vocab_.find(piece)) {
      out.push_back(*id);
      unknown_pending = false;
      continue;
    }
    // Without a token for the merged text, fall back to its characters one by one, and a
    // character without a token to its bytes when every byte has a token.
    for (std::size_t at = 0; at < piece.size();) {
      std::size_t length = utf8_sequence_length(static_cast<unsigned char>(piece[at]));
      if (length == 0 || at + length > piece.size()) length = 1;
      const std::string_view character = piece.substr(at, length);
      at += length;
      if (const auto id = vocab_.find(character)) {
        out.push_back(*id);
        unknown_pending = false;
        continue;
      }
      if (options_.byte_fallback) {
        const std::string raw =
            options_.byte_level ? from_byte_level(character) : std::string(character);
        std::vector<TokenId> bytes;
        for (char byte : raw) {
          char name[8];
          std::snprintf(name, sizeof name, "<0x%02X>", static_cast<unsigned char>(byte));
          if (const auto byte_id = vocab_.find(name)) bytes.push_back(*byte_id);
        }
        if (bytes.size() == raw.size()) {
          out.insert(out.end(), bytes.begin(), bytes.end());
          unknown_pending = false;
          continue;
        }
      }
      push_unknown();
    }
  }
}

std::string BpeTokenizer::normal_piece(const TokenEntry& entry) const {
  if (options_.byte_level) return from_byte_level(entry.text);
  if (!options_.decode_space_mark) return entry.text;
  const std::string_view mark = "\xE2\x96\x81";
  std::string piece;
  for (std::size_t at = 0; at < entry.text.size();) {
    if (entry.text.compare(at, mark.size(), mark) == 0) {
      piece += ' ';
      at += mark.size();
    } else {
      piece += entry.text[at++];
    }
  }
  return piece;
}

}  // namespace tandem::text
