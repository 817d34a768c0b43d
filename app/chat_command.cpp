#include "app/chat_command.h"

#include <fmt/format.h>

#include <unistd.h>
#include <filesystem>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "app/load_progress_printer.h"
#include "engine/generate/chat_session.h"

namespace tandem::app {
namespace {

generate::ChatSession* g_session = nullptr;
std::atomic<bool> g_generating{false};

extern "C" void on_chat_interrupt(int) {
  if (g_generating.load() && g_session != nullptr) {
    g_session->request_stop();
  } else {
    std::_Exit(130);
  }
}

std::string read_file(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int run_chat(const ChatOptions& o) {
  forward::RunSettings run;
  run.load.pools = o.pools;
  run.threads = o.threads;
  run.context = o.context;
  std::string error;
  if (!resolve_engine_flags(o.engine, o.threads > 0, o.pools > 0, run, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  run.load.on_progress = stderr_load_progress().callback();
  try {
    model = model::LoadedModel::load(o.model, run.load);
    tokenizer = text::load_tokenizer(o.model);
    chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_model_folder(o.model));
  } catch (const std::exception& e) {
    stderr_load_progress().finish();
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
  if (!check_expert_stats_target(o.engine, model->spec(), error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  const int threads = command_threads(run.threads);
  const std::int64_t context =
      run.context > 0 ? run.context
                      : std::min<std::int64_t>(model->spec().max_position_embeddings, 4096);
  backend::NumaPools pool(threads, model->pools());
  int status = 0;
  std::optional<forward::BuiltRunner> made = build_runner(*model, pool, run, context, status);
  if (!made) return status;
  forward::BuiltRunner& built = *made;
  std::fprintf(stderr, "tandem: %s\n", built.note.c_str());
  generate::ChatSession session(*built.runner, *tokenizer, *chat_template, context);
  generate::ChatSettings settings;
  settings.system_prompt = o.system_prompt;
  settings.sampling.temperature = o.temperature;
  settings.sampling.seed = o.seed_given ? o.seed : std::random_device{}();
  settings.max_tokens = o.max_tokens;
  session.set_settings(settings);
  g_session = &session;
  std::signal(SIGINT, on_chat_interrupt);

  const bool tty = isatty(STDOUT_FILENO);
  const char* dim = tty ? "\033[2m" : "";
  const char* plain = tty ? "\033[0m" : "";
  std::printf(
      "Chatting with %s (%s, in %s). Ctrl-C stops a reply; /regenerate, /system TEXT, /reset, "
      "/quit.\n",
      std::filesystem::path(o.model).filename().string().c_str(),
      model::architecture_display_name(model->spec().architecture).c_str(), o.model.c_str());

  auto run_turn = [&](auto&& turn) {
    bool thinking_open = false;
    auto on_delta = [&](const generate::ThinkingDelta& d) {
      if (!d.thinking.empty()) {
        if (!thinking_open)
          std::fputs(dim, stdout), std::fputs("(thinking) ", stdout), thinking_open = true;
        std::fputs(d.thinking.c_str(), stdout);
      }
      if (!d.answer.empty()) {
        if (thinking_open)
          std::fputs(plain, stdout), std::fputs("\n", stdout), thinking_open = false;
        std::fputs(d.answer.c_str(), stdout);
      }
      std::fflush(stdout);
    };
    g_generating.store(true);
    try {
      generate::TurnResult r;
      try {
        r = turn(on_delta, false);
      } catch (const generate::ContextOverflow& e) {
        // The terminal drops them itself: the overflow's advice is for callers that ask.
        std::printf(
            "\n%sThis conversation needs %lld tokens and the context holds %lld: the "
            "oldest turns are dropped to make room (-c sets a longer context).%s\n",
            dim, static_cast<long long>(e.needed()), static_cast<long long>(e.capacity()), plain);
        r = turn(on_delta, true);
      }
      if (thinking_open) std::fputs(plain, stdout);
      std::printf("\n");
      // Counts as people read them: "1 prompt token", and no rate for too few to time.
      const auto count = [](long long n, const char* one, const char* many) {
        return fmt::format("{} {}", n, n == 1 ? one : many);
      };
      // A prompt cut short by a stop has no rate (prompt_tokens_per_s is 0).
      const auto rate = [](long long n, double per_s) {
        return n >= 8 && per_s > 0 ? fmt::format(" at {:.1f} tokens/s", per_s) : std::string();
      };
      const long long prompt = r.stats.prompt_tokens, generated = r.stats.generated_tokens;
      std::fprintf(stderr, "%s[%s%s, %s generated%s, context %lld of %lld%s]%s\n", dim,
                   count(prompt, "prompt token", "prompt tokens").c_str(),
                   rate(prompt, r.stats.prompt_tokens_per_s()).c_str(),
                   count(generated, "token", "tokens").c_str(),
                   rate(generated, r.stats.decode_tokens_per_s()).c_str(),
                   static_cast<long long>(r.context_tokens),
                   static_cast<long long>(session.context_capacity()),
                   r.stats.stop == generate::StopReason::Cancelled ? ", stopped" : "", plain);
    } catch (const std::exception& e) {
      std::printf("\ntandem: %s\n", e.what());
    }
    g_generating.store(false);
  };

  std::string line;
  for (;;) {
    std::printf("%s> %s", tty ? "\033[1m" : "", plain);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    if (line == "/quit" || line == "/exit") break;
    if (line == "/reset") {
      session.reset();
      std::printf("The conversation was cleared.\n");
      continue;
    }
    if (line.rfind("/system", 0) == 0) {
      settings.system_prompt = line.size() > 8 ? line.substr(8) : "";
      session.set_settings(settings);
      std::printf(settings.system_prompt.empty() ? "The system prompt was removed.\n"
                                                 : "System prompt set.\n");
      continue;
    }
    if (line == "/regenerate") {
      run_turn([&](auto& cb, bool drop) { return session.regenerate(cb, drop); });
      continue;
    }
    if (line[0] == '/') {
      std::printf("Unknown command %s. Commands: /regenerate, /system TEXT, /reset, /quit.\n",
                  line.c_str());
      continue;
    }
    run_turn([&](auto& cb, bool drop) { return session.send(line, cb, drop); });
  }
  g_session = nullptr;
  std::signal(SIGINT, SIG_DFL);
  if (!record_expert_stats(o.engine, *built.runner, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

int run_template_render(const TemplateRenderOptions& o) {
  try {
    std::unique_ptr<ChatTemplate> chat_template;
    if (!o.template_file.empty()) {
      bool ok = false;
      const std::string source = read_file(o.template_file, ok);
      if (!ok)
        throw std::runtime_error("cannot read the template " + o.template_file +
                                 "; check the path.");
      chat_template = std::make_unique<ChatTemplate>(source);
    } else {
      chat_template = std::make_unique<ChatTemplate>(ChatTemplate::from_model_folder(o.model));
    }
    bool ok = false;
    const std::string messages_text = read_file(o.messages_file, ok);
    if (!ok)
      throw std::runtime_error("cannot read the messages file " + o.messages_file +
                               "; check the path.");
    nlohmann::ordered_json messages;
    try {
      messages = nlohmann::ordered_json::parse(messages_text);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(o.messages_file + " is not valid JSON (" + e.what() + ").");
    }
    if (messages.is_object() && messages.contains("messages")) messages = messages["messages"];
    if (!messages.is_array()) {
      throw std::runtime_error(o.messages_file +
                               " must hold a list of {\"role\", \"content\"} messages.");
    }
    nlohmann::ordered_json tools = nullptr;
    if (!o.tools_file.empty()) {
      const std::string tools_text = read_file(o.tools_file, ok);
      if (!ok)
        throw std::runtime_error("cannot read the tools file " + o.tools_file +
                                 "; check the path.");
      try {
        tools = nlohmann::ordered_json::parse(tools_text);
      } catch (const nlohmann::json::parse_error& e) {
        throw std::runtime_error(o.tools_file + " is not valid JSON (" + e.what() + ").");
      }
    }
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (!o.model.empty()) {
      try {
        const auto tokenizer = text::load_tokenizer(o.model);
        if (tokenizer->special_ids().bos)
          extra["bos_token"] = tokenizer->token_text(*tokenizer->special_ids().bos);
        if (tokenizer->special_ids().eos)
          extra["eos_token"] = tokenizer->token_text(*tokenizer->special_ids().eos);
      } catch (const std::exception&) {
        // A folder with a template but no tokenizer: bos_token and eos_token stay undefined.
      }
    }
    const std::string prompt = chat_template->render(messages, tools, o.generation_prompt, extra);
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
}

}  // namespace tandem::app
