// Separates a reasoning model's thinking from its answer while the text streams. Models
// mark thinking with tag pairs (<think>…</think> for Qwen3, DeepSeek-R1, GLM; <seed:think>
// for Seed-OSS); some chat templates open the block in the prompt, so the reply starts
// inside it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::generate {

struct ThinkingDelta {
  std::string thinking;
  std::string answer;
};

class ThinkingSplitter {
 public:
  using TagPair = std::pair<std::string, std::string>;
  static const std::vector<TagPair>& known_tags();

  // `prompt` is the rendered prompt: when it ends inside an open thinking block, the reply
  // starts as thinking.
  explicit ThinkingSplitter(std::string_view prompt = {});

  ThinkingDelta push(std::string_view text);
  ThinkingDelta finish();
  bool in_thinking() const { return inside_ >= 0; }

 private:
  void append_output(std::string text, ThinkingDelta& out);

  int inside_ = -1;             // index of the open tag pair, or -1
  std::string pending_;         // text that may be the start of a tag
  bool strip_leading_ = false;  // set after a closing tag
};

}  // namespace tandem::generate
