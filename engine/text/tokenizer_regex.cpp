#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/text/tokenizer_regex.h"

#include <pcre2.h>

#include <array>
#include <stdexcept>

#include "engine/text/utf8.h"

namespace tandem::text {

namespace {

// \w of Rust's regex crate: the word characters of Unicode's UTS #18. Oniguruma leaves out
// the joiners and, from its Latin-1 table, adds ¹²³¼½¾. PCRE2 10.42 takes \p{L}, \p{N}
// and "_" instead (no marks, every number).
constexpr std::string_view kRustWordItems = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})";
constexpr std::string_view kOnigurumaWordItems =
    R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";
// \s of both: the White_Space property. PCRE2's \s also takes U+180E.
constexpr std::string_view kSpaceItem = R"(\p{White_Space})";
constexpr std::string_view kNotSpaceItem = R"(\P{White_Space})";

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// One code point in a character class: a union of PCRE2 class items and nested sets,
// intersected with and reduced by other sets, optionally negated as a whole.
struct CharSet {
  bool negated = false;
  std::string items;  // PCRE2 class items: "a-z\p{L}\x{4E00}"
  std::vector<CharSet> unions;
  std::vector<CharSet> intersections;
  std::vector<CharSet> differences;

  bool is_plain() const { return unions.empty() && intersections.empty() && differences.empty(); }
};

// An expression matching exactly one code point of `set`.
std::string emit(const CharSet& set) {
  CharSet flat = set;
  // A nested class without operators or negation adds its items to the union.
  std::vector<CharSet> complex_unions;
  for (const CharSet& nested : set.unions) {
    if (!nested.negated && nested.is_plain()) {
      flat.items += nested.items;
    } else {
      complex_unions.push_back(nested);
    }
  }
  flat.unions = std::move(complex_unions);
  if (flat.is_plain()) {
    if (flat.items.empty()) return flat.negated ? R"([\s\S])" : "(?!)";
    return std::string(flat.negated ? "[^" : "[") + flat.items + "]";
  }
  std::string core;
  if (flat.unions.empty()) {
    core = "[" + flat.items + "]";
  } else {
    core = "(?:";
    bool first = true;
    if (!flat.items.empty()) {
      core += "[" + flat.items + "]";
      first = false;
    }
    for (const CharSet& nested : flat.unions) {
      if (!first) core += "|";
      core += emit(nested);
      first = false;
    }
    core += ")";
  }
  // Each operand matches one code point, so a lookahead tests the same code point.
  for (const CharSet& other : flat.intersections) core = "(?:(?=" + emit(other) + ")" + core + ")";
  for (const CharSet& other : flat.differences) core = "(?:(?!" + emit(other) + ")" + core + ")";
  if (flat.negated) core = "(?:(?!" + core + R"()[\s\S])";
  return core;
}

// Whether PCRE2 knows `name` as a script.
bool is_script_name(std::string_view name) {
  if (name.empty() || name.find_first_of("=:^") != std::string_view::npos) return false;
  const std::string probe = "\\p{sc=" + std::string(name) + "}";
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(probe.data()), probe.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  pcre2_code_free(code);
  return code != nullptr;
}

class Translator {
 public:
  Translator(std::string_view pattern, RegexDialect dialect)
      : pattern_(pattern),
        dialect_(dialect),
        word_items_(dialect == RegexDialect::kRustRegex ? kRustWordItems : kOnigurumaWordItems) {}

  std::string run() {
    std::string out;
    while (at_ < pattern_.size()) {
      const char c = pattern_[at_];
      if (c == '\\') {
        translate_escape(out);
      } else if (c == '[') {
        out += emit(parse_class());
      } else if (c == '{' && dialect_ == RegexDialect::kOniguruma && peek(1) == ',') {
        // Ruby reads "{,n}" as "{0,n}"; PCRE2 would read it as text.
        out += "{0";
        ++at_;
      } else {
        copy_character(out);
      }
    }
    return out;
  }

 private:
  [[noreturn]] void unsupported(const std::string& what) const {
    throw std::invalid_argument("the regex \"" + std::string(pattern_) + "\" uses " + what +
                                ", which Tandem cannot translate for PCRE2");
  }

  char peek(std::size_t ahead) const {
    return at_ + ahead < pattern_.size() ? pattern_[at_ + ahead] : '\0';
  }

