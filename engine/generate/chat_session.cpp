#include "engine/generate/chat_session.h"

#include <chrono>

#include "engine/generate/harmony_channels.h"
#include "engine/text/utf8_stream.h"

namespace tandem::generate {

ContextOverflow::ContextOverflow(std::int64_t needed, std::int64_t capacity)
    : std::runtime_error("This conversation needs " + std::to_string(needed) +
                         " tokens but the context holds " + std::to_string(capacity) +
                         ". Drop the oldest turns, start a new conversation, or load the model "
                         "with a longer context."),
      needed_(needed),
      capacity_(capacity) {}

ChatSession::ChatSession(const model::LoadedModel& model, const text::Tokenizer& tokenizer,
                         const ChatTemplate& chat_template, backend::NumaPools& pool,
                         std::int64_t context_tokens)
    : tokenizer_(tokenizer), template_(chat_template), generator_(model, pool, context_tokens) {}

ChatSession::ChatSession(forward::ModelRunner& runner, const text::Tokenizer& tokenizer,
                         const ChatTemplate& chat_template, std::int64_t context_tokens)
    : tokenizer_(tokenizer), template_(chat_template), generator_(runner, context_tokens) {}

void ChatSession::reset() {
  messages_.clear();
  turns_ = 0;
  generator_.reset();
  cached_text_.clear();
}

nlohmann::ordered_json ChatSession::template_messages() const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  if (!settings_.system_prompt.empty())
    list.push_back({{"role", "system"}, {"content", settings_.system_prompt}});
  for (const ChatMessage& m : messages_) {
    nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
    if (!m.thinking.empty()) {
      // Qwen3, DeepSeek-R1 and GLM templates read reasoning_content, gpt-oss's thinking.
      j["reasoning_content"] = m.thinking;
      j["thinking"] = m.thinking;
    }
    list.push_back(std::move(j));
  }
  return list;
}

std::string ChatSession::render_prompt() const {
  nlohmann::ordered_json extra = {{"enable_thinking", settings_.enable_thinking}};
  const auto& ids = tokenizer_.special_ids();
  if (ids.bos) extra["bos_token"] = tokenizer_.token_text(*ids.bos);
  if (ids.eos) extra["eos_token"] = tokenizer_.token_text(*ids.eos);
  return template_.render(template_messages(), nullptr, true, extra);
}

std::vector<std::int32_t> ChatSession::prompt_tokens(const std::string& prompt_text) const {
  // Templates write the special tokens themselves, so none are added here.
  if (!cached_text_.empty() && prompt_text.size() > cached_text_.size() &&
      prompt_text.compare(0, cached_text_.size(), cached_text_) == 0) {
    std::vector<std::int32_t> tokens = generator_.context();
    const auto fresh =
        tokenizer_.encode(std::string_view(prompt_text).substr(cached_text_.size()), true, false);
    tokens.insert(tokens.end(), fresh.begin(), fresh.end());
    return tokens;
  }
  return tokenizer_.encode(prompt_text, true, false);
}

