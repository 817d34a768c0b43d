// gpt-oss's harmony format: a reply is a run of messages, each a header and a body between
// control tokens: <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final
// <|message|>…<|return|>. The analysis channel is the model's thinking, the others (final,
// and commentary: preambles and tool calls) its answer. The tokens are told apart by id, not
// by their text, so a reply that writes "<|channel|>" as text stays text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/generate/thinking_splitter.h"
#include "engine/text/tokenizer.h"

namespace tandem::generate {

class HarmonyChannels {
 public:
  struct ControlTokens {
    text::TokenId start = -1, end = -1, message = -1, channel = -1, finished = -1, call = -1;
    std::optional<text::TokenId> constrain;
  };
  // The control tokens when the vocabulary is harmony's (it has them all); otherwise none.
  static std::optional<ControlTokens> find(const text::Tokenizer& tokenizer);

  // The reply starts where the prompt left off: after "<|start|>assistant", in a header.
  explicit HarmonyChannels(const ControlTokens& tokens) : tokens_(tokens) {}

  // One generated token: `text` is what the detokenizer made of it (ignored for the control
  // tokens, which only move between header and body).
  ThinkingDelta push(text::TokenId id, std::string_view text);
  ThinkingDelta finish();

 private:
  enum class State { Header, Body, Done };
  ControlTokens tokens_;
  State state_ = State::Header;
  std::string header_;  // the header so far: role, channel name, recipient, constraint
  bool in_channel_name_ = false;
  std::string channel_;
  bool analysis_ = false;
  bool any_body_ = false;
};

}  // namespace tandem::generate
