// A conversation with one model: messages, system prompt and sampling settings. Each turn
// renders the model's own chat template, tokenizes only the text that is new since the
// previous turn, and reuses the KV cache of everything before it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/generate/generator.h"
#include "engine/generate/thinking_splitter.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"

namespace tandem::generate {

struct ChatMessage {
  std::string role;      // "user", "assistant" ("system" lives in ChatSettings)
  std::string content;   // the answer, without thinking
  std::string thinking;  // the reasoning of an assistant reply, when the model thinks
};

struct ChatSettings {
  std::string system_prompt;
  SamplingParams sampling;
  std::int64_t max_tokens = 1024;
  bool enable_thinking = true;  // passed to templates that switch thinking (Qwen3)
};

// Raised when a turn does not fit in the context. The message says what to do.
class ContextOverflow : public std::runtime_error {
 public:
  ContextOverflow(std::int64_t needed, std::int64_t capacity);
  std::int64_t needed() const { return needed_; }
  std::int64_t capacity() const { return capacity_; }

 private:
  std::int64_t needed_;
  std::int64_t capacity_;
};

struct TurnResult {
  ChatMessage reply;
  GenerationStats stats;
  double first_token_seconds = 0.0;  // from the call to the first streamed text
  std::int64_t context_tokens = 0;   // in use after the turn
  int dropped_turns = 0;             // oldest turns removed to make room
};

class ChatSession {
 public:
  // Streamed pieces of the reply as they are decoded.
  using OnDelta = std::function<void(const ThinkingDelta& delta)>;

  ChatSession(const model::LoadedModel& model, const text::Tokenizer& tokenizer,
              const ChatTemplate& chat_template, backend::NumaPools& pool,
              std::int64_t context_tokens);
  // On `runner` (the CPU alone, or hybrid), which must outlive the session.
  ChatSession(forward::ModelRunner& runner, const text::Tokenizer& tokenizer,
              const ChatTemplate& chat_template, std::int64_t context_tokens);

  void set_settings(const ChatSettings& settings) { settings_ = settings; }
  const ChatSettings& settings() const { return settings_; }
  const std::vector<ChatMessage>& messages() const { return messages_; }
  // Replaces the conversation (a saved one reopened); nothing is computed until the next turn.
  void set_messages(std::vector<ChatMessage> messages) { messages_ = std::move(messages); }
  void reset();

  // Adds the user's message and generates the reply. With `drop_oldest`, the oldest turns
  // are removed until the conversation fits; otherwise ContextOverflow is thrown and the
  // conversation is left as it was.
  TurnResult send(const std::string& user_text, const OnDelta& on_delta, bool drop_oldest = false);
  // Generates the last reply again (the previous one is discarded).
  TurnResult regenerate(const OnDelta& on_delta, bool drop_oldest = false);
  // Replaces user message `index`, discards everything after it, and replies to it.
  TurnResult edit(std::size_t index, const std::string& user_text, const OnDelta& on_delta,
                  bool drop_oldest = false);

  // Thread-safe: the running turn stops after the current token (well under a second); asked
  // before a turn begins, that turn stops before its first token.
  void request_stop() { stop_.store(true); }

  // The prompt text the model would see now, with the generation prompt.
  std::string render_prompt() const;
  std::int64_t context_used() const {
    return static_cast<std::int64_t>(generator_.context().size());
  }
  std::int64_t context_capacity() const { return generator_.context_capacity(); }
  const std::shared_ptr<measure::Metrics>& metrics() const { return generator_.metrics(); }

 private:
  TurnResult reply(const OnDelta& on_delta, bool drop_oldest);
  std::vector<std::int32_t> prompt_tokens(const std::string& prompt_text) const;
  nlohmann::ordered_json template_messages() const;

  const text::Tokenizer& tokenizer_;
  const ChatTemplate& template_;
  Generator generator_;
  ChatSettings settings_;
  // Turns sampled so far: each draws with its own seed, derived from the settings' seed, so
  // a regenerated reply is another draw while a session with the same seed (or one reset)
  // repeats itself.
  std::uint64_t turns_ = 0;
  std::vector<ChatMessage> messages_;
  std::atomic<bool> stop_{false};
  // The exact text that the tokens in the cache stand for, so a new turn can tokenize just
  // the text after it.
  std::string cached_text_;
};

}  // namespace tandem::generate
