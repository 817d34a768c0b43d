// The local server's request bodies (chat and plain completions), and model replies read
// back as tool calls in every family's format. Only RequestError may come out of parsing.
#include <string>

#include "engine/serve/openai_request.h"
#include "engine/serve/tool_calls.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto body = nlohmann::json::parse(data, data + size, nullptr, false);
  if (!body.is_discarded()) {
    for (int chat = 0; chat < 2; ++chat) {
      try {
        if (chat)
          (void)tandem::serve::parse_chat_request(body);
        else
          (void)tandem::serve::parse_completion_request(body);
      } catch (const tandem::serve::RequestError&) {
      }
    }
  }
  const std::string reply(reinterpret_cast<const char*>(data), size);
  const nlohmann::json tools = body.is_discarded() ? nlohmann::json() : body;
  std::uint64_t next = 1;
  using tandem::serve::ToolFormat;
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::QwenCoder, ToolFormat::Glm,
                       ToolFormat::DeepSeek, ToolFormat::Kimi, ToolFormat::Harmony}) {
    const auto parsed = tandem::serve::parse_tool_calls(f, reply, tools, next);
    for (const auto& c : parsed.calls)
      if (c.name.empty()) __builtin_trap();  // a call always has a name
  }
  return 0;
}
