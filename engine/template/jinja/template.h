// A compiled Jinja template, rendered the way jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and the loopcontrols extension renders it: the subset
// of Jinja that models' chat templates are written in, with Python's value semantics.
//
//   jinja::Template t("Hello {{ name }}!");
//   std::string s = t.render(nlohmann::ordered_json{{"name", "Ann"}});  // "Hello Ann!"
//
// Supported: if/elif/else, for (loop.*, else, `if` filter, break/continue), set (names,
// tuples, namespace attributes, block set with filters), macro with defaults, varargs,
// kwargs and caller, call blocks, filter blocks, with, raw, comments, whitespace control;
// all jinja2 operators and literals; jinja2's common filters and tests; str/dict/list
// methods; range, dict, namespace. Undefined follows jinja2's default Undefined (prints
// nothing, iterates empty, raises on attribute access or arithmetic).
// Not supported: include/import/extends/block (no file access by design), recursive
// for loops, loop.changed, \N{name} escapes, *args/**kwargs in calls. Python reprs of
// dict views, range objects and generators print as plain lists. Case mapping covers
// Latin-1, Greek and Cyrillic.
//
// A Template is immutable after construction; render() may run on several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/template/jinja/error.h"
#include "engine/template/jinja/interpreter.h"
#include "engine/template/jinja/value.h"

namespace tandem::jinja {

struct TemplateTree;

struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  SandboxLimits limits;
};

class Template {
 public:
  // Throws TemplateError(ErrorKind::Syntax) with line and column.
  explicit Template(std::string_view source, TemplateOptions options = {});
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `variables` must be a plain dict; its entries are visible to the template next to the
  // built-in globals range(), dict() and namespace() (variables win). Throws TemplateError.
  std::string render(const Value& variables) const;
  std::string render(const nlohmann::ordered_json& variables) const;

 private:
  std::unique_ptr<TemplateTree> tree_;
  TemplateOptions options_;
};

}  // namespace tandem::jinja
