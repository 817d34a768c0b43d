#include "engine/text/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>

#include "engine/text/byte_level.h"
#include "engine/text/utf8.h"

namespace tandem::text {

namespace {

std::string normalize_form(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  // An explicit length (no UTF8PROC_NULLTERM) keeps embedded NUL bytes.
  const utf8proc_ssize_t length = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
      static_cast<utf8proc_ssize_t>(text.size()), &result, static_cast<utf8proc_option_t>(options));
  if (length < 0) {
    throw std::invalid_argument(std::string("Unicode normalization failed: ") +
                                utf8proc_errmsg(length));
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<std::size_t>(length));
}

// Rust's char::is_whitespace (the White_Space property).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_mark(char32_t c) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_MN || category == UTF8PROC_CATEGORY_MC ||
         category == UTF8PROC_CATEGORY_ME;
}

bool is_nonspacing_mark(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_MN;
}

struct Range {
  char32_t first, last;
};

bool in_ranges(char32_t c, std::initializer_list<Range> ranges) {
  for (const Range& range : ranges) {
    if (c >= range.first && c <= range.last) return true;
  }
  return false;
}

// What BertNormalizer's clean_text drops: NUL, U+FFFD and the "other" characters of the
// Unicode tables Hugging Face compiles in (controls except tab and line ends, formats,
// private use), listed as they are so that newer Unicode versions change nothing.
bool is_bert_dropped(char32_t c) {
  return in_ranges(c,
                   {{0x0, 0x8},          {0xB, 0xC},         {0xE, 0x1F},        {0x7F, 0x9F},
                    {0xAD, 0xAD},        {0x600, 0x605},     {0x61C, 0x61C},     {0x6DD, 0x6DD},
                    {0x70F, 0x70F},      {0x180E, 0x180E},   {0x200B, 0x200F},   {0x202A, 0x202E},
                    {0x2060, 0x2064},    {0x2066, 0x206F},   {0xE000, 0xF8FF},   {0xFEFF, 0xFEFF},
                    {0xFFF9, 0xFFFB},    {0xFFFD, 0xFFFD},   {0x110BD, 0x110BD}, {0x1BCA0, 0x1BCA3},
                    {0x1D173, 0x1D17A},  {0xE0001, 0xE0001}, {0xE0020, 0xE007F}, {0xF0000, 0xFFFFD},
                    {0x100000, 0x10FFFD}});
}

bool is_chinese_character(char32_t c) {
  return in_ranges(c, {{0x4E00, 0x9FFF},
                       {0x3400, 0x4DBF},
                       {0x20000, 0x2A6DF},
                       {0x2A700, 0x2B81F},
                       {0x2B920, 0x2CEAF},
                       {0xF900, 0xFAFF},
                       {0x2F800, 0x2FA1F}});
}

bool is_nmt_dropped(char32_t c) {
  return in_ranges(c,
                   {{0x1, 0x8}, {0xB, 0xB}, {0xE, 0x1F}, {0x7F, 0x7F}, {0x8F, 0x8F}, {0x9F, 0x9F}});
}

bool is_nmt_space(char32_t c) {
  return in_ranges(c, {{0x9, 0xA},
                       {0xC, 0xD},
                       {0x1680, 0x1680},
                       {0x200B, 0x200F},
                       {0x2028, 0x2029},
                       {0x2581, 0x2581},
                       {0xFEFF, 0xFEFF},
                       {0xFFFD, 0xFFFD}});
}

}  // namespace

struct Normalizer::Step {
  enum class Kind {
    kNormalForm,
    kPrepend,
    kReplace,
    kLowercase,
    kStrip,
    kStripAccents,
    kBertCleanText,
    kBertChinesePadding,
    kBertStripAccents,
    kNmt,
    kByteLevel,
  } kind;
  NormalForm form = NormalForm::kNfc;
  std::string text;                         // kPrepend: the prefix; kReplace: the replacement
  std::unique_ptr<TokenizerRegex> pattern;  // kReplace
  bool left = false, right = false;         // kStrip
};

Normalizer::Normalizer() = default;
Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

Normalizer::Normalizer(const std::vector<NormalForm>& forms) {
  for (NormalForm form : forms) add_normal_form(form);
}

void Normalizer::add_normal_form(NormalForm form) {
  steps_.push_back({Step::Kind::kNormalForm, form});
}

void Normalizer::add_prepend(std::string prefix) {
  steps_.push_back({Step::Kind::kPrepend, NormalForm::kNfc, std::move(prefix)});
}

void Normalizer::add_replace(std::string from, std::string to) {
  add_replace(TokenizerRegex::literal(from), std::move(to));
}

void Normalizer::add_replace(TokenizerRegex pattern, std::string to) {
  steps_.push_back({Step::Kind::kReplace, NormalForm::kNfc, std::move(to),
                    std::make_unique<TokenizerRegex>(std::move(pattern))});
}

