#include "engine/template/chat_template.h"

#include <locale.h>
#include <time.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/model/gguf/file.h"
#include "engine/model/gguf/set.h"
#include "engine/model/manifest.h"
#include "engine/template/jinja/arguments.h"
#include "engine/template/jinja/json.h"

namespace tandem {
namespace {

std::tm local_now() {
  const std::time_t now = std::time(nullptr);
  std::tm calendar{};
  localtime_r(&now, &calendar);
  return calendar;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// strftime as Python's datetime.strftime does it in a process that never set a locale:
// English month and day names even when the application (Qt does) adopted the user's
// locale.
std::string format_time_c_locale(const std::string& format, const std::tm& time) {
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  // A trailing marker tells an empty result apart from a buffer that was too small.
  const std::string marked = format + "\x01";
  char buffer[1024];
  const size_t n = strftime_l(buffer, sizeof buffer, marked.c_str(), &time, c_locale);
  if (n == 0) throw jinja::ValueError("strftime_now: the formatted date is too long");
  return std::string(buffer, n - 1);
}

// A GGUF model, or a folder converted from one (which keeps its metadata in base.gguf).
bool is_gguf(const std::filesystem::path& path) {
  return path.extension() == ".gguf" || !model::converted_gguf(path.string()).empty();
}

// The metadata of a GGUF model: its first part's, whichever part `path` names.
std::unique_ptr<model::GgufFile> gguf_metadata(const std::filesystem::path& path) {
  if (const std::string base = model::converted_gguf(path.string()); !base.empty())
    return std::make_unique<model::GgufFile>(base);
  const auto split = model::parse_gguf_split_name(path.string());
  return std::make_unique<model::GgufFile>(split ? split->part_path(1) : path.string());
}

std::string gguf_string(const model::GgufFile& file, const std::string& key) {
  const model::GgufValue* v = file.find(key);
  if (v == nullptr) return {};
  if (v->type() != model::GgufType::kString)
    throw std::runtime_error(file.path() + ": " + key +
                             " should be a string; the file is damaged.");
  return v->as_string();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, jinja::TemplateOptions options)
    : source_(source), template_(source, options), clock_(local_now) {}

std::string ChatTemplate::read_source_from_model_folder(const std::filesystem::path& folder) {
  if (is_gguf(folder)) {
    const auto file = gguf_metadata(folder);
    std::string source = gguf_string(*file, "tokenizer.chat_template");
    if (source.empty()) {
      throw std::runtime_error(file->path() +
                               " holds no chat template (tokenizer.chat_template); this model "
                               "has no chat format of its own, or was converted without it.");
    }
    return source;
  }
  const auto jinja_file = folder / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) return read_file(jinja_file);
  const auto config_file = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(config_file))
    throw std::runtime_error(
        "The model folder " + folder.string() +
        " has neither chat_template.jinja nor tokenizer_config.json; download the "
        "model's tokenizer files too.");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_file(config_file));
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(config_file.string() + " is not valid JSON (" + error.what() +
                             "); download it again.");
  }
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    throw std::runtime_error(
        config_file.string() +
        " defines no chat_template; this model has no chat format of its own.");
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    std::string names;
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) continue;
      if (entry["name"] == "default") return entry["template"].get<std::string>();
      names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
    }
    throw std::runtime_error(config_file.string() + " lists chat templates (" + names +
                             ") but none named \"default\".");
  }
  throw std::runtime_error(config_file.string() + ": chat_template must be a string or a list.");
}

nlohmann::ordered_json read_special_tokens_from_model_folder(const std::filesystem::path& folder) {
  nlohmann::ordered_json tokens = nlohmann::ordered_json::object();
  if (is_gguf(folder)) {
    // The texts of the tokens the metadata names by id.
    const auto file = gguf_metadata(folder);
    const model::GgufValue* list = file->find("tokenizer.ggml.tokens");
    if (list == nullptr || list->type() != model::GgufType::kArray) return tokens;
    const auto& texts = list->as_array().elements;
    for (const auto& [name, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                                    {"eos_token", "tokenizer.ggml.eos_token_id"},
                                    {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                    {"pad_token", "tokenizer.ggml.padding_token_id"}}) {
      const model::GgufValue* id = file->find(key);
      if (id == nullptr || !id->is_integer()) continue;
      const std::int64_t i = id->as_int();
      if (i < 0 || static_cast<std::size_t>(i) >= texts.size() ||
          texts[static_cast<std::size_t>(i)].type() != model::GgufType::kString)
        continue;
      tokens[name] = texts[static_cast<std::size_t>(i)].as_string();
    }
    return tokens;
  }
  const auto config_file = folder / "tokenizer_config.json";
  if (!std::filesystem::exists(config_file)) return tokens;
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_file(config_file));
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(config_file.string() + " is not valid JSON (" + error.what() +
                             "); download it again.");
  }
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                           "cls_token", "mask_token"}) {
    const auto it = config.find(name);
    if (it == config.end()) continue;
    if (it->is_string())
      tokens[name] = it->get<std::string>();
    else if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      tokens[name] = (*it)["content"].get<std::string>();
  }
  return tokens;
}

std::string render_model_chat_template(const std::filesystem::path& folder,
                                       const ChatTemplateInputs& inputs) {
  ChatTemplateInputs with_tokens = inputs;
  const nlohmann::ordered_json tokens = read_special_tokens_from_model_folder(folder);
  for (auto it = tokens.begin(); it != tokens.end(); ++it)
    if (!with_tokens.extra_variables.contains(it.key()))
      with_tokens.extra_variables[it.key()] = it.value();
  return ChatTemplate::from_model_folder(folder).render(with_tokens);
}

ChatTemplate ChatTemplate::from_model_folder(const std::filesystem::path& folder) {
  return ChatTemplate(read_source_from_model_folder(folder));
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return render(inputs.messages, inputs.tools, inputs.add_generation_prompt,
                inputs.extra_variables);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_variables) const {
  using jinja::Value;
  Value variables = Value::dict();
  jinja::Dict& vars = variables.as_dict();
  vars.set("raise_exception",
           Value::function("raise_exception", [](const jinja::CallArgs& args) -> Value {
             const auto bound =
                 jinja::bind_arguments("raise_exception", args, {{"message", std::nullopt}});
             throw jinja::ValueError(jinja::to_str(bound[0]), jinja::ErrorKind::Raised);
           }));
  Clock clock = clock_;
  vars.set(
      "strftime_now",
      Value::function("strftime_now", [clock](const jinja::CallArgs& args) -> Value {
        const auto bound = jinja::bind_arguments("strftime_now", args, {{"format", std::nullopt}});
        const std::string format = jinja::to_str(bound[0]);
        return Value(format_time_c_locale(format, clock()));
      }));
  if (extra_variables.is_object())
    for (auto it = extra_variables.begin(); it != extra_variables.end(); ++it)
      vars.set(it.key(), jinja::value_from_json(it.value()));
  vars.set("messages", jinja::value_from_json(messages));
  if (!tools.is_null()) vars.set("tools", jinja::value_from_json(tools));
  vars.set("add_generation_prompt", Value(add_generation_prompt));
  return template_.render(variables);
}

}  // namespace tandem
