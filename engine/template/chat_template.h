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

#include "engine/template/jinja/template.h"

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

// The special tokens transformers passes to chat templates (bos_token, eos_token,
// unk_token, pad_token, sep_token, cls_token, mask_token) as tokenizer_config.json
// defines them; a token written as {"content": "..."} is unwrapped. Tokens the file does
// not define (or a missing file) are left out, so the template sees them undefined.
nlohmann::ordered_json read_special_tokens_from_model_folder(const std::filesystem::path& folder);

// Renders a model folder's own chat template for a conversation, with the folder's
// special tokens added unless inputs.extra_variables already sets them. This is what
// `tandem template render` calls. Throws std::runtime_error for a folder without a usable
// template and jinja::TemplateError when the template fails or refuses the conversation.
std::string render_model_chat_template(const std::filesystem::path& folder,
                                       const ChatTemplateInputs& inputs);

}  // namespace tandem
