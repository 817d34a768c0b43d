// Errors of the Jinja interpreter: syntax errors while parsing, runtime errors while
// rendering, errors a template raises on purpose, and sandbox limits.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem::jinja {

enum class ErrorKind {
  Syntax,     // the template text is not valid Jinja
  Undefined,  // an undefined value was used where a value is needed
  Type,       // an operation on values of the wrong type
  Raised,     // the template called raise_exception(message)
  Limit,      // a sandbox limit (loop iterations, recursion, output size) was hit
  Security,   // an operation the immutable sandbox forbids (list.append, ...)
};

// Every error of parsing or rendering. what() reads
// "template line 3, column 12: 'x' is undefined"; message() is the part after the colon.
class TemplateError : public std::runtime_error {
 public:
  TemplateError(ErrorKind kind, int line, int column, const std::string& message)
      : std::runtime_error("template line " + std::to_string(line) + ", column " +
                           std::to_string(column) + ": " + message),
        kind_(kind),
        line_(line),
        column_(column),
        message_(message) {}

  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  ErrorKind kind_;
  int line_;
  int column_;
  std::string message_;
};

// A runtime error raised below the interpreter (values, filters) before the source
// position is known; the interpreter turns it into a TemplateError at the expression
// being evaluated.
class ValueError : public std::exception {
 public:
  explicit ValueError(std::string message, ErrorKind kind = ErrorKind::Type)
      : kind_(kind), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

}  // namespace tandem::jinja
