#include "engine/generate/thinking_splitter.h"

#include <algorithm>

namespace tandem::generate {

const std::vector<ThinkingSplitter::TagPair>& ThinkingSplitter::known_tags() {
  static const std::vector<TagPair> tags = {
      {"<think>", "</think>"},
      {"<seed:think>", "</seed:think>"},
      {"◁think▷", "◁/think▷"},
  };
  return tags;
}

ThinkingSplitter::ThinkingSplitter(std::string_view prompt) {
  // The last tag in the prompt decides: an opening tag not closed after it means the
  // template started the thinking block for the model.
  std::size_t best = std::string_view::npos;
  for (std::size_t i = 0; i < known_tags().size(); ++i) {
    const auto& [open, close] = known_tags()[i];
    const std::size_t o = prompt.rfind(open);
    if (o == std::string_view::npos) continue;
    const std::size_t c = prompt.rfind(close);
    if (c != std::string_view::npos && c > o) continue;
    if (best == std::string_view::npos || o > best) {
      best = o;
      inside_ = static_cast<int>(i);
    }
  }
}

void ThinkingSplitter::append_output(std::string text, ThinkingDelta& out) {
  if (inside_ >= 0) {
    out.thinking += text;
    return;
  }
  // The blank lines models put before the answer (after </think>) are not part of it.
  if (strip_leading_) {
    const std::size_t first = text.find_first_not_of("\n ");
    if (first == std::string::npos) return;
    text.erase(0, first);
    strip_leading_ = false;
  }
  out.answer += text;
}

ThinkingDelta ThinkingSplitter::push(std::string_view text) {
  ThinkingDelta out;
  pending_.append(text);
  for (;;) {
    std::size_t at = std::string::npos;
    std::size_t tag_size = 0;
    int opens = -1;
    if (inside_ >= 0) {
      const std::string& close = known_tags()[static_cast<std::size_t>(inside_)].second;
      at = pending_.find(close);
      tag_size = close.size();
    } else {
      for (std::size_t i = 0; i < known_tags().size(); ++i) {
        const std::size_t found = pending_.find(known_tags()[i].first);
        if (found < at) {
          at = found;
          tag_size = known_tags()[i].first.size();
          opens = static_cast<int>(i);
        }
      }
    }
    if (at == std::string::npos) break;
    append_output(pending_.substr(0, at), out);
    pending_.erase(0, at + tag_size);
    if (inside_ >= 0) {
      inside_ = -1;
      strip_leading_ = true;
    } else {
      inside_ = opens;
    }
  }
  // Release everything except a tail that could be the start of the next tag.
  std::size_t hold = 0;
  for (std::size_t i = 0; i < known_tags().size(); ++i) {
    if (inside_ >= 0 && static_cast<int>(i) != inside_) continue;
    const std::string& tag = inside_ >= 0 ? known_tags()[i].second : known_tags()[i].first;
    for (std::size_t n = std::min(tag.size() - 1, pending_.size()); n > hold; --n) {
      if (pending_.compare(pending_.size() - n, n, tag, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  append_output(pending_.substr(0, pending_.size() - hold), out);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

ThinkingDelta ThinkingSplitter::finish() {
  ThinkingDelta out;
  append_output(std::move(pending_), out);
  pending_.clear();
  return out;
}

}  // namespace tandem::generate