void Normalizer::add_lowercase() {
  steps_.push_back({Step::Kind::kLowercase});
}

void Normalizer::add_strip(bool left, bool right) {
  steps_.push_back({Step::Kind::kStrip, NormalForm::kNfc, {}, nullptr, left, right});
}

void Normalizer::add_strip_accents() {
  steps_.push_back({Step::Kind::kStripAccents});
}
void Normalizer::add_bert_clean_text() {
  steps_.push_back({Step::Kind::kBertCleanText});
}
void Normalizer::add_bert_chinese_padding() {
  steps_.push_back({Step::Kind::kBertChinesePadding});
}
void Normalizer::add_bert_strip_accents() {
  steps_.push_back({Step::Kind::kBertStripAccents});
}
void Normalizer::add_nmt() {
  steps_.push_back({Step::Kind::kNmt});
}
void Normalizer::add_byte_level_alphabet() {
  steps_.push_back({Step::Kind::kByteLevel});
}

namespace {

// Keeps the code points `keep` accepts, mapped by `map`; reports whether the first one was
// dropped.
template <typename Keep, typename Map>
bool filter_map(std::string& text, Keep keep, Map map) {
  const std::u32string codepoints = decode_utf8(text);
  std::u32string kept;
  kept.reserve(codepoints.size());
  for (char32_t c : codepoints) {
    if (keep(c)) kept.push_back(map(c));
  }
  const bool first_dropped = !codepoints.empty() && (kept.empty() || !keep(codepoints[0]));
  text = encode_utf8(kept);
  return first_dropped;
}

char32_t unchanged(char32_t c) {
  return c;
}

}  // namespace

Normalizer::Result Normalizer::normalize(std::string_view input) const {
  Result result{std::string(input), true};
  std::string& current = result.text;
  for (const Step& step : steps_) {
    if (current.empty()) break;
    bool first_dropped = false;
    switch (step.kind) {
      case Step::Kind::kNormalForm:
        current = normalize_form(current, step.form);
        break;
      case Step::Kind::kPrepend:
        current.insert(0, step.text);
        break;
      case Step::Kind::kReplace: {
        std::string replaced;
        std::size_t at = 0;
        for (const RegexMatch& match : step.pattern->find_all(current)) {
          replaced.append(current, at, match.begin - at);
          replaced += step.text;
          at = match.end;
          if (match.begin == 0 && match.end > 0 && step.text.empty()) first_dropped = true;
        }
        replaced.append(current, at, std::string::npos);
        current = std::move(replaced);
        break;
      }
      case Step::Kind::kLowercase: {
        std::u32string lowered;
        for (char32_t c : decode_utf8(current)) {
          if (c == 0x130) {
            // The one unconditional lowercase mapping to two code points: İ -> i̇.
            lowered += U"i\u0307";
          } else {
            lowered.push_back(
                static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
          }
        }
        current = encode_utf8(lowered);
        break;
      }
      case Step::Kind::kStrip: {
        std::u32string codepoints = decode_utf8(current);
        std::size_t begin = 0, end = codepoints.size();
        if (step.left) {
          while (begin < end && is_white_space(codepoints[begin])) ++begin;
        }
        if (step.right) {
          while (end > begin && is_white_space(codepoints[end - 1])) --end;
        }
        first_dropped = begin > 0;
        current = encode_utf8(std::u32string_view(codepoints).substr(begin, end - begin));
        break;
      }
      case Step::Kind::kStripAccents:
        first_dropped = filter_map(
            current, [](char32_t c) { return !is_mark(c); }, unchanged);
        break;
      case Step::Kind::kBertCleanText:
        first_dropped = filter_map(
            current, [](char32_t c) { return !is_bert_dropped(c); },
            [](char32_t c) {
              return c == '\t' || c == '\n' || c == '\r' || is_white_space(c) ? U' ' : c;
            });
        break;
      case Step::Kind::kBertChinesePadding: {
        std::u32string padded;
        for (char32_t c : decode_utf8(current)) {
          if (is_chinese_character(c)) {
            padded += U' ';
            padded += c;
            padded += U' ';
          } else {
            padded += c;
          }
        }
        current = encode_utf8(padded);
        break;
      }
      case Step::Kind::kBertStripAccents:
        current = normalize_form(current, NormalForm::kNfd);
        first_dropped = filter_map(
            current, [](char32_t c) { return !is_nonspacing_mark(c); }, unchanged);
        break;
      case Step::Kind::kNmt:
        first_dropped = filter_map(
            current, [](char32_t c) { return !is_nmt_dropped(c); },
            [](char32_t c) { return is_nmt_space(c) ? U' ' : c; });
        break;
      case Step::Kind::kByteLevel:
        current = to_byte_level(current);
        break;
    }
    if (first_dropped) result.starts_at_origin = false;
  }
  return result;
}

}  // namespace tandem::text
