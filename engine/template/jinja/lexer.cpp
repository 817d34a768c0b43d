#include "engine/template/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "engine/template/jinja/error.h"
#include "engine/template/jinja/utf8.h"
#include "engine/template/jinja/value.h"

namespace tandem::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// jinja2 reads string literals the way Python's "unicode-escape" codec does; an unknown
// escape keeps its backslash.
std::string unescape_string(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t width = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        bool ok = true;
        for (size_t k = 1; ok && k <= width; ++k) {
          if (i + k >= body.size() || hex_value(body[i + k]) < 0) {
            ok = false;
            break;
          }
          cp = cp * 16 + static_cast<char32_t>(hex_value(body[i + k]));
        }
        if (!ok)
          throw ValueError("truncated \\" + std::string(1, e) + " escape in string literal",
                           ErrorKind::Syntax);
        utf8_append(out, cp);
        i += width;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          utf8_append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexerOptions& options) : options_(options) {
    // jinja2 normalises every newline sequence to \n and drops one trailing newline
    // (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag_start(pos_);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_), pos_);
        break;
      }
      std::string text = src_.substr(pos_, start - pos_);
      const char kind = src_[start + 1];
      const char marker = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (marker == '-') {
        size_t keep = text.size();
        while (keep > 0 && is_space(text[keep - 1])) --keep;
        text.resize(keep);
      } else if (marker != '+' && options_.lstrip_blocks && kind != '{') {
        const size_t newline = text.rfind('\n');
        const size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
        if ((line_begin > 0 || line_starting_) &&
            std::all_of(text.begin() + static_cast<long>(line_begin), text.end(),
                        [](char c) { return c == ' ' || c == '\t'; }))
          text.resize(line_begin);
      }
      emit_text(text, pos_);
      size_t p = start + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(start, p);
      } else if (kind == '%' && lex_raw(start, p)) {
        // handled
      } else {
        lex_tag(start, p, kind == '%');
      }
    }
    tokens_.push_back(make(TokenKind::EndOfInput, "", src_.size()));
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
      ++p;
    }
    return std::string::npos;
  }

  Token make(TokenKind kind, std::string text, size_t offset) const {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(line_index + 1);
    t.column = static_cast<int>(utf8_length(std::string_view(src_).substr(
                   line_starts_[line_index], offset - line_starts_[line_index]))) +
               1;
    return t;
  }

  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    Token t = make(TokenKind::Text, "", offset);
    throw TemplateError(ErrorKind::Syntax, t.line, t.column, message);
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(make(TokenKind::Text, std::move(text), offset));
  }

  // Whitespace control after a closing delimiter that ends at `after`.
  size_t after_tag_end(size_t after, bool strip_marker, bool plus_marker, bool is_block) {
    if (strip_marker) {
      while (after < src_.size() && is_space(src_[after])) ++after;
    } else if (is_block && options_.trim_blocks && !plus_marker && after < src_.size() &&
               src_[after] == '\n') {
      ++after;
    }
    line_starting_ = after > 0 && src_[after - 1] == '\n';
    return after;
  }

  void lex_comment(size_t start, size_t p) {
    const size_t end = src_.find("#}", p);
    if (end == std::string::npos) fail(start, "unterminated comment: missing '#}'");
    const bool strip = end > p && src_[end - 1] == '-';
    const bool plus = end > p && src_[end - 1] == '+';
    pos_ = after_tag_end(end + 2, strip, plus, true);
  }

  // {% raw %}...{% endraw %}: the body is text, not template.
  bool lex_raw(size_t start, size_t p) {
    size_t q = p;
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (src_.compare(q, 3, "raw") != 0 || (q + 3 < src_.size() && is_name_char(src_[q + 3])))
      return false;
    q += 3;
    while (q < src_.size() && is_space(src_[q])) ++q;
    const bool strip = q < src_.size() && src_[q] == '-';
    const bool plus = q < src_.size() && src_[q] == '+';
    if (strip || plus) ++q;
    if (src_.compare(q, 2, "%}") != 0) fail(q, "expected '%}' after 'raw'");
    // jinja2 does not apply trim_blocks after {% raw %}, only after {% endraw %}.
    const size_t body_start = after_tag_end(q + 2, strip, plus, false);
    size_t search = body_start;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) fail(start, "unterminated raw block: missing '{% endraw %}'");
      size_t r = open + 2;
      const char marker = r < src_.size() ? src_[r] : '\0';
      if (marker == '-' || marker == '+') ++r;
      while (r < src_.size() && is_space(src_[r])) ++r;
      if (src_.compare(r, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      r += 6;
      while (r < src_.size() && is_space(src_[r])) ++r;
      const bool end_strip = r < src_.size() && src_[r] == '-';
      const bool end_plus = r < src_.size() && src_[r] == '+';
      if (end_strip || end_plus) ++r;
      if (src_.compare(r, 2, "%}") != 0) fail(r, "expected '%}' after 'endraw'");
      std::string body = src_.substr(body_start, open - body_start);
      if (marker == '-') {
        while (!body.empty() && is_space(body.back())) body.pop_back();
      } else if (marker != '+' && options_.lstrip_blocks) {
        const size_t newline = body.rfind('\n');
        const size_t line_begin = newline == std::string::npos ? 0 : newline + 1;
        if (line_begin > 0 && std::all_of(body.begin() + static_cast<long>(line_begin), body.end(),
                                          [](char c) { return c == ' ' || c == '\t'; }))
          body.resize(line_begin);
      }
      emit_text(body, body_start);
      pos_ = after_tag_end(r + 2, end_strip, end_plus, true);
      return true;
    }
  }

  void lex_tag(size_t start, size_t p, bool is_block) {
    tokens_.push_back(make(is_block ? TokenKind::BlockBegin : TokenKind::VariableBegin,
                           is_block ? "{%" : "{{", start));
    int depth = 0;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size())
        fail(start, is_block ? "unterminated block: missing '%}'"
                             : "unterminated expression: missing '}}'");
      const std::string_view rest = std::string_view(src_).substr(p);
      const std::string_view close = is_block ? "%}" : "}}";
      if (depth == 0) {
        const bool strip = rest.size() >= 3 && rest[0] == '-' && rest.substr(1, 2) == close;
        const bool plus =
            is_block && rest.size() >= 3 && rest[0] == '+' && rest.substr(1, 2) == close;
        if (strip || plus || rest.substr(0, 2) == close) {
          const size_t marker_len = (strip || plus) ? 1 : 0;
          tokens_.push_back(
              make(is_block ? TokenKind::BlockEnd : TokenKind::VariableEnd, std::string(close), p));
          pos_ = after_tag_end(p + marker_len + 2, strip, plus, is_block);
          return;
        }
      }
      const char c = src_[p];
      if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        tokens_.push_back(make(TokenKind::Name, src_.substr(p, e - p), p));
        p = e;
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) fail(p, "unterminated string literal");
        Token t = make(TokenKind::String, "", p);
        try {
          t.text = unescape_string(std::string_view(src_).substr(p + 1, e - p - 1));
        } catch (const ValueError& error) {
          fail(p, error.what());
        }
        tokens_.push_back(std::move(t));
        p = e + 1;
      } else {
        static const char* const kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwoChar)
          if (rest.substr(0, 2) == two) op = two;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
            fail(p, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") --depth;
        tokens_.push_back(make(TokenKind::Operator, op, p));
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    // After '.', a number is an index (foo.0.1 is foo[0][1]), never a float.
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::Operator &&
                           tokens_.back().text == ".";
    size_t e = p;
    auto digits = [&](size_t& i) {
      while (i < src_.size() && (is_digit(src_[i]) ||
                                 (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1]))))
        ++i;
    };
    digits(e);
    bool is_float = false;
    if (!after_dot) {
      if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
        is_float = true;
        ++e;
        digits(e);
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t x = e + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < src_.size() && is_digit(src_[x])) {
          is_float = true;
          e = x;
          digits(e);
        }
      }
    }
    std::string text = src_.substr(p, e - p);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t = make(is_float ? TokenKind::Float : TokenKind::Integer, text, p);
    if (is_float)
      t.floating = parse_float(text).value_or(0.0);
    else {
      // Python's integers have no bound; Tandem's have 64 bits, and a literal beyond them is
      // refused rather than clamped to a number that looks right.
      errno = 0;
      t.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE)
        fail(p, "the integer literal " + text.substr(0, 30) + (text.size() > 30 ? "..." : "") +
                    " is too large");
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  LexerOptions options_;
  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace tandem::jinja
