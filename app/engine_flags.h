// The flags that say where a model runs, shared by run, chat and bench: --accelerator and the
// emulated accelerator's settings, the CPU's KV cache format, the seeds' parameter names
// (--num-gpu-experts,
// --max-deferred-experts-per-token, --gpu-prefill-token-threshold,
// --expert-placement-strategy, --enable-dynamic-expert-update), routing statistics, and a
// saved profile, which the explicit flags override.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/forward/runner_settings.h"

namespace tandem::app {

struct EngineFlags {
  std::string accelerator = "auto";
  std::string profile;
  std::string emulated_memory = "4G";
  double emulated_bus_gbps = 25.0;
  double emulated_latency_us = 10.0;
  int emulated_threads = 1;
  int gpu = -1;
  std::string gpu_memory;
  std::int64_t num_gpu_experts = -1;
  std::int64_t max_deferred = 0;
  std::int64_t prefill_threshold = 0;
  std::string strategy = "uniform";
  bool dynamic_update = false;
  std::string dynamic_budget = "64M";
  std::string expert_stats;
  std::string record_expert_stats;
  std::string kt_method;
  std::string kv_cache = "bf16";
  std::int64_t prefill_chunk = 0;
  std::string amx_widen_from = "auto";

  // Which were given, so that a profile's values are overridden only by them.
  CLI::Option* accelerator_option = nullptr;
  CLI::Option* num_gpu_experts_option = nullptr;
  CLI::Option* max_deferred_option = nullptr;
  CLI::Option* threshold_option = nullptr;
  CLI::Option* strategy_option = nullptr;
  CLI::Option* dynamic_option = nullptr;
  CLI::Option* budget_option = nullptr;
  CLI::Option* stats_option = nullptr;
  CLI::Option* kt_method_option = nullptr;
  CLI::Option* kv_cache_option = nullptr;
  CLI::Option* prefill_chunk_option = nullptr;
  CLI::Option* amx_widen_option = nullptr;
  CLI::Option* emulated_options[4] = {};
  CLI::Option* gpu_options[2] = {};
};

void add_engine_flags(CLI::App* command, EngineFlags& flags);
// --amx-widen-from (auto, never or a token count; forward::parse_widen_from) into `value`.
CLI::Option* add_amx_widen_option(CLI::App* command, std::string& value);

// --int4-group `group` (0: not given) into `load`: the INT4 group of weights packed at load,
// which only the int4 CPU format has; false with a sentence in `error` for another format.
bool apply_int4_group(int group, model::LoadOptions& load, std::string& error);

// Fills `settings` (whose load options, threads and context the command has set from its own
// flags) from the profile and the flags. False with a sentence in `error` for values that
// cannot be, or that contradict each other.
bool resolve_engine_flags(const EngineFlags& flags, bool threads_given, bool pools_given,
                          forward::RunSettings& settings, std::string& error);

// Applies the flags to settings a profile may have filled: with `given_only`, just the flags
// the user gave (the desktop app, after each model's profile). False with a sentence for
// values that contradict each other.
bool apply_engine_flags(const EngineFlags& flags, bool given_only, forward::RunSettings& settings,
                        std::string& error);

// Before a run: whether --record-expert-stats' file can take this model's statistics.
bool check_expert_stats_target(const EngineFlags& flags, const model::ModelSpec& spec,
                               std::string& error);

// The threads a command runs with: `asked`, or one per physical core when 0. More than the
// CPU's hardware threads is said on stderr: they take turns, slower than one per core.
int command_threads(int asked);

// The runner for a command: `tandem: SENTENCE` on stderr and the exit status in `status` (2
// for settings that cannot be, 1 for other failures) when it cannot be made.
std::optional<forward::BuiltRunner> build_runner(const model::LoadedModel& model,
                                                 backend::NumaPools& pool,
                                                 const forward::RunSettings& settings,
                                                 std::int64_t context_tokens, int& status);

// After a run: adds the routing the model did to --record-expert-stats' file, when given.
// False with a sentence on failure.
bool record_expert_stats(const EngineFlags& flags, const forward::ModelRunner& runner,
                         std::string& error);

}  // namespace tandem::app
