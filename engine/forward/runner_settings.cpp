#include "engine/forward/runner_settings.h"

#include <fmt/format.h>

#include <stdexcept>

#include "engine/log/log.h"

namespace tandem::forward {

void apply_profile(const plan::RunProfile& p, RunSettings& s) {
  const std::string in = " in the profile " + p.path;
  if (p.kt_method)
    model::parse_cpu_format(plan::cpu_format_of_method(*p.kt_method), s.load.cpu_format);
  if (p.cpuinfer) s.threads = *p.cpuinfer;
  if (p.threadpool_count) s.load.pools = *p.threadpool_count;
  if (p.context_length) s.context = *p.context_length;
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

std::string context_error(const model::ModelSpec& spec, std::int64_t context_tokens) {
  const std::int64_t limit = spec.position_limit();
  if (limit <= 0 || context_tokens <= limit) return {};
  const bool scaled =
      spec.rope.type == model::RopeType::Yarn || spec.rope.type == model::RopeType::Linear;
  return fmt::format(
      "A context of {} tokens is longer than the {} positions this {} model takes{}; past them "
      "its answers fall apart. Use a context of at most {} (--context; in the app, the context "
      "length in the Setup Assistant){}.",
      context_tokens, limit, model::architecture_display_name(spec.architecture),
      scaled ? " with its RoPE scaling" : "", limit,
      scaled ? "" : ", or set RoPE scaling (YaRN) in its config.json where its makers give one");
}

BuiltRunner make_runner(const model::LoadedModel& model, backend::NumaPools& pools,
                        const RunSettings& settings, std::int64_t context_tokens) {
  if (!settings.past_position_limit) {
    const std::string error = context_error(model.spec(), context_tokens);
    if (!error.empty()) throw std::invalid_argument(error);
  }
  backend::AcceleratorResult accelerator =
      backend::make_accelerator(settings.accelerator, model.spec());
  BuiltRunner built;
  built.note = accelerator.note;
  built.no_accelerator_reason = accelerator.reason;
  if (!accelerator.backend) {
    if (asks_for_hybrid(settings.hybrid))
      built.note += "; the settings for the accelerator's experts are not used";
    built.runner = std::make_unique<ModelRunner>(model, pools);
    built.runner->set_cpu_kv_cache_format(settings.kv_cache);
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
  return built;
}

}  // namespace tandem::forward
