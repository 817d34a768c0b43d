// Tool calls as each model family writes them, read back into OpenAI's form. Which format a
// model uses is read from its chat template, which teaches the model that format:
//   Hermes (Qwen2.5, Qwen3):  <tool_call>{"name": …, "arguments": {…}}</tool_call>
//   Qwen3-Coder:              <tool_call><function=NAME><parameter=KEY>VALUE</parameter>…
//   GLM-4.5, GLM-4.6:         <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>…
//   DeepSeek-V3, R1, V3.1:    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁call▁end｜>…
//   Kimi-K2:                  <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0…
//   gpt-oss (harmony):        <|channel|>commentary to=functions.NAME
//   <|constrain|>json<|message|>{…}
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::serve {

enum class ToolFormat { None, Hermes, QwenCoder, Glm, DeepSeek, Kimi, Harmony };

// The format the template teaches; None when it has no tool calls at all.
ToolFormat detect_tool_format(std::string_view template_source);
const char* tool_format_name(ToolFormat format);

// Whether the template reads a call's arguments as an object (most do: they write it with
// tojson or walk its items); DeepSeek-V3's first template pastes them in as text.
bool template_wants_argument_objects(std::string_view template_source);

// The text that opens a call in the reply: a streamed reply is held back from here on.
std::vector<std::string> tool_call_openers(ToolFormat format);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object, as OpenAI sends it
};

struct ParsedReply {
  std::string content;  // the reply without its calls
  std::vector<ToolCall> calls;
};

// Reads the calls out of `reply` (its text with the special tokens written out). `tools` is
// the request's list, which gives the parameters' types for the formats that write values
// as bare text (GLM, Qwen3-Coder). A call that does not parse stays in the content, as the
// model wrote it. `next_id` numbers the calls' ids ("call_<n>").
ParsedReply parse_tool_calls(ToolFormat format, std::string_view reply, const nlohmann::json& tools,
                             std::uint64_t& next_id);

}  // namespace tandem::serve
