// A compiled Jinja template, rendered the way jinja2's ImmutableSandboxedEnvironment
// with trim_blocks and lstrip_blocks renders it.
//
//   jinja::Template t("Hello {{ name }}!");
//   std::string s = t.render(jinja::Value-dict or JSON object of variables);
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/text/jinja_error.h"
#include "engine/text/jinja_interpreter.h"
#include "engine/text/jinja_value.h"

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
