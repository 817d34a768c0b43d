#include "engine/serve/completion.h"

#include <optional>

#include "engine/template/jinja/error.h"
#include "engine/text/utf8_stream.h"

namespace tandem::serve {
namespace {

using nlohmann::json;

}  // namespace

ReplyAssembler::ReplyAssembler(
    ToolFormat format, const json& tools, std::vector<std::string> stops, std::string_view prompt,
    bool chat, const std::optional<generate::HarmonyChannels::ControlTokens>& harmony,
    OnDelta on_delta)
    : format_(format),
      tools_(tools),
      user_stops_(std::move(stops)),
      call_openers_(format == ToolFormat::Harmony ? std::vector<std::string>{}
                                                  : tool_call_openers(format)),
      on_delta_(std::move(on_delta)) {
  if (chat && harmony) {
    harmony_.emplace(*harmony);
  } else if (chat) {
    splitter_.emplace(prompt);
  }
}

void ReplyAssembler::take(generate::ThinkingDelta d) {
  StreamDelta out;
  if (!d.thinking.empty()) {
    result_.reasoning += d.thinking;
    out.reasoning = std::move(d.thinking);
  }
  if (!d.answer.empty() && !user_stops_.stopped()) {
    const std::string shown = user_stops_.push(d.answer);
    answer_ += shown;
    // gpt-oss names the function in the header, before the arguments' message.
    if (format_ == ToolFormat::Harmony && raw_.find("to=functions.") != std::string::npos)
      in_call_ = true;
    if (in_call_) {
      held_ += shown;
    } else {
      const std::string free = call_openers_.push(shown);
      result_.content += free;
      out.content = free;
      if (call_openers_.stopped()) {
        in_call_ = true;
        held_ = answer_.substr(result_.content.size());
      }
    }
  }
  if (on_delta_ && (!out.content.empty() || !out.reasoning.empty())) on_delta_(out);
}

bool ReplyAssembler::push(std::int32_t token, std::string_view piece) {
  raw_ += piece;
  take(harmony_    ? harmony_->push(token, piece)
       : splitter_ ? splitter_->push(piece)
                   : generate::ThinkingDelta{{}, std::string(piece)});
  return !user_stops_.stopped();
}

void ReplyAssembler::finish(std::string_view tail, std::uint64_t& next_id) {
  raw_ += tail;
  generate::ThinkingDelta last = harmony_    ? harmony_->push(-1, tail)
                                 : splitter_ ? splitter_->push(tail)
                                             : generate::ThinkingDelta{{}, std::string(tail)};
  if (harmony_ || splitter_) {
    const generate::ThinkingDelta rest = harmony_ ? harmony_->finish() : splitter_->finish();
    last.answer += rest.answer;
    last.thinking += rest.thinking;
  }
  take(std::move(last));
  if (!user_stops_.stopped()) take({{}, user_stops_.finish()});
  if (!in_call_) {
    // Held back as the possible start of a call, and it was not one.
    const std::string rest = call_openers_.finish();
    if (!rest.empty()) {
      result_.content += rest;
      if (on_delta_) on_delta_({rest, {}});
    }
    return;
  }
  ParsedReply parsed = parse_tool_calls(
      format_, format_ == ToolFormat::Harmony ? std::string_view(raw_) : answer_, tools_, next_id);
  if (parsed.calls.empty()) {
    // Not a call after all: the text goes out as written.
    if (!held_.empty() && on_delta_) on_delta_({held_, {}});
    result_.content += held_;
    return;
  }
  result_.tool_calls = std::move(parsed.calls);
  if (format_ != ToolFormat::Harmony) result_.content = parsed.content;
}

CompletionRunner::CompletionRunner(forward::ModelRunner& runner, const text::Tokenizer& tokenizer,
                                   const ChatTemplate& chat_template, std::int64_t context_tokens)
    : tokenizer_(tokenizer),
      template_(chat_template),
      generator_(runner, context_tokens),
      format_(detect_tool_format(chat_template.source())),
      argument_objects_(template_wants_argument_objects(chat_template.source())) {}

std::string CompletionRunner::render(const CompletionRequest& request) const {
  const bool with_tools = !request.tools.is_null() && request.tool_choice == ToolChoice::Auto;
  if (with_tools && format_ == ToolFormat::None)
    throw RequestError(400,
                       "The loaded model's chat template has no tool calls, so this model cannot "
                       "use 'tools'. Leave them out, or load a model that calls tools (Qwen3, "
                       "GLM-4.5, DeepSeek-V3, Kimi-K2, gpt-oss).",
                       "tools");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < request.messages.size(); ++i) {
    const json& m = request.messages[i];
    nlohmann::ordered_json out = nlohmann::ordered_json::parse(m.dump());
    // gpt-oss's template knows developer messages; the others read them as system ones.
    if (out["role"] == "developer" && format_ != ToolFormat::Harmony) out["role"] = "system";
    if (out.contains("reasoning_content")) out["thinking"] = out["reasoning_content"];
    if (out.contains("tool_calls")) {
      for (auto& call : out["tool_calls"]) {
        auto& args = call["function"]["arguments"];
        if (argument_objects_ && args.is_string()) {
          const std::string text = args.get<std::string>();
          auto parsed = nlohmann::ordered_json::parse(text, nullptr, false);
          if (parsed.is_discarded() || !parsed.is_object())
            throw RequestError(400,
                               "A tool call's 'arguments' must be a JSON object written as text; "
                               "messages[" +
                                   std::to_string(i) + "] has " + text + ".",
                               "messages[" + std::to_string(i) + "].tool_calls");
          args = std::move(parsed);
        } else if (!argument_objects_ && args.is_object()) {
          args = args.dump();
        }
        // Templates read the call's name and arguments at either level.
        call["name"] = call["function"]["name"];
        call["arguments"] = call["function"]["arguments"];
      }
    }
    messages.push_back(std::move(out));
  }
  nlohmann::ordered_json extra = nlohmann::ordered_json::parse(request.template_kwargs.dump());
  if (request.enable_thinking) extra["enable_thinking"] = *request.enable_thinking;
  const auto& ids = tokenizer_.special_ids();
  if (ids.bos && !extra.contains("bos_token")) extra["bos_token"] = tokenizer_.token_text(*ids.bos);
  if (ids.eos && !extra.contains("eos_token")) extra["eos_token"] = tokenizer_.token_text(*ids.eos);
  const nlohmann::ordered_json tools =
      with_tools ? nlohmann::ordered_json::parse(request.tools.dump()) : nlohmann::ordered_json();
  try {
    return template_.render(messages, tools, /*add_generation_prompt=*/true, extra);
  } catch (const jinja::TemplateError& e) {
    throw RequestError(400,
                       std::string("The model's chat template refused this conversation: ") +
                           (e.kind() == jinja::ErrorKind::Raised ? e.message() : e.what()),
                       "messages");
  }
}

