// Pre-tokenization: cutting normalized text into words before the BPE merges run inside each
// word. The steps are Hugging Face's pre-tokenizers (tokenizer.json), llama.cpp's
// per-vocabulary regex lists (GGUF) and tiktoken's pattern (Kimi-K2), with the reference
// libraries' exact definitions of matches, behaviours and character classes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/text/tokenizer_regex.h"

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
  RegexSplit(TokenizerRegex regex, SplitBehavior behavior, bool invert = false);
  // A pattern as tokenizer.json and GGUF files write it. Throws std::invalid_argument.
  RegexSplit(std::string_view pattern, SplitBehavior behavior, bool invert = false,
             RegexDialect dialect = RegexDialect::kOniguruma);
  static RegexSplit literal(std::string_view text, SplitBehavior behavior, bool invert = false);

  struct Span {
    std::size_t begin, end;
  };
  // The non-empty words of `text` (valid UTF-8), as byte ranges.
  std::vector<Span> split(std::string_view text) const;

 private:
  TokenizerRegex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// Hugging Face's pre-tokenizers that are one regex split, with the character classes of
// the Rust functions they call (char::is_whitespace, char::is_numeric, is_punctuation).
RegexSplit whitespace_words();                                // Whitespace
RegexSplit whitespace_split();                                // WhitespaceSplit
RegexSplit digits_split(bool individual_digits);              // Digits
RegexSplit punctuation_split(SplitBehavior behavior);         // Punctuation
RegexSplit char_delimiter_split(std::string_view delimiter);  // CharDelimiterSplit

// The GPT-2 word pattern (Hugging Face ByteLevel with use_regex).
extern const char kGpt2Pattern[];

// Hugging Face's Metaspace: spaces become the replacement, which the prepend scheme also
// puts before a word ("first": only before the word that starts the whole input).
struct MetaspaceOptions {
  std::string replacement = "\xE2\x96\x81";  // "▁"
  enum class Prepend { kNever, kFirst, kAlways } prepend = Prepend::kAlways;
  bool split = true;  // each replacement starts a new word
};

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Steps run in the order they are added; each works on every word the steps before it
  // produced.
  void add_split(RegexSplit split);
  // ByteLevel(add_prefix_space): a space is put before every word that does not start
  // with one.
  void add_prefix_space();
  // ByteLevel: every word is written in GPT-2's byte alphabet; later steps see that text.
  void add_byte_level_alphabet();
  void add_metaspace(MetaspaceOptions options);
  // FixedLength: words of `characters` code points (the last may be shorter).
  void add_fixed_length(std::size_t characters);
  // UnicodeScripts: a word ends where the Unicode script changes (spaces belong to any
  // script; Hiragana, Katakana and U+30FC count as Han).
  void add_unicode_scripts();
  // Kimi's tokenizer gives tiktoken at most 400,000 characters at a time, cut so that no run
  // of whitespace or of other characters exceeds 25,000.
  void add_tiktoken_chunks();

  bool empty() const { return steps_.empty(); }

  // The words of `text` (valid UTF-8). `at_origin`: the text begins the whole input (what
  // Metaspace's "first" scheme looks at).
  std::vector<std::string> split(std::string_view text, bool at_origin = true) const;

 private:
  struct Step;
  std::vector<Step> steps_;
};

// What llama.cpp does for one value of the GGUF key tokenizer.ggml.pre, as far as it
// changes token ids.
struct NamedPreTokenizer {
  PreTokenizer pre_tokenizer;       // ends with the byte-level alphabet when byte_level
  bool byte_level = true;           // false: tokens are UTF-8 with "▁" and <0xAB> byte tokens
  bool escapes_spaces = false;      // spaces become "▁" before the split (Gemma 4)
  bool ignore_merges = false;       // a word that is a token is taken whole
  bool merges_by_rank = false;      // tiktoken: the pair whose joined text has the lowest id
  bool newline_runs_whole = false;  // a run of newlines that is a token is taken whole
  bool adds_bos = false;            // default when tokenizer.ggml.add_bos_token is absent
  bool forces_bos = false;          // bos is added whatever the file says (Gemma 4)
};

// Throws std::invalid_argument naming every supported value.
NamedPreTokenizer pre_tokenizer_for_gguf(std::string_view pre);
// Every value pre_tokenizer_for_gguf accepts.
std::vector<std::string_view> gguf_pre_tokenizer_names();
// Kimi-K2's split pattern, alternative by alternative, as tokenization_kimi.py writes it.
const std::vector<std::string_view>& kimi_k2_pattern_alternatives();

}  // namespace tandem::text
