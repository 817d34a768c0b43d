// Include/exclude patterns for a repository's files, as `huggingface-cli download` takes
// them: shell globs matched against the whole path, where `*` also crosses `/`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::hub {

// `*` any run of characters (including '/'), `?` one character, `[abc]`, `[a-z]` and
// `[!abc]` a character class. Everything else matches itself.
bool glob_match(std::string_view pattern, std::string_view path);

struct FileFilter {
  std::vector<std::string> include;  // empty: every file
  std::vector<std::string> exclude;

  // True when the path matches some include pattern (or there are none) and no exclude one.
  bool accepts(std::string_view path) const;
};

}  // namespace tandem::hub
