// Chat templates are programs from the internet: lexed, parsed and run on a conversation
// with tools, within the sandbox's limits on loops, recursion and output.
#include <exception>
#include <string>

#include "engine/template/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "", "reasoning_content": "a tool",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "cold"}])");
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  try {
    tandem::jinja::TemplateOptions options;
    options.limits.max_output_bytes = 1 << 20;  // bounded work per input
    const tandem::ChatTemplate t(source, options);
    (void)t.render(messages, tools, true, {{"bos_token", "<s>"}, {"enable_thinking", true}});
  } catch (const std::exception&) {
  }
  return 0;
}