  void copy_character(std::string& out) {
    std::size_t length = utf8_sequence_length(static_cast<unsigned char>(pattern_[at_]));
    if (length == 0 || at_ + length > pattern_.size()) length = 1;
    out.append(pattern_.substr(at_, length));
    at_ += length;
  }

  // \uXXXX, \u{X...}, \UXXXXXXXX, \U{X...} (Rust) and \uXXXX (Ruby): PCRE2 writes \x{...}.
  bool translate_unicode_escape(std::string& out) {
    const char kind = peek(1);
    if (kind != 'u' && !(kind == 'U' && dialect_ == RegexDialect::kRustRegex)) return false;
    if (dialect_ == RegexDialect::kPcre2) return false;
    std::size_t digits_begin = at_ + 2;
    std::size_t digits_end;
    if (peek(2) == '{') {
      digits_begin = at_ + 3;
      digits_end = pattern_.find('}', digits_begin);
      if (digits_end == std::string_view::npos) unsupported("an unterminated \\u{...} escape");
      out += "\\x{" + std::string(pattern_.substr(digits_begin, digits_end - digits_begin)) + "}";
      at_ = digits_end + 1;
      return true;
    }
    const std::size_t count = kind == 'u' ? 4 : 8;
    digits_end = digits_begin;
    while (digits_end < pattern_.size() && digits_end - digits_begin < count &&
           is_hex(pattern_[digits_end])) {
      ++digits_end;
    }
    if (digits_end - digits_begin != count) unsupported("a malformed \\u escape");
    out += "\\x{" + std::string(pattern_.substr(digits_begin, count)) + "}";
    at_ = digits_end;
    return true;
  }

  // Copies "\p{...}", "\pL", "\x{...}" and other escapes that mean the same in PCRE2.
  void copy_escape(std::string& out) {
    const char kind = peek(1);
    if ((kind == 'p' || kind == 'P' || kind == 'x') && peek(2) == '{') {
      const std::size_t close = pattern_.find('}', at_ + 3);
      if (close == std::string_view::npos) unsupported("an unterminated \\p{...} or \\x{...}");
      const std::string_view name = pattern_.substr(at_ + 3, close - at_ - 3);
      if (kind != 'x' && dialect_ != RegexDialect::kPcre2 && is_script_name(name)) {
        // A bare script name is the Script property there; PCRE2 reads it as
        // Script_Extensions, which also holds shared punctuation such as "。" for Han.
        out += std::string("\\") + kind + "{sc=" + std::string(name) + "}";
      } else {
        out.append(pattern_.substr(at_, close + 1 - at_));
      }
      at_ = close + 1;
      return;
    }
    if (kind == 'p' || kind == 'P') {
      out.append(pattern_.substr(at_, 3));
      at_ += 3;
      return;
    }
    out += '\\';
    ++at_;
    if (at_ < pattern_.size()) copy_character(out);
  }

  void translate_escape(std::string& out) {
    if (dialect_ == RegexDialect::kPcre2) {
      copy_escape(out);
      return;
    }
    if (translate_unicode_escape(out)) return;
    const std::string word = "[" + std::string(word_items_) + "]";
    const std::string not_word = "[^" + std::string(word_items_) + "]";
    switch (peek(1)) {
      case 'w':
        out += word;
        break;
      case 'W':
        out += not_word;
        break;
      case 's':
        out += kSpaceItem;
        break;
      case 'S':
        out += kNotSpaceItem;
        break;
      case 'd':
        out += R"(\p{Nd})";
        break;
      case 'D':
        out += R"(\P{Nd})";
        break;
      case 'b':
        out += "(?:(?<=" + word + ")(?!" + word + ")|(?<!" + word + ")(?=" + word + "))";
        break;
      case 'B':
        out += "(?:(?<=" + word + ")(?=" + word + ")|(?<!" + word + ")(?!" + word + "))";
        break;
      case 'h':
        if (dialect_ != RegexDialect::kOniguruma) {
          copy_escape(out);
          return;
        }
        out += "[0-9a-fA-F]";  // Ruby's \h is a hex digit, PCRE2's a horizontal space
        break;
      case 'H':
        if (dialect_ != RegexDialect::kOniguruma) {
          copy_escape(out);
          return;
        }
        out += "[^0-9a-fA-F]";
        break;
      default:
        copy_escape(out);
        return;
    }
    at_ += 2;
  }

