#include "engine/serve/openai_request.h"

#include <cmath>
#include <limits>
#include <random>

namespace tandem::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw RequestError(400, message, param);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

double number(const json& body, const char* key, double low, double high) {
  const json& v = body[key];
  if (!v.is_number())
    bad(key, std::string("'") + key + "' must be a number, not " + type_name(v) + ".");
  const double x = v.get<double>();
  if (!(x >= low && x <= high))
    bad(key, std::string("'") + key + "' must be between " + json(low).dump() + " and " +
                 json(high).dump() + "; it is " + v.dump() + ".");
  return x;
}

std::int64_t integer(const json& body, const char* key, std::int64_t low, std::int64_t high) {
  const json& v = body[key];
  if (!v.is_number_integer() &&
      !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))
    bad(key, std::string("'") + key + "' must be a whole number, not " + v.dump() + ".");
  const double x = v.get<double>();
  if (x < static_cast<double>(low) || x > static_cast<double>(high))
    bad(key, std::string("'") + key + "' must be between " + std::to_string(low) + " and " +
                 std::to_string(high) + "; it is " + v.dump() + ".");
  return v.is_number_unsigned() ? static_cast<std::int64_t>(v.get<std::uint64_t>())
                                : v.get<std::int64_t>();
}

bool boolean(const json& body, const char* key) {
  const json& v = body[key];
  if (!v.is_boolean())
    bad(key, std::string("'") + key + "' must be true or false, not " + type_name(v) + ".");
  return v.get<bool>();
}

