#include "app/perplexity_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "app/engine_flags.h"
#include "app/load_progress_printer.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/forward/runner_settings.h"
#include "engine/hw/memory_info.h"
#include "engine/measure/perplexity.h"
#include "engine/model/loaded_model.h"

namespace tandem::app {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_perplexity_interrupt(int) {
  g_interrupted.store(true);
}

struct OpenedModel {
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

OpenedModel open_model(const std::string& folder, int pools, const std::string& cpu_format,
                       int int4_group, bool show_progress, const std::string& dense = "auto") {
  model::LoadOptions load;
  load.pools = pools;
  load.dense = dense == "packed"   ? model::DenseBackend::Packed
               : dense == "onednn" ? model::DenseBackend::Onednn
                                   : model::DenseBackend::Auto;
  if (show_progress) load.on_progress = stderr_load_progress().callback();
  if (!cpu_format.empty() && !model::parse_cpu_format(cpu_format, load.cpu_format))
    throw std::invalid_argument("the CPU format \"" + cpu_format +
                                "\" is not one Tandem knows; give " +
                                model::cpu_format_names_in_words() + ".");
  load.cpu_format_asked = !cpu_format.empty();
  if (int4_group > 0 && model::has_int4(load.cpu_format)) load.int4_group = int4_group;
  return {model::LoadedModel::load(folder, load), text::load_tokenizer(folder)};
}

}  // namespace

int run_perplexity(const PerplexityOptions& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tandem: cannot read %s; check the path.\n", o.file.c_str());
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();

  const auto int4 = [](const std::string& name) {
    model::CpuFormat f{};
    return model::parse_cpu_format(name, f) && model::has_int4(f);
  };
  if (o.int4_group > 0 && !int4(o.cpu_format) && !int4(o.kl_base_cpu_format)) {
    std::fprintf(stderr,
                 "tandem: --int4-group sets the group of INT4 weights packed at load; use it "
                 "with --cpu-format or --kl-base-cpu-format int4 or int4-down8.\n");
    return 2;
  }
  OpenedModel model, base;
  try {
    model = open_model(o.model, o.pools, o.cpu_format, o.int4_group, !o.json, o.dense);
    // Both models run on the same pools.
    if (!o.kl_base.empty())
      base =
          open_model(o.kl_base, model.model->pools(), o.kl_base_cpu_format, o.int4_group, !o.json);
    else if (!o.kl_base_cpu_format.empty() || !o.kl_base_kv_cache.empty())
      throw std::invalid_argument(std::string(o.kl_base_cpu_format.empty()
                                                  ? "--kl-base-kv-cache"
                                                  : "--kl-base-cpu-format") +
                                  " sets up the base model; give it with --kl-base.");
  } catch (const std::exception& e) {
    stderr_load_progress().finish();
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
  // oneDNN takes dense INT8 matrices only: a model with none would be scored by our kernels
  // under --dense onednn's name.
  if (o.dense == "onednn" && model.model->onednn_matrices() == 0) {
    std::fprintf(stderr,
                 "tandem: --dense onednn multiplies dense INT8 matrices, and this model has none "
                 "in the %s format; give --cpu-format int8 or int4 with it.\n",
                 std::string(model::cpu_format_name(model.model->cpu_format())).c_str());
    return 2;
  }
  const std::int64_t max_context = model.model->spec().position_limit();
  constexpr std::int64_t kDefaultContext = 512;
  const std::int64_t context =
      o.context > 0 ? o.context
                    : (max_context > 0 ? std::min(kDefaultContext, max_context) : kDefaultContext);
  if (const std::string error = forward::context_error(model.model->spec(), context, "--context");
      !error.empty()) {
    std::fprintf(stderr, "tandem: --context: %s\n", error.c_str());
    return 2;
  }

  const int threads = command_threads(o.threads);
  backend::NumaPools pool(threads, model.model->pools());
  std::optional<std::int64_t> widen_given;
  forward::parse_widen_from(o.amx_widen_from, widen_given);  // checked by the option
  const std::optional<forward::WideningChoice> widening =
      forward::choose_widening(*model.model, pool, widen_given);
  if (widening && !o.json)
    std::fprintf(stderr, "tandem: %s\n", forward::describe(*widening).c_str());
  measure::PerplexityOptions options;
  options.context_tokens = context;
  backend::parse_kv_cache_format(o.kv_cache, options.kv_cache);
  options.base_kv_cache = options.kv_cache;
  if (!o.kl_base_kv_cache.empty())
    backend::parse_kv_cache_format(o.kl_base_kv_cache, options.base_kv_cache);
  // Both caches in host memory: the scored model's must fit beside the base model's.
  if (const hw::MemoryInfo memory = hw::probe_memory(); memory.error.empty()) {
    const std::uint64_t base_bytes =
        base.model ? backend::KvCache::bytes_for(base.model->spec(), context, options.base_kv_cache)
                   : 0;
    const std::string error = forward::cache_memory_error(
        model.model->spec(), context, options.kv_cache,
        memory.available_bytes - std::min(base_bytes, memory.available_bytes),
        base.model ? "--context; the base model's cache takes its share too" : "--context");
    if (!error.empty()) {
      std::fprintf(stderr, "tandem: %s\n", error.c_str());
      return 2;
    }
  }
  options.base_distributions = o.kl_base_logits;
  options.save_distributions = o.save_logits;
  options.saved_as = {o.model, std::string(model::cpu_format_name(model.model->cpu_format())),
                      std::string(backend::kv_cache_format_name(options.kv_cache))};
  options.cancel = &g_interrupted;
  const bool tty = !o.json && isatty(STDERR_FILENO);
  if (tty) {
    options.progress = [](std::int64_t done, std::int64_t total) {
      std::fprintf(stderr, "\r%lld / %lld tokens", static_cast<long long>(done),
                   static_cast<long long>(total));
    };
  }
  const measure::ScoredModel scored{*model.model, *model.tokenizer};
  std::optional<measure::ScoredModel> reference;
  if (base.model) reference.emplace(measure::ScoredModel{*base.model, *base.tokenizer});

  measure::PerplexityResult r;
  std::signal(SIGINT, on_perplexity_interrupt);
  try {
    r = measure::measure_perplexity(scored, text.str(), pool, options,
                                    reference ? &*reference : nullptr);
  } catch (const std::exception& e) {
    std::signal(SIGINT, SIG_DFL);
    std::fprintf(stderr, "%standem: %s\n", tty ? "\n" : "", e.what());
    // A request that cannot be measured is a usage error; anything else a failure.
    return dynamic_cast<const measure::PerplexityError*>(&e) != nullptr ? 2 : 1;
  }
  std::signal(SIGINT, SIG_DFL);
  if (tty) std::fputs("\n", stderr);

  if (o.json) {
    nlohmann::json out = {{"model", o.model},
                          {"file", o.file},
                          {"context_tokens", context},
                          {"text_tokens", r.text_tokens},
                          {"evaluated_tokens", r.evaluated_tokens},
                          {"windows", r.windows},
                          {"mean_nll", r.mean_nll},
                          {"perplexity", r.perplexity()},
                          {"seconds", r.seconds},
                          {"threads", threads},
                          {"pools", pool.pools()},
                          {"kv_cache", backend::kv_cache_format_name(options.kv_cache)},
                          {"complete", !r.cancelled}};
    if (r.mean_kl && !o.kl_base.empty()) {
      out["kl_base"] = o.kl_base;
      out["kl_base_kv_cache"] = backend::kv_cache_format_name(options.base_kv_cache);
    }
    if (r.mean_kl && !o.kl_base_logits.empty()) {
      out["kl_base_logits"] = o.kl_base_logits;
      out["kl_base_saved_from"] = r.base_saved_from;
    }
    if (r.mean_kl) out["mean_kl"] = *r.mean_kl;
    if (widening) {
      out["amx_widen_from"] = widening->from;
      out["amx_widen_measured"] = widening->measured;
    }
    if (!o.save_logits.empty() && !r.cancelled) out["saved_logits"] = o.save_logits;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << fmt::format("tokens evaluated: {} of {} ({} windows of up to {} tokens){}\n",
                             r.evaluated_tokens, r.text_tokens, r.windows, context,
                             r.cancelled ? ", interrupted" : "");
    std::cout << fmt::format(
        "perplexity:       {:.4f} (mean negative log-likelihood {:.5f} nats)\n", r.perplexity(),
        r.mean_nll);
    if (r.mean_kl) {
      std::cout << fmt::format(
          "mean KL vs base:  {:.6f} nats ({})\n", *r.mean_kl,
          o.kl_base.empty() ? o.kl_base_logits + ", saved from " + r.base_saved_from : o.kl_base);
    }
    if (!o.save_logits.empty() && !r.cancelled)
      std::cout << fmt::format("saved:            {} (for --kl-base-logits)\n", o.save_logits);
    std::cout << fmt::format("time:             {:.2f} s, {:.0f} tokens/s, {} threads\n", r.seconds,
                             r.seconds > 0 ? static_cast<double>(r.text_tokens) / r.seconds : 0.0,
                             threads);
  }
  return r.cancelled ? 130 : 0;
}

}  // namespace tandem::app