  // An escape inside a class; `set` receives it.
  void translate_class_escape(CharSet& set) {
    if (dialect_ != RegexDialect::kPcre2 && translate_unicode_escape(set.items)) return;
    if (dialect_ != RegexDialect::kPcre2) {
      switch (peek(1)) {
        case 'w':
          set.items += word_items_;
          at_ += 2;
          return;
        case 'W': {
          CharSet not_word;
          not_word.negated = true;
          not_word.items = word_items_;
          set.unions.push_back(std::move(not_word));
          at_ += 2;
          return;
        }
        case 's':
          set.items += kSpaceItem;
          at_ += 2;
          return;
        case 'S':
          set.items += kNotSpaceItem;
          at_ += 2;
          return;
        case 'd':
          set.items += R"(\p{Nd})";
          at_ += 2;
          return;
        case 'D':
          set.items += R"(\P{Nd})";
          at_ += 2;
          return;
        case 'h':
          if (dialect_ == RegexDialect::kOniguruma) {
            set.items += "0-9a-fA-F";
            at_ += 2;
            return;
          }
          break;
        default:
          break;
      }
    }
    copy_escape(set.items);
  }

  // Parses a class starting at '[' up to its ']'.
  CharSet parse_class() {
    ++at_;  // '['
    CharSet result;
    if (peek(0) == '^') {
      result.negated = true;
      ++at_;
    }
    enum class Operator { kUnion, kIntersection, kDifference };
    Operator pending = Operator::kUnion;
    CharSet operand;
    auto finish_operand = [&] {
      switch (pending) {
        case Operator::kUnion:
          result.items += operand.items;
          for (CharSet& nested : operand.unions) result.unions.push_back(std::move(nested));
          break;
        case Operator::kIntersection:
          result.intersections.push_back(std::move(operand));
          break;
        case Operator::kDifference:
          result.differences.push_back(std::move(operand));
          break;
      }
      operand = CharSet();
    };
    bool first = true;
    while (true) {
      if (at_ >= pattern_.size()) unsupported("a character class without its closing ']'");
      const char c = pattern_[at_];
      if (c == ']' && !first) {
        ++at_;
        break;
      }
      if (c == ']') {
        operand.items += "\\]";
        ++at_;
      } else if (c == '[' && peek(1) == ':') {
        translate_posix_class(operand);
      } else if (c == '[' && dialect_ != RegexDialect::kPcre2) {
        operand.unions.push_back(parse_class());
      } else if (c == '&' && peek(1) == '&' && dialect_ != RegexDialect::kPcre2) {
        at_ += 2;
        finish_operand();
        pending = Operator::kIntersection;
      } else if (c == '-' && peek(1) == '-' && dialect_ == RegexDialect::kRustRegex) {
        at_ += 2;
        finish_operand();
        pending = Operator::kDifference;
      } else if (c == '~' && peek(1) == '~' && dialect_ == RegexDialect::kRustRegex) {
        unsupported("a symmetric difference (~~) in a class");
      } else if (c == '\\') {
        translate_class_escape(operand);
      } else {
        copy_character(operand.items);
      }
      first = false;
    }
    // An operator's operands are sets of their own: "a&&b" is (a) and (b), not "a" then "b".
    if (pending != Operator::kUnion) {
      finish_operand();
    } else {
      result.items += operand.items;
      for (CharSet& nested : operand.unions) result.unions.push_back(std::move(nested));
    }
    return result;
  }

  // "[:alpha:]" inside a class; Oniguruma's POSIX classes are Unicode properties that
  // PCRE2 defines otherwise, so the common ones are spelled out and the rest refused.
  void translate_posix_class(CharSet& set) {
    const std::size_t close = pattern_.find(":]", at_ + 2);
    if (close == std::string_view::npos) unsupported("an unterminated POSIX class");
    std::string_view name = pattern_.substr(at_ + 2, close - at_ - 2);
    at_ = close + 2;
    const bool negated = name.starts_with('^');
    if (negated) name.remove_prefix(1);
    std::string items;
    if (dialect_ == RegexDialect::kRustRegex) {
      // Rust's POSIX classes are ASCII.
      if (name == "alpha") {
        items = "A-Za-z";
      } else if (name == "digit") {
        items = "0-9";
      } else if (name == "space") {
        items = R"(\t\n\x{0B}\f\r )";
      } else if (name == "punct") {
        items = R"(!-/:-@\[-`{-~)";
      } else if (name == "word") {
        items = "0-9A-Za-z_";
      } else {
        unsupported("the POSIX class [:" + std::string(name) + ":]");
      }
    } else if (name == "alpha") {
      items = R"(\p{Alphabetic})";
    } else if (name == "digit") {
      items = R"(\p{Nd})";
    } else if (name == "space") {
      items = kSpaceItem;
    } else if (name == "punct") {
      items = R"(\p{P}\p{S})";
    } else if (name == "word") {
      items = word_items_;
    } else {
      unsupported("the POSIX class [:" + std::string(name) + ":]");
    }
    if (negated) {
      CharSet complement;
      complement.negated = true;
      complement.items = std::move(items);
      set.unions.push_back(std::move(complement));
    } else {
      set.items += items;
    }
  }

