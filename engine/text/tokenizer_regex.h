// The regexes tokenizers split and replace text with, compiled by PCRE2 but read the way the
// reference tokenizers read them. Hugging Face tokenizers runs tokenizer.json patterns on
// Oniguruma (Ruby syntax), tiktoken runs its patterns on Rust's regex crate; both differ
// from PCRE2 in what \w, \s, \b and \h mean, in classes with `&&`, `--` and nested classes,
// and (Oniguruma) in ^ and $ matching at every line. Patterns are translated so that PCRE2
// matches exactly what the reference engine would.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

enum class RegexDialect {
  kPcre2,      // written for PCRE2 (Tandem's own patterns): compiled as it is
  kOniguruma,  // tokenizer.json and llama.cpp's GGUF pre-tokenizers
  kRustRegex,  // tiktoken's pat_str
};

struct RegexMatch {
  std::size_t begin = 0, end = 0;  // byte offsets; begin == end for an empty match
};

class TokenizerRegex {
 public:
  // Throws std::invalid_argument with a sentence when the pattern does not compile or uses
  // a construct that has no PCRE2 equivalent.
  TokenizerRegex(std::string_view pattern, RegexDialect dialect);
  // A pattern that matches `text` literally (Hugging Face's String patterns).
  static TokenizerRegex literal(std::string_view text);
  ~TokenizerRegex();
  TokenizerRegex(TokenizerRegex&&) noexcept;
  TokenizerRegex& operator=(TokenizerRegex&&) noexcept;

  // Every match in `text` (valid UTF-8), left to right, as Oniguruma's iterator in Hugging
  // Face reports them: after a match the search goes on at its end, and an empty match is
  // reported unless it lies at the end of the match before it.
  std::vector<RegexMatch> find_all(std::string_view text) const;

 private:
  TokenizerRegex() = default;
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// The PCRE2 pattern that matches what `pattern` matches in `dialect`; exposed for tests.
// Throws std::invalid_argument for constructs without an equivalent.
std::string translate_regex(std::string_view pattern, RegexDialect dialect);

}  // namespace tandem::text
