#include "app/run_command.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/load_progress_printer.h"
#include "engine/files/whole_file.h"
#include "engine/generate/generator.h"
#include "engine/generate/stop_strings.h"
#include "engine/text/tokenizer.h"
#include "engine/text/utf8_stream.h"

namespace tandem::app {
namespace {

std::atomic<bool> g_interrupted{false};

// Writes the logits beside `path` and renames them into place when whole; false, with a
// sentence in `error`, where that fails.
bool write_logits(const std::string& path, const nlohmann::json& doc, std::string& error) {
  const std::string why = files::write_whole_file(path, doc.dump());
  if (!why.empty()) error = "--dump-logits " + path + " cannot be written: " + why + ".";
  return why.empty();
}
extern "C" void on_run_interrupt(int) {
  g_interrupted.store(true);
}

}  // namespace

int run_generate(const RunOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "tandem: cannot read the prompt file %s; check the path.\n",
                   o.prompt_file.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    prompt = text.str();
  }
  if (prompt.empty()) {
    std::fprintf(stderr,
                 "tandem: the prompt is empty; give some text with --prompt or --prompt-file.\n");
    return 2;
  }

  // Said before the model loads, not after the run.
  if (!o.dump_logits.empty() && !files::folder_writable_for(o.dump_logits)) {
    std::fprintf(stderr,
                 "tandem: --dump-logits %s cannot be written; check the folder exists and is "
                 "writable.\n",
                 o.dump_logits.c_str());
    return 2;
  }

  forward::RunSettings settings;
  // Named on the command line, even as native, the format wins over a --profile's.
  if (!o.cpu_format.empty()) model::parse_cpu_format(o.cpu_format, settings.load.cpu_format);
  settings.load.cpu_format_asked = !o.cpu_format.empty();
  settings.load.pools = o.pools;
  settings.load.dense_bf16 = o.dense_bf16;
  settings.threads = o.threads;
  settings.context = o.context;
  std::string error;
  if (!resolve_engine_flags(o.engine, o.threads > 0, o.pools > 0, settings, error) ||
      !apply_int4_group(o.int4_group, settings.load, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  settings.load.on_progress = stderr_load_progress().callback();
  try {
    model = model::LoadedModel::load(o.model, settings.load);
    tokenizer = text::load_tokenizer(o.model);
  } catch (const std::exception& e) {
    stderr_load_progress().finish();
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
  if (!check_expert_stats_target(o.engine, model->spec(), error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  const model::ModelSpec& spec = model->spec();
  std::vector<std::int32_t> ids =
      tokenizer->encode(prompt, /*parse_special=*/true, /*add_special=*/true);
  if (ids.empty()) {
    std::fprintf(stderr, "tandem: the prompt produced no tokens.\n");
    return 2;
  }

  const auto prompt_tokens = static_cast<std::int64_t>(ids.size());
  if (const std::int64_t needed = prompt_tokens + (o.max_tokens > 0 ? 1 : 0);
      o.context > 0 && needed > o.context) {
    std::fprintf(
        stderr, "tandem: the prompt takes %lld tokens, %s; give at least %lld, or leave -c out.\n",
        static_cast<long long>(prompt_tokens),
        (prompt_tokens > o.context
             ? fmt::format("more than a context of {} (-c) holds", o.context)
             : fmt::format("which fills a context of {} (-c) with no room to write", o.context))
            .c_str(),
        static_cast<long long>(needed));
    return 2;
  }
  const int threads = command_threads(settings.threads);
  std::int64_t context = settings.context > 0
                             ? settings.context
                             : std::min<std::int64_t>(spec.max_position_embeddings, 4096);
  // Left to the model (or a profile), the context grows to take the prompt.
  context = std::max<std::int64_t>(context, prompt_tokens + 1);
  backend::NumaPools pool(threads, model->pools());
  int status = 0;
  std::optional<forward::BuiltRunner> made = build_runner(*model, pool, settings, context, status);
  if (!made) return status;
  forward::BuiltRunner& built = *made;
  std::fprintf(stderr, "tandem: %s\n", built.note.c_str());
  generate::Generator generator(*built.runner, context);

  generate::GenerationOptions options;
  options.max_tokens = o.max_tokens;
  options.cancel = &g_interrupted;
  if (o.greedy) {
    options.sampling = generate::SamplingParams::greedy();
  } else {
    options.sampling.temperature = o.temperature;
    options.sampling.top_k = o.top_k;
    options.sampling.top_p = o.top_p;
    options.sampling.min_p = o.min_p;
  }
  options.sampling.repetition_penalty = o.repeat_penalty;
  options.sampling.seed = o.seed_given ? o.seed : std::random_device{}();

  bool dumped = o.dump_logits.empty();
  bool dump_ok = true;
  text::StreamingDetokenizer detokenizer(*tokenizer);
  generate::StopStringFilter stops(o.stop);
  std::signal(SIGINT, on_run_interrupt);
  generate::GenerationStats stats;
  try {
    stats = generator.generate(ids, options, [&](std::int32_t token) {
      if (!dumped) {
        // The logits that chose the first token: those of the prompt's last position.
        dump_ok = write_logits(
            o.dump_logits,
            {{"model", o.model}, {"token_ids", ids}, {"logits", generator.last_logits()}}, error);
        dumped = true;
      }
      const std::string shown = stops.push(detokenizer.push(token));
      std::fwrite(shown.data(), 1, shown.size(), stdout);
      std::fflush(stdout);
      return !stops.stopped();
    });
  } catch (const std::exception& e) {
    std::signal(SIGINT, SIG_DFL);
    std::fprintf(stderr, "\ntandem: generation failed: %s\n", e.what());
    return 1;
  }
  std::signal(SIGINT, SIG_DFL);
  if (!dumped)  // nothing was generated (max tokens 0, or the first token was EOS)
    dump_ok = write_logits(
        o.dump_logits,
        {{"model", o.model}, {"token_ids", ids}, {"logits", generator.last_logits()}}, error);
  const std::string rest = stops.push(detokenizer.finish()) + stops.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const char* why = "";
  switch (stats.stop) {
    case generate::StopReason::EndOfSequence:
      why = "end of text";
      break;
    case generate::StopReason::MaxTokens:
      why = "token limit";
      break;
    case generate::StopReason::ContextFull:
      why = "context full";
      break;
    case generate::StopReason::Cancelled:
      why = "interrupted";
      break;
    case generate::StopReason::Caller:
      why = "stop string";
      break;
  }
  if (stats.prompt_cut_short)
    std::cerr << fmt::format("prompt: {} tokens in {:.3f} s, then interrupted\n",
                             stats.prompt_tokens, stats.prompt_seconds);
  else
    std::cerr << fmt::format("prompt: {} tokens in {:.3f} s, {:.1f} tokens/s\n",
                             stats.prompt_tokens, stats.prompt_seconds,
                             stats.prompt_tokens_per_s());
  std::cerr << fmt::format("decode: {} tokens in {:.3f} s, {:.1f} tokens/s ({}; {} threads)\n",
                           stats.generated_tokens, stats.decode_seconds,
                           stats.decode_tokens_per_s(), why, threads);
  if (!dump_ok) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 1;
  }
  if (!record_expert_stats(o.engine, *built.runner, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 1;
  }
  return stats.stop == generate::StopReason::Cancelled ? 130 : 0;
}

}  // namespace tandem::app