  std::string_view pattern_;
  RegexDialect dialect_;
  std::string_view word_items_;
  std::size_t at_ = 0;
};

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> message{};
  pcre2_get_error_message(code, message.data(), message.size());
  return reinterpret_cast<const char*>(message.data());
}

}  // namespace

std::string translate_regex(std::string_view pattern, RegexDialect dialect) {
  if (dialect == RegexDialect::kPcre2) return std::string(pattern);
  return Translator(pattern, dialect).run();
}

struct TokenizerRegex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }

  void compile(std::string_view pattern, std::uint32_t options, std::string_view shown) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                         &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      throw std::invalid_argument("the regex \"" + std::string(shown) +
                                  "\" does not compile at offset " + std::to_string(error_offset) +
                                  ": " + pcre2_message(error_code));
    }
    // JIT is an optimisation only: where the platform lacks it, matching is interpreted.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
};

TokenizerRegex::TokenizerRegex(std::string_view pattern, RegexDialect dialect)
    : compiled_(std::make_unique<Compiled>()) {
  // UCP makes the remaining classes ([:alpha:], case folding) Unicode-aware, as in the
  // reference engines. Ruby's ^ and $ match at every line; Rust's $ only at the very end.
  std::uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (dialect == RegexDialect::kOniguruma) options |= PCRE2_MULTILINE;
  if (dialect == RegexDialect::kRustRegex) options |= PCRE2_DOLLAR_ENDONLY;
  compiled_->compile(translate_regex(pattern, dialect), options, pattern);
}

TokenizerRegex TokenizerRegex::literal(std::string_view text) {
  TokenizerRegex regex;
  regex.compiled_ = std::make_unique<Compiled>();
  // PCRE2 refuses UCP together with LITERAL; a literal has no classes for UCP to change.
  regex.compiled_->compile(text, PCRE2_UTF | PCRE2_LITERAL, text);
  return regex;
}

TokenizerRegex::~TokenizerRegex() = default;
TokenizerRegex::TokenizerRegex(TokenizerRegex&&) noexcept = default;
TokenizerRegex& TokenizerRegex::operator=(TokenizerRegex&&) noexcept = default;

namespace {

// Each thread matches with a JIT stack of its own, large enough for the lookaheads that
// translated class intersections put on every character of a long word.
pcre2_match_context* thread_match_context() {
  struct Context {
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    Context() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~Context() {
      pcre2_jit_stack_free(stack);
      pcre2_match_context_free(context);
    }
  };
  thread_local Context instance;
  return instance.context;
}

}  // namespace

std::vector<RegexMatch> TokenizerRegex::find_all(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match_data(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  if (!match_data) throw std::bad_alloc();
  pcre2_match_context* context = thread_match_context();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::vector<RegexMatch> matches;
  std::size_t search_from = 0;
  std::optional<std::size_t> previous_end;
  while (search_from <= text.size()) {
    // The caller guarantees valid UTF-8, so PCRE2 need not check every call.
    int rc = pcre2_match(compiled_->code, subject, text.size(), search_from, PCRE2_NO_UTF_CHECK,
                         match_data.get(), context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Past even the large stack: the interpreter keeps its backtracking on the heap.
      rc = pcre2_match(compiled_->code, subject, text.size(), search_from,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match_data.get(), context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) throw std::runtime_error("a tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data.get());
    const RegexMatch match{ovector[0], ovector[1]};
    if (match.begin == match.end && previous_end == match.end) {
      // An empty match where the last one ended: search again one character further.
      if (search_from >= text.size()) break;
      const std::size_t length =
          utf8_sequence_length(static_cast<unsigned char>(text[search_from]));
      search_from += length == 0 ? 1 : length;
      continue;
    }
    matches.push_back(match);
    previous_end = match.end;
    search_from = match.end;
  }
  return matches;
}

}  // namespace tandem::text
