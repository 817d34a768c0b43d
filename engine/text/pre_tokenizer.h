// Pre-tokenization: cutting text into words before BPE merges run inside each word.
// Every step is a PCRE2 regex split, as in Hugging Face's Split / ByteLevel
// pre-tokenizers and llama.cpp's per-vocabulary regex lists.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::text {

// What happens to the text a regex matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior {
  kIsolated,            // matches and the text between them become separate words
  kRemoved,             // matches are dropped
  kMergedWithPrevious,  // a match joins the word before it
  kMergedWithNext,      // a match joins the word after it
  kContiguous,          // consecutive matches form one word
};

class RegexSplit {
 public:
  // Throws std::invalid_argument with PCRE2's message when the pattern does not compile.
  RegexSplit(const std::string& pattern, SplitBehavior behavior, bool invert = false,
             bool literal = false);
  ~RegexSplit();
  RegexSplit(RegexSplit&&) noexcept;
  RegexSplit& operator=(RegexSplit&&) noexcept;

  // Appends the words of `text` (valid UTF-8) to `out`; empty words are dropped.
  void split(std::string_view text, std::vector<std::string>& out) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
  SplitBehavior behavior_;
  bool invert_;
};

// The GPT-2 word pattern (Hugging Face ByteLevel with use_regex).
extern const char kGpt2Pattern[];

class PreTokenizer {
 public:
  // Each step splits every word the previous steps produced.
  void add_split(RegexSplit split);
  // Hugging Face ByteLevel(add_prefix_space): a space is put before every word that does
  // not start with one.
  void add_prefix_space();

  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Step {
    std::unique_ptr<RegexSplit> split;  // null: the prefix-space step
  };
  std::vector<Step> steps_;
};

// The pre-tokenizer llama.cpp applies for a GGUF "gpt2" vocabulary, chosen by the value
// of tokenizer.ggml.pre. Throws std::invalid_argument naming the supported values.
PreTokenizer pre_tokenizer_for_gguf(std::string_view pre);

}  // namespace tandem::text
