#include "engine/generate/harmony_channels.h"

namespace tandem::generate {

std::optional<HarmonyChannels::ControlTokens> HarmonyChannels::find(
    const text::Tokenizer& tokenizer) {
  ControlTokens t;
  const struct {
    const char* text;
    text::TokenId* id;
  } required[] = {{"<|start|>", &t.start},     {"<|end|>", &t.end},
                  {"<|message|>", &t.message}, {"<|channel|>", &t.channel},
                  {"<|return|>", &t.finished}, {"<|call|>", &t.call}};
  for (const auto& r : required) {
    const auto id = tokenizer.find_token(r.text);
    if (!id) return std::nullopt;
    *r.id = *id;
  }
  t.constrain = tokenizer.find_token("<|constrain|>");
  return t;
}

ThinkingDelta HarmonyChannels::push(text::TokenId id, std::string_view text) {
  ThinkingDelta out;
  if (state_ == State::Done) return out;
  if (id == tokens_.finished || id == tokens_.call) {
    state_ = State::Done;
  } else if (id == tokens_.start) {
    state_ = State::Header;
    header_.clear();
    in_channel_name_ = false;
    channel_.clear();
  } else if (id == tokens_.end) {
    state_ = State::Header;  // the next message's <|start|> follows
    header_.clear();
    in_channel_name_ = false;
    channel_.clear();
  } else if (id == tokens_.channel) {
    in_channel_name_ = true;
    channel_.clear();
  } else if (id == tokens_.message) {
    state_ = State::Body;
    analysis_ = channel_ == "analysis";
    in_channel_name_ = false;
  } else if (tokens_.constrain && id == *tokens_.constrain) {
    in_channel_name_ = false;
  } else if (state_ == State::Body) {
    any_body_ = true;
    (analysis_ ? out.thinking : out.answer).append(text);
  } else {
    header_.append(text);
    if (in_channel_name_) {
      // The channel's name runs to the first space ("commentary to=functions.get_weather").
      for (char c : text) {
        if (c == ' ') {
          in_channel_name_ = false;
          break;
        }
        channel_.push_back(c);
      }
    }
  }
  return out;
}

ThinkingDelta HarmonyChannels::finish() {
  ThinkingDelta out;
  // A model that wrote no message at all (no <|message|>) still said something: show it.
  if (!any_body_ && !header_.empty()) out.answer = header_;
  header_.clear();
  return out;
}

}  // namespace tandem::generate
