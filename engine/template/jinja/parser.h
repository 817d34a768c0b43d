// Parses template text into a syntax tree (jinja/ast.h).
#pragma once

#include <memory>
#include <string_view>

#include "engine/template/jinja/ast.h"
#include "engine/template/jinja/lexer.h"

namespace tandem::jinja {

// Throws TemplateError(ErrorKind::Syntax) naming the line and column of the problem.
// `max_nesting_depth` bounds how deeply expressions and blocks may nest, so that a hostile
// template cannot exhaust the stack.
std::unique_ptr<TemplateTree> parse_template(std::string_view source, const LexerOptions& options,
                                             int max_nesting_depth);

}  // namespace tandem::jinja
