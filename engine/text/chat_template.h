// A model's chat template: the Jinja program that turns a conversation into the prompt
// text the model was trained on. Rendered exactly as Hugging Face transformers renders it
// (jinja2 sandbox, trim_blocks, lstrip_blocks, loop controls, tojson, raise_exception,
// strftime_now).
#pragma once

#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/text/jinja_template.h"

namespace tandem {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, ...}]
  nlohmann::ordered_json tools = nullptr;  // null: the template sees `tools` undefined
  bool add_generation_prompt = true;
  // Further variables: bos_token, eos_token, enable_thinking, ... Absent ones stay undefined.
  nlohmann::ordered_json extra_variables = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // The wall clock as broken-down local time, for strftime_now(); replaceable in tests.
  using Clock = std::function<std::tm()>;

  // Throws jinja::TemplateError (ErrorKind::Syntax) when the template does not parse.
  explicit ChatTemplate(std::string_view source, jinja::TemplateOptions options = {});

  // Reads the template of a Hugging Face model folder: chat_template.jinja if present,
  // else tokenizer_config.json's "chat_template" (a string, or a list of {name, template}
  // from which "default" is taken). Throws std::runtime_error saying what is missing.
  static ChatTemplate from_model_folder(const std::filesystem::path& folder);
  static std::string read_source_from_model_folder(const std::filesystem::path& folder);

  void set_clock(Clock clock) { clock_ = std::move(clock); }

  // Throws jinja::TemplateError: ErrorKind::Raised when the template refuses the
  // conversation through raise_exception (message() is the template's own text).
  std::string render(const ChatTemplateInputs& inputs) const;
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_variables) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
  Clock clock_;
};

}  // namespace tandem