CompletionResult CompletionRunner::run(const CompletionRequest& request,
                                       const std::function<void(const StreamDelta&)>& on_delta,
                                       const std::atomic<bool>* cancel) {
  const bool chat = !request.prompt.has_value();
  const std::string prompt = chat ? render(request) : *request.prompt;
  // Chat templates write their special tokens; a plain prompt gets the model's BOS.
  const std::vector<std::int32_t> tokens =
      tokenizer_.encode(prompt, /*parse_special=*/true, /*add_special=*/!chat);
  const std::int64_t capacity = generator_.context_capacity();
  const auto n = static_cast<std::int64_t>(tokens.size());
  if (n >= capacity)
    throw RequestError(400,
                       "The prompt has " + std::to_string(n) +
                           " tokens but the model's context "
                           "holds " +
                           std::to_string(capacity) +
                           ". Shorten the conversation, or load the model with a longer context.",
                       "messages", "context_length_exceeded");

  generate::GenerationOptions options;
  options.sampling = request.sampling;
  options.max_tokens = std::min<std::int64_t>(request.max_tokens.value_or(capacity), capacity - n);
  options.cancel = cancel;

  const ToolFormat format =
      chat && !request.tools.is_null() && request.tool_choice == ToolChoice::Auto
          ? format_
          : ToolFormat::None;
  std::optional<generate::HarmonyChannels::ControlTokens> harmony;
  if (const auto controls = generate::HarmonyChannels::find(tokenizer_);
      chat && controls && std::string_view(prompt).ends_with("<|start|>assistant"))
    harmony = controls;
  ReplyAssembler assembler(format, request.tools, request.stop, prompt, chat, harmony, on_delta);
  // The reply as written, special tokens included: tool calls are read from it.
  text::StreamingDetokenizer detokenizer(tokenizer_, /*render_special=*/true);
  const generate::GenerationStats stats = generator_.generate(
      tokens, options,
      [&](std::int32_t token) { return assembler.push(token, detokenizer.push(token)); });
  assembler.finish(detokenizer.finish(), next_call_);
  CompletionResult result = std::move(assembler.result());
  result.prompt_tokens = n;
  result.cached_tokens = stats.cached_tokens;
  result.completion_tokens = stats.generated_tokens;
  result.prompt_seconds = stats.prompt_cut_short ? 0.0 : stats.prompt_seconds;
  result.decode_seconds = stats.decode_seconds;
  result.cancelled = stats.stop == generate::StopReason::Cancelled;
  result.finish_reason = !result.tool_calls.empty() ? "tool_calls"
                         : stats.stop == generate::StopReason::MaxTokens ||
                                 stats.stop == generate::StopReason::ContextFull
                             ? "length"
                             : "stop";
  return result;
}

}  // namespace tandem::serve