bool has(const json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

// What chat and plain completions share: the model, sampling, length, stops, streaming.
void parse_common(const json& body, const RequestLimits& limits, CompletionRequest& r) {
  if (has(body, "model")) {
    if (!body["model"].is_string()) bad("model", "'model' must be a string.");
    r.model = body["model"].get<std::string>();
  }
  // Absent values are OpenAI's documented defaults: temperature 1, top_p 1, and neither
  // top_k nor min_p (which OpenAI does not have).
  r.sampling.temperature =
      has(body, "temperature")
          ? static_cast<float>(number(body, "temperature", 0.0, generate::kMaxTemperature))
          : 1.0f;
  r.sampling.top_p =
      has(body, "top_p") ? static_cast<float>(number(body, "top_p", 0.0, 1.0)) : 1.0f;
  if (r.sampling.top_p <= 0.0f) r.sampling.top_p = std::numeric_limits<float>::min();
  r.sampling.top_k =
      has(body, "top_k") ? static_cast<std::int32_t>(integer(body, "top_k", 0, 1 << 20)) : 0;
  r.sampling.min_p =
      has(body, "min_p") ? static_cast<float>(number(body, "min_p", 0.0, 1.0)) : 0.0f;
  if (has(body, "repetition_penalty")) {
    r.sampling.repetition_penalty = static_cast<float>(
        number(body, "repetition_penalty", 0.0, generate::kMaxRepetitionPenalty));
    if (r.sampling.repetition_penalty <= 0.0f)  // it divides the logits of the tokens seen
      bad("repetition_penalty", "'repetition_penalty' must be above 0 (1: off); it is " +
                                    body["repetition_penalty"].dump() + ".");
  }
  for (const char* key : {"frequency_penalty", "presence_penalty"}) {
    if (has(body, key) && number(body, key, -2.0, 2.0) != 0.0)
      bad(key, std::string("'") + key +
                   "' is not supported by Tandem; leave it out or set it to 0 (use "
                   "repetition_penalty instead).");
  }
  if (has(body, "seed")) {
    const json& v = body["seed"];
    if (!v.is_number_integer()) bad("seed", "'seed' must be a whole number.");
    r.sampling.seed = v.is_number_unsigned() ? v.get<std::uint64_t>()
                                             : static_cast<std::uint64_t>(v.get<std::int64_t>());
    r.seeded = true;
  } else {
    r.sampling.seed = std::random_device{}();
    r.sampling.seed = (r.sampling.seed << 32) ^ std::random_device{}();
  }
  // max_completion_tokens is the newer name of max_tokens.
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (has(body, key))
      r.max_tokens = integer(body, key, 1, std::numeric_limits<std::int32_t>::max());
  }
  if (has(body, "stop")) {
    const json& v = body["stop"];
    std::vector<std::string> stops;
    if (v.is_string()) {
      stops.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      if (v.size() > limits.max_stops)
        bad("stop", "'stop' may hold at most " + std::to_string(limits.max_stops) + " strings.");
      for (const json& s : v) {
        if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings.");
        stops.push_back(s.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings.");
    }
    for (const std::string& s : stops) {
      if (s.size() > limits.max_stop_bytes)
        bad("stop", "A stop string may be at most " + std::to_string(limits.max_stop_bytes) +
                        " bytes long.");
      if (!s.empty()) r.stop.push_back(s);
    }
  }
  if (has(body, "stream")) r.stream = boolean(body, "stream");
  if (has(body, "stream_options")) {
    const json& o = body["stream_options"];
    if (!o.is_object()) bad("stream_options", "'stream_options' must be an object.");
    if (has(o, "include_usage")) r.include_usage = boolean(o, "include_usage");
  }
  if (has(body, "n") && integer(body, "n", 1, 1 << 20) != 1)
    bad("n", "Tandem writes one choice per request: 'n' must be 1.");
  if (has(body, "logprobs") && body["logprobs"] != false && body["logprobs"] != 0)
    bad("logprobs", "'logprobs' is not supported by Tandem; leave it out.");
  if (has(body, "logit_bias") && !(body["logit_bias"].is_object() && body["logit_bias"].empty()))
    bad("logit_bias", "'logit_bias' is not supported by Tandem; leave it out.");
}

// A message's content as text: a string, or a list of text parts.
std::string content_text(const json& content, std::size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(param, "'" + param + "' must be a string or a list of content parts.");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(param, "Each part of '" + param + "' must be an object with a 'type'.");
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      bad(param,
          "'" + param + "' has a part of type '" + type + "'; Tandem's models read text only.");
    if (!part.contains("text") || !part["text"].is_string())
      bad(param, "A text part of '" + param + "' must have a 'text' string.");
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string json_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

RequestError::RequestError(int status, const std::string& message, std::string param,
                           std::string code)
    : std::runtime_error(message),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)) {}

std::string RequestError::type() const {
  if (status_ == 401) return "authentication_error";
  if (status_ == 429) return "rate_limit_error";
  return status_ < 500 ? "invalid_request_error" : "server_error";
}

nlohmann::json RequestError::body() const {
  return {{"error",
           {{"message", what()},
            {"type", type()},
            {"param", param_.empty() ? json(nullptr) : json(param_)},
            {"code", code_.empty() ? json(nullptr) : json(code_)}}}};
}

CompletionRequest parse_chat_request(const json& body, const RequestLimits& limits) {
  if (!body.is_object()) bad("", "The request body must be a JSON object.");
  CompletionRequest r;
  parse_common(body, limits, r);
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad("messages", "'messages' must be a list with at least one message.");
  const json& messages = body["messages"];
  if (messages.size() > limits.max_messages)
    bad("messages",
        "A request may hold at most " + std::to_string(limits.max_messages) + " messages.");
  r.messages = json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad(at, "'" + at + "' must be an object with a 'role'.");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool")
      bad(at + ".role", "'" + at + ".role' is '" + role +
                            "'; it must be system, developer, user, assistant or tool.");
    json out = {{"role", role}, {"content", content_text(m.value("content", json()), i)}};
    if (role == "assistant" && has(m, "tool_calls")) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) bad(at + ".tool_calls", "'" + at + ".tool_calls' must be a list.");
      out["tool_calls"] = json::array();
      for (const json& c : calls) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
          bad(at + ".tool_calls",
              "Each of '" + at + ".tool_calls' must have a function with a name.");
        const json& f = c["function"];
        json args = f.value("arguments", json("{}"));
        if (!args.is_string() && !args.is_object())
          bad(at + ".tool_calls", "A tool call's 'arguments' must be a JSON string.");
        out["tool_calls"].push_back({{"id", c.value("id", std::string())},
                                     {"type", "function"},
                                     {"function", {{"name", f["name"]}, {"arguments", args}}}});
      }
    } else if (!m.contains("content") || m["content"].is_null()) {
      bad(at + ".content", "'" + at + ".content' is missing.");
    }
    if (role == "tool") {
      if (has(m, "tool_call_id") && m["tool_call_id"].is_string())
        out["tool_call_id"] = m["tool_call_id"];
      if (has(m, "name") && m["name"].is_string()) out["name"] = m["name"];
    }
    for (const char* key : {"reasoning_content", "thinking"}) {
      if (role == "assistant" && has(m, key) && m[key].is_string())
        out["reasoning_content"] = m[key];
    }
    r.messages.push_back(std::move(out));
  }
  if (has(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) bad("tools", "'tools' must be a list.");
    if (tools.size() > limits.max_tools)
      bad("tools", "A request may offer at most " + std::to_string(limits.max_tools) + " tools.");
    for (std::size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      if (!t.is_object() || t.value("type", std::string()) != "function" ||
          !t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad("tools[" + std::to_string(i) + "]",
            "Each tool must be {\"type\": \"function\", \"function\": {\"name\": …}}.");
    }
    if (!tools.empty()) r.tools = tools;
  }
  if (has(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (c == "none") {
      r.tool_choice = ToolChoice::None;
    } else if (c != "auto") {
      bad("tool_choice",
          "Tandem cannot force a tool call: 'tool_choice' must be \"auto\" or \"none\".");
    }
  }
  if (has(body, "chat_template_kwargs")) {
    const json& k = body["chat_template_kwargs"];
    if (!k.is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object.");
    r.template_kwargs = k;
    if (has(k, "enable_thinking")) r.enable_thinking = boolean(k, "enable_thinking");
  }
  if (has(body, "response_format")) {
    const json& f = body["response_format"];
    if (!f.is_object() || f.value("type", std::string()) != "text")
      bad("response_format",
          "Tandem does not constrain replies to JSON: 'response_format' must be {\"type\": "
          "\"text\"} or left out.");
  }
  return r;
}

CompletionRequest parse_completion_request(const json& body, const RequestLimits& limits) {
  if (!body.is_object()) bad("", "The request body must be a JSON object.");
  CompletionRequest r;
  parse_common(body, limits, r);
  if (!body.contains("prompt")) bad("prompt", "'prompt' is missing.");
  const json& p = body["prompt"];
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
  } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
    r.prompt = p[0].get<std::string>();
  } else {
    bad("prompt", "'prompt' must be one string (Tandem writes one completion per request).");
  }
  if (has(body, "echo") && boolean(body, "echo"))
    bad("echo", "'echo' is not supported by Tandem; leave it out.");
  if (has(body, "suffix")) bad("suffix", "'suffix' is not supported by Tandem; leave it out.");
  return r;
}

}  // namespace tandem::serve
