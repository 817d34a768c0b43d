#include "engine/hub/glob_match.h"

#include <cstddef>

namespace tandem::hub {
namespace {

// Matches one class starting at pattern[i] == '['; sets `next` past its ']'. A '[' with no
// closing bracket is taken literally, as fnmatch does.
bool match_class(std::string_view pattern, std::size_t i, char c, std::size_t& next,
                 bool& is_class) {
  std::size_t j = i + 1;
  bool negate = false;
  if (j < pattern.size() && (pattern[j] == '!' || pattern[j] == '^')) {
    negate = true;
    ++j;
  }
  bool matched = false;
  bool first = true;
  while (j < pattern.size() && (first || pattern[j] != ']')) {
    first = false;
    char lo = pattern[j];
    char hi = lo;
    if (j + 2 < pattern.size() && pattern[j + 1] == '-' && pattern[j + 2] != ']') {
      hi = pattern[j + 2];
      j += 2;
    }
    if (lo <= c && c <= hi) matched = true;
    ++j;
  }
  if (j >= pattern.size()) {
    is_class = false;
    return false;
  }
  is_class = true;
  next = j + 1;
  return matched != negate;
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view path) {
  // Iterative matcher with one backtrack point for the last '*': linear in practice and no
  // recursion for adversarial patterns.
  std::size_t p = 0, s = 0;
  std::size_t star_p = std::string_view::npos, star_s = 0;
  while (s < path.size()) {
    if (p < pattern.size()) {
      const char pc = pattern[p];
      if (pc == '*') {
        star_p = p++;
        star_s = s;
        continue;
      }
      if (pc == '?') {
        ++p;
        ++s;
        continue;
      }
      if (pc == '[') {
        std::size_t next = 0;
        bool is_class = false;
        const bool ok = match_class(pattern, p, path[s], next, is_class);
        if (is_class && ok) {
          p = next;
          ++s;
          continue;
        }
        if (!is_class && path[s] == '[') {
          ++p;
          ++s;
          continue;
        }
      } else if (pc == path[s]) {
        ++p;
        ++s;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    s = ++star_s;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool FileFilter::accepts(std::string_view path) const {
  bool included = include.empty();
  for (const auto& pattern : include) {
    if (glob_match(pattern, path)) {
      included = true;
      break;
    }
  }
  if (!included) return false;
  for (const auto& pattern : exclude) {
    if (glob_match(pattern, path)) return false;
  }
  return true;
}

}  // namespace tandem::hub