TurnResult ChatSession::reply(const OnDelta& on_delta, bool drop_oldest) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // A stop asked for before the turn began stops it; the request ends with the turn.
  struct ClearStop {
    std::atomic<bool>& stop;
    ~ClearStop() { stop.store(false); }
  } clear_stop{stop_};
  TurnResult result;
  const std::vector<ChatMessage> before = messages_;
  std::string prompt = render_prompt();
  std::vector<std::int32_t> tokens = prompt_tokens(prompt);
  const std::int64_t capacity = generator_.context_capacity();
  // Room for the prompt and at least a short reply.
  const std::int64_t reserve =
      std::min<std::int64_t>(settings_.max_tokens, std::max<std::int64_t>(16, capacity / 8));
  while (static_cast<std::int64_t>(tokens.size()) + reserve > capacity) {
    // The newest user message must stay; drop the oldest exchange before it.
    const bool can_drop = messages_.size() > 1;
    if (!drop_oldest || !can_drop) {
      const std::int64_t needed = static_cast<std::int64_t>(tokens.size()) + reserve;
      messages_ = before;
      throw ContextOverflow(needed, capacity);
    }
    std::size_t cut = 1;
    while (cut < messages_.size() - 1 && messages_[cut].role != "user") ++cut;
    messages_.erase(messages_.begin(), messages_.begin() + static_cast<std::ptrdiff_t>(cut));
    ++result.dropped_turns;
    prompt = render_prompt();
    tokens = prompt_tokens(prompt);
  }

  GenerationOptions options;
  options.max_tokens = settings_.max_tokens;
  options.sampling = settings_.sampling;
  options.sampling.seed = settings_.sampling.seed + 0x9E3779B97F4A7C15ull * turns_++;
  options.cancel = &stop_;
  text::StreamingDetokenizer detokenizer(tokenizer_, /*render_special=*/false);
  ThinkingSplitter splitter(prompt);
  // gpt-oss: channels by control token instead of thinking tags.
  std::optional<HarmonyChannels> harmony;
  if (const auto controls = HarmonyChannels::find(tokenizer_);
      controls && std::string_view(prompt).ends_with("<|start|>assistant"))
    harmony.emplace(*controls);
  std::string raw_fed;  // pieces of the generated tokens that went into the cache
  bool first = true;
  std::int32_t pending_piece_token = -1;
  auto deliver = [&](const ThinkingDelta& d) {
    result.reply.content += d.answer;
    result.reply.thinking += d.thinking;
    if (first && (!d.answer.empty() || !d.thinking.empty())) {
      result.first_token_seconds = std::chrono::duration<double>(Clock::now() - start).count();
      first = false;
    }
    if (on_delta && (!d.answer.empty() || !d.thinking.empty())) on_delta(d);
  };
  result.stats = generator_.generate(tokens, options, [&](std::int32_t token) {
    // The previous token is now in the cache (each new token follows a forward pass of the
    // one before it).
    if (pending_piece_token >= 0) raw_fed += tokenizer_.token_piece(pending_piece_token, true);
    pending_piece_token = token;
    const std::string piece = detokenizer.push(token);
    deliver(harmony ? harmony->push(token, piece) : splitter.push(piece));
    return true;
  });
  ThinkingDelta tail =
      harmony ? harmony->push(-1, detokenizer.finish()) : splitter.push(detokenizer.finish());
  const ThinkingDelta rest = harmony ? harmony->finish() : splitter.finish();
  tail.answer += rest.answer;
  tail.thinking += rest.thinking;
  deliver(tail);
  // The last token was fed to the cache only when the loop went on past it.
  if (pending_piece_token >= 0 && generator_.context().size() > tokens.size() &&
      generator_.context().back() == pending_piece_token) {
    raw_fed += tokenizer_.token_piece(pending_piece_token, true);
  }
  // A stop during the prompt leaves only part of it in the cache: the next turn tokenizes
  // its whole text again (the cache still serves the part they share).
  if (generator_.context().size() < tokens.size())
    cached_text_.clear();
  else
    cached_text_ = prompt + raw_fed;
  result.reply.role = "assistant";
  messages_.push_back(result.reply);
  result.context_tokens = context_used();
  return result;
}

TurnResult ChatSession::send(const std::string& user_text, const OnDelta& on_delta,
                             bool drop_oldest) {
  messages_.push_back({"user", user_text, {}});
  try {
    return reply(on_delta, drop_oldest);
  } catch (...) {
    if (!messages_.empty() && messages_.back().role == "user" &&
        messages_.back().content == user_text)
      messages_.pop_back();
    throw;
  }
}

TurnResult ChatSession::regenerate(const OnDelta& on_delta, bool drop_oldest) {
  if (!messages_.empty() && messages_.back().role == "assistant") messages_.pop_back();
  if (messages_.empty() || messages_.back().role != "user") {
    throw std::logic_error("there is no user message to answer; send one first");
  }
  return reply(on_delta, drop_oldest);
}

TurnResult ChatSession::edit(std::size_t index, const std::string& user_text,
                             const OnDelta& on_delta, bool drop_oldest) {
  if (index >= messages_.size() || messages_[index].role != "user") {
    throw std::out_of_range("message " + std::to_string(index) + " is not a user message");
  }
  messages_.resize(index + 1);
  messages_[index].content = user_text;
  return reply(on_delta, drop_oldest);
}

}  // namespace tandem::generate
