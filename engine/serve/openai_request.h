// The requests of OpenAI's API that Tandem serves, read and checked: a field of the wrong
// type, a value out of range or an option Tandem does not do is a RequestError whose
// sentence says which and why, never a silent default.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate/sampler.h"

namespace tandem::serve {

// An error to answer with: an HTTP status and OpenAI's error object
// ({"error": {"message", "type", "param", "code"}}).
class RequestError : public std::runtime_error {
 public:
  RequestError(int status, const std::string& message, std::string param = {},
               std::string code = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // "invalid_request_error" for 4xx, "server_error" otherwise.
  std::string type() const;
  nlohmann::json body() const;

 private:
  int status_;
  std::string param_;
  std::string code_;
};

enum class ToolChoice { Auto, None };

struct CompletionRequest {
  // Chat: the messages as sent (checked, not yet shaped for the template).
  nlohmann::json messages;
  nlohmann::json tools;  // null: none
  ToolChoice tool_choice = ToolChoice::Auto;
  // Plain completion (/v1/completions): the prompt text, fed without a template.
  std::optional<std::string> prompt;

  std::string model;
  generate::SamplingParams sampling;
  bool seeded = false;                     // a seed was given (else each request draws anew)
  std::optional<std::int64_t> max_tokens;  // absent: until the model ends or the context is full
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  std::optional<bool> enable_thinking;  // chat_template_kwargs.enable_thinking
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs
};

// Limits on what one request may ask, so a request cannot make the server allocate more
// than its size suggests.
struct RequestLimits {
  std::size_t max_messages = 4096;
  std::size_t max_tools = 256;
  std::size_t max_stops = 16;
  std::size_t max_stop_bytes = 256;
};

// JSON as text, with invalid UTF-8 (a model's reply may hold some) written as U+FFFD
// instead of throwing.
std::string json_text(const nlohmann::json& j);

// Throw RequestError (400) naming the field.
CompletionRequest parse_chat_request(const nlohmann::json& body, const RequestLimits& limits = {});
CompletionRequest parse_completion_request(const nlohmann::json& body,
                                           const RequestLimits& limits = {});

}  // namespace tandem::serve
