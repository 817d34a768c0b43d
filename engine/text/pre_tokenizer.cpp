#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>
#include <stdexcept>

#include "engine/text/utf8.h"

namespace tandem::text {

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct RegexSplit::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplit::RegexSplit(const std::string& pattern, SplitBehavior behavior, bool invert,
                       bool literal)
    : compiled_(std::make_unique<Compiled>()), behavior_(behavior), invert_(invert) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP makes \s, \d and \w Unicode-aware, as the Rust and Oniguruma engines behind the
  // reference tokenizers are.
  // PCRE2 refuses UCP together with LITERAL; a literal has no classes for UCP to change.
  const std::uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  options, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error_code, message.data(), message.size());
    throw std::invalid_argument("the pre-tokenizer regex does not compile at offset " +
                                std::to_string(error_offset) + ": " +
                                reinterpret_cast<const char*>(message.data()));
  }
  // JIT is an optimisation only: where the platform lacks it, matching is interpreted.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

RegexSplit::~RegexSplit() = default;
RegexSplit::RegexSplit(RegexSplit&&) noexcept = default;
RegexSplit& RegexSplit::operator=(RegexSplit&&) noexcept = default;

void RegexSplit::split(std::string_view text, std::vector<std::string>& out) const {
  struct Segment {
    std::size_t begin, end;
    bool is_match;
  };
  std::vector<Segment> segments;

  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  if (!match_data) throw std::bad_alloc();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t gap_begin = 0;
  std::size_t offset = 0;
  while (offset <= text.size()) {
    // The caller guarantees valid UTF-8, so PCRE2 need not check every call.
    const int rc = pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               match_data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw std::runtime_error(std::string("pre-tokenizer regex failed: ") +
                               reinterpret_cast<const char*>(message.data()));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {
      // An empty match splits nothing; step over one character and search on.
      if (begin >= text.size()) break;
      const std::size_t length = utf8_sequence_length(static_cast<unsigned char>(text[begin]));
      offset = begin + (length == 0 ? 1 : length);
      continue;
    }
    if (begin > gap_begin) segments.push_back({gap_begin, begin, invert_});
    segments.push_back({begin, end, !invert_});
    gap_begin = offset = end;
  }
  if (gap_begin < text.size()) segments.push_back({gap_begin, text.size(), invert_});

  // Folds the segments into words following the behaviour, with Hugging Face's exact
  // definitions: merging looks only at whether the neighbouring segment matched, so two
  // adjacent matches join only under kContiguous (which also joins adjacent gaps, which
  // arise with `invert`).
  std::vector<std::pair<std::size_t, std::size_t>> words;
  bool previous_match = false;
  switch (behavior_) {
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) words.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) words.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !words.empty())
          words.back().second = s.end;
        else
          words.emplace_back(s.begin, s.end);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !words.empty())
          words.back().first = it->begin;
        else
          words.emplace_back(it->begin, it->end);
        previous_match = it->is_match;
      }
      std::reverse(words.begin(), words.end());
      break;
    case SplitBehavior::kContiguous:
      for (std::size_t i = 0; i < segments.size(); ++i) {
        if (i > 0 && segments[i].is_match == previous_match)
          words.back().second = segments[i].end;
        else
          words.emplace_back(segments[i].begin, segments[i].end);
        previous_match = segments[i].is_match;
      }
      break;
  }
  for (const auto& [begin, end] : words) {
    if (end > begin) out.emplace_back(text.substr(begin, end - begin));
  }
}

void PreTokenizer::add_split(RegexSplit split) {
  steps_.push_back(Step{std::make_unique<RegexSplit>(std::move(split))});
}

void PreTokenizer::add_prefix_space() {
  steps_.push_back(Step{nullptr});
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string> words;
  if (text.empty()) return words;
  words.emplace_back(text);
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    next.reserve(words.size() * 2);
    for (std::string& word : words) {
      if (step.split) {
        step.split->split(word, next);
      } else {
        if (word.front() != ' ') word.insert(word.begin(), ' ');
        next.push_back(std::move(word));
      }
    }
    words = std::move(next);
  }
  return words;
}

namespace {

// The regex lists below are the word boundaries each model family was trained with, as
// llama.cpp applies them for GGUF vocabularies (one list per tokenizer.ggml.pre value).
const char kGpt2NoTrailing[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char kLlama3Pattern[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Pattern[] =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kPunctuationRun[] = R"([\p{P}\$\+<=>\^~\|`]+)";

struct GgufPreTokenizer {
  std::vector<std::string_view> names;
  std::vector<const char*> patterns;
};

const std::vector<GgufPreTokenizer>& gguf_pre_tokenizers() {
  static const std::vector<GgufPreTokenizer> table = {
      {{"default"}, {kPunctuationRun, kGpt2NoTrailing, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {{"gpt-2", "mpt", "olmo", "jais"}, {kGpt2NoTrailing}},
      {{"llama3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3Pattern}},
      {{"qwen2", "stablelm2", "hunyuan"}, {kQwen2Pattern}},
      {{"falcon"}, {kPunctuationRun, kGpt2NoTrailing, "[0-9][0-9][0-9]"}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva"},
       {R"(\p{N})", kGpt2NoTrailing}},
      {{"deepseek-coder"},
       {R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
        R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})"}},
      {{"deepseek-v3"},
       {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}},
  };
  return table;
}

}  // namespace

PreTokenizer pre_tokenizer_for_gguf(std::string_view pre) {
  std::string supported;
  for (const GgufPreTokenizer& entry : gguf_pre_tokenizers()) {
    for (std::string_view name : entry.names) {
      if (name == pre) {
        PreTokenizer result;
        for (const char* pattern : entry.patterns) {
          result.add_split(RegexSplit(pattern, SplitBehavior::kIsolated));
        }
        return result;
      }
      supported += supported.empty() ? "" : ", ";
      supported += name;
    }
  }
  throw std::invalid_argument("its pre-tokenizer \"" + std::string(pre) +
                              "\" is not supported; Tandem knows " + supported);
}

}  // namespace tandem::text
