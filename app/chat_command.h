#pragma once

#include <cstdint>
#include <string>

#include "app/engine_flags.h"

namespace tandem::app {

struct ChatOptions {
  std::string model;
  int threads = 0;
  int pools = 0;  // 0: a converted folder's own count, else one per NUMA node
  std::int64_t context = 0;
  std::string system_prompt;
  float temperature = 0.7f;
  std::uint64_t seed = 0;
  bool seed_given = false;
  std::int64_t max_tokens = 1024;
  EngineFlags engine;
};

// An interactive chat in the terminal: type a message, the reply streams; Ctrl-C stops a
// reply; /regenerate, /system TEXT, /reset, /quit.
int run_chat(const ChatOptions& options);

struct TemplateRenderOptions {
  std::string model;  // a model folder with tokenizer_config.json / chat_template.jinja
  std::string template_file;
  std::string messages_file;
  std::string tools_file;
  bool generation_prompt = true;
};

int run_template_render(const TemplateRenderOptions& options);

}  // namespace tandem::app
