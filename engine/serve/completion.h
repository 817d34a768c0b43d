// Runs OpenAI requests on a loaded model: the conversation rendered through the model's own
// chat template (tools included), the reply streamed with its thinking apart, stop strings
// and tool calls read back. One KV cache, reused from one request to the next as far as the
// prompts agree, so a client that resends a growing conversation only pays for what is new.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/generate/generator.h"
#include "engine/generate/harmony_channels.h"
#include "engine/generate/stop_strings.h"
#include "engine/generate/thinking_splitter.h"
#include "engine/serve/openai_request.h"
#include "engine/serve/tool_calls.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"

namespace tandem::serve {

struct StreamDelta {
  std::string content;
  std::string reasoning;
};

struct CompletionResult {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::string finish_reason;  // "stop", "length" or "tool_calls"
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;  // of the prompt, reused from an earlier request
  std::int64_t completion_tokens = 0;
  double prompt_seconds = 0;  // 0 when the client left during the prompt (no rate)
  double decode_seconds = 0;
  bool cancelled = false;  // the client went away
};

// Turns the pieces of a reply, as the model writes them, into what a client sees: thinking
// apart from the answer, the answer cut at the first stop string, text that opens a tool
// call held back from the stream and read as calls at the end.
class ReplyAssembler {
 public:
  using OnDelta = std::function<void(const StreamDelta&)>;
  // `prompt`: the rendered prompt (a reply that starts inside a thinking block); `chat`:
  // false for plain completions, which are all answer. `harmony`: gpt-oss's control tokens.
  ReplyAssembler(ToolFormat format, const nlohmann::json& tools, std::vector<std::string> stops,
                 std::string_view prompt, bool chat,
                 const std::optional<generate::HarmonyChannels::ControlTokens>& harmony,
                 OnDelta on_delta);
  // One generated token and the text it completes (special tokens written out). False when a
  // stop string has ended the reply.
  bool push(std::int32_t token, std::string_view piece);
  // The end of the reply: `tail` is what the detokenizer still held. `next_id` numbers calls.
  void finish(std::string_view tail, std::uint64_t& next_id);
  // content, reasoning and tool_calls (after finish).
  CompletionResult& result() { return result_; }

 private:
  void take(generate::ThinkingDelta d);

  ToolFormat format_;
  const nlohmann::json& tools_;
  std::optional<generate::ThinkingSplitter> splitter_;
  std::optional<generate::HarmonyChannels> harmony_;
  generate::StopStringFilter user_stops_;
  generate::StopStringFilter call_openers_;
  OnDelta on_delta_;
  CompletionResult result_;
  std::string raw_;     // every piece, for harmony's headers
  std::string answer_;  // the answer up to the stop string: where calls are read from
  std::string held_;    // answer not streamed: a call may have begun
  bool in_call_ = false;
};

class CompletionRunner {
 public:
  // `runner`, `tokenizer` and `chat_template` must outlive this object.
  CompletionRunner(forward::ModelRunner& runner, const text::Tokenizer& tokenizer,
                   const ChatTemplate& chat_template, std::int64_t context_tokens);

  // The prompt text a chat request stands for. Throws RequestError (400) when the template
  // refuses the conversation or cannot show the tools.
  std::string render(const CompletionRequest& request) const;
  ToolFormat tool_format() const { return format_; }

  // Throws RequestError: 400 when the prompt does not fit in the context.
  CompletionResult run(const CompletionRequest& request,
                       const std::function<void(const StreamDelta&)>& on_delta,
                       const std::atomic<bool>* cancel);

  std::int64_t context_capacity() const { return generator_.context_capacity(); }

 private:
  const text::Tokenizer& tokenizer_;
  const ChatTemplate& template_;
  generate::Generator generator_;
  ToolFormat format_;
  bool argument_objects_;
  std::uint64_t next_call_ = 1;
};

// A request on its way to the engine, and the way back: the callbacks are called on the
// engine's thread, `on_delta` while the reply streams, then `on_done` exactly once.
struct CompletionJob {
  CompletionRequest request;
  std::atomic<bool> cancel{false};  // set by the server when the client goes away
  std::function<void(const StreamDelta&)> on_delta;
  // `error` is set (status and sentence) when no result could be made.
  std::function<void(const CompletionResult& result, const RequestError* error)> on_done;
};

// What a server needs of whoever holds the model (the desktop app, `tandem serve`).
class CompletionPort {
 public:
  virtual ~CompletionPort() = default;
  // The loaded model's name as clients will see it; empty while none is loaded.
  virtual std::string served_model() const = 0;
  // Runs the job after those before it (chat turns included); returns at once.
  virtual void submit(std::shared_ptr<CompletionJob> job) = 0;
};

}  // namespace tandem::serve
