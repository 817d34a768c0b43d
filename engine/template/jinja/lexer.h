// Splits template text into text runs and the tokens inside {{ }} and {% %} tags,
// applying jinja2's whitespace control: `-` and `+` markers, trim_blocks and lstrip_blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

enum class TokenKind {
  Text,           // literal template text (after whitespace control)
  VariableBegin,  // {{
  VariableEnd,    // }}
  BlockBegin,     // {%
  BlockEnd,       // %}
  Name,
  String,  // `text` holds the unescaped value
  Integer,
  Float,
  Operator,  // `text` holds the operator: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  EndOfInput,
};

struct Token {
  TokenKind kind;
  std::string text;
  int line = 1;
  int column = 1;
  int64_t integer = 0;
  double floating = 0;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws TemplateError(ErrorKind::Syntax) on an unterminated tag, string or raw block.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace tandem::jinja
