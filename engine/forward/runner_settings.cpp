#include "engine/forward/runner_settings.h"

#include <fmt/format.h>

#include <stdexcept>

#include "engine/backend/cpu/kv_cache.h"
#include "engine/hw/hardware_report.h"
#include "engine/hw/memory_info.h"
#include "engine/log/log.h"

namespace tandem::forward {

void apply_profile(const plan::RunProfile& p, RunSettings& s) {
  const std::string in = " in the profile " + p.path;
  if (p.kt_method)
    model::parse_cpu_format(plan::cpu_format_of_method(*p.kt_method), s.load.cpu_format);
  if (p.cpuinfer) s.threads = *p.cpuinfer;
  if (p.threadpool_count) s.load.pools = *p.threadpool_count;
  if (p.context_length) s.context = *p.context_length;
  if (p.prefill_chunk) s.hybrid.chunk_tokens = *p.prefill_chunk;
  if (p.num_gpu_experts) s.hybrid.gpu_experts_per_layer = *p.num_gpu_experts;
  if (p.max_deferred_experts_per_token)
    s.hybrid.max_deferred_per_token = *p.max_deferred_experts_per_token;
  if (p.gpu_prefill_token_threshold)
    s.hybrid.prefill_token_threshold = *p.gpu_prefill_token_threshold;
  if (p.enable_dynamic_expert_update) s.hybrid.dynamic_update = *p.enable_dynamic_expert_update;
  if (p.expert_placement_strategy &&
      !schedule::parse_strategy(*p.expert_placement_strategy, s.hybrid.strategy)) {
    throw std::invalid_argument("the expert placement strategy \"" + *p.expert_placement_strategy +
                                "\"" + in + " is not one Tandem knows; use " +
                                schedule::strategy_names());
  }
  if (p.accelerator && !backend::parse_accelerator_choice(*p.accelerator, s.accelerator.choice)) {
    throw std::invalid_argument("the accelerator \"" + *p.accelerator + "\"" + in +
                                " is not one Tandem knows; use auto, cuda, emulated or none");
  }
  if (p.kv_cache && !backend::parse_kv_cache_format(*p.kv_cache, s.kv_cache)) {
    throw std::invalid_argument("the KV cache \"" + *p.kv_cache + "\"" + in +
                                " is not one Tandem knows; use bf16, int8 or f32");
  }
  if (p.expert_stats) s.expert_stats = *p.expert_stats;
}

bool asks_for_hybrid(const schedule::HybridOptions& h) {
  return h.gpu_experts_per_layer > 0 || h.max_deferred_per_token > 0 ||
         h.prefill_token_threshold > 0 || h.dynamic_update ||
         h.strategy != schedule::PlacementStrategy::Uniform;
}

std::string context_error(const model::ModelSpec& spec, std::int64_t context_tokens,
                          std::string_view set_by) {
  const std::int64_t limit = spec.position_limit();
  if (limit <= 0 || context_tokens <= limit) return {};
  const bool scaled =
      spec.rope.type == model::RopeType::Yarn || spec.rope.type == model::RopeType::Linear;
  return fmt::format(
      "A context of {} tokens is longer than the {} positions this {} model takes{}; past them "
      "its answers fall apart. Use a context of at most {} ({}){}.",
      context_tokens, limit, model::architecture_display_name(spec.architecture),
      scaled ? " with its RoPE scaling" : "", limit, set_by,
      scaled ? "" : ", or set RoPE scaling (YaRN) in its config.json where its makers give one");
}

std::string cache_memory_error(const model::ModelSpec& spec, std::int64_t context_tokens,
                               backend::KvCacheFormat format, std::uint64_t available_bytes,
                               std::string_view set_by) {
  using backend::KvCache;
  const std::uint64_t bytes = KvCache::bytes_for(spec, context_tokens, format);
  if (bytes <= available_bytes) return {};
  // The cache grows with the context: the longest that fits, in whole thousands where it
  // is that long.
  std::int64_t fits = 0;
  for (std::int64_t step = std::int64_t{1} << 40; step > 0; step /= 2)
    if (fits + step < context_tokens &&
        KvCache::bytes_for(spec, fits + step, format) <= available_bytes)
      fits += step;
  if (fits >= 4096) fits = fits / 1024 * 1024;
  if (fits == 0)
    return fmt::format(
        "The keys and values of even one token ({}) do not fit in the {} of memory free now: "
        "close programs that hold memory, or run a smaller model.",
        backend::kv_cache_format_name(format), hw::format_bytes(available_bytes));
  std::string out = fmt::format(
      "A context of {} tokens keeps {} of keys and values ({}), more than the {} of memory free "
      "now. Use a context of at most {} ({})",
      context_tokens, hw::format_bytes(bytes), backend::kv_cache_format_name(format),
      hw::format_bytes(available_bytes), fits, set_by);
  const backend::KvCacheFormat int8 = backend::KvCacheFormat::Int8;
  if (format != int8 && KvCache::refusal(spec, int8).empty() &&
      KvCache::bytes_for(spec, context_tokens, int8) < bytes)
    out += fmt::format(
        ", or keep them at 8 bits ({}: --kv-cache int8; in the app, KV cache in Preferences)",
        hw::format_bytes(KvCache::bytes_for(spec, context_tokens, int8)));
  return out + ", or close programs that hold memory.";
}

BuiltRunner make_runner(const model::LoadedModel& model, backend::NumaPools& pools,
                        const RunSettings& settings, std::int64_t context_tokens) {
  if (!settings.past_position_limit) {
    const std::string error = context_error(model.spec(), context_tokens, settings.context_set_by);
    if (!error.empty()) throw std::invalid_argument(error);
  }
  backend::AcceleratorResult accelerator =
      backend::make_accelerator(settings.accelerator, model.spec());
  BuiltRunner built;
  built.note = accelerator.note;
  built.no_accelerator_reason = accelerator.reason;
  built.widening = choose_widening(model, pools, settings.amx_widen_from);
  if (!accelerator.backend) {
    if (asks_for_hybrid(settings.hybrid))
      built.note += "; the settings for the accelerator's experts are not used";
    schedule::HybridOptions cpu_alone;  // of the settings for where it runs, the chunk
    cpu_alone.chunk_tokens = settings.hybrid.chunk_tokens;
    built.runner = std::make_unique<ModelRunner>(model, pools, nullptr, cpu_alone);
    built.runner->set_cpu_kv_cache_format(settings.kv_cache);
    // Attention on the CPU: its cache is host memory, which must be free for it.
    if (const hw::MemoryInfo memory = hw::probe_memory(); memory.error.empty()) {
      const std::string error = cache_memory_error(model.spec(), context_tokens, settings.kv_cache,
                                                   memory.available_bytes, settings.context_set_by);
      if (!error.empty()) throw std::invalid_argument(error);
    }
    return built;
  }
  schedule::HybridOptions hybrid = settings.hybrid;
  hybrid.context_tokens = context_tokens;
  if (!settings.expert_stats.empty()) {
    hybrid.stats = schedule::read_routing_statistics(settings.expert_stats);
  }
  built.runner =
      std::make_unique<ModelRunner>(model, pools, std::move(accelerator.backend), hybrid);
  built.runner->set_cpu_kv_cache_format(settings.kv_cache);
  if (settings.kv_cache_asked)
    built.note += fmt::format(
        "; attention runs on the accelerator, which keeps its own KV cache, so the CPU's {} "
        "cache is not used",
        backend::kv_cache_format_name(settings.kv_cache));
  return built;
}

}  // namespace tandem::forward
