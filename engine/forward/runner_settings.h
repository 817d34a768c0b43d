// What a model runs with, as the command line and the desktop app collect it: the defaults,
// then a saved profile (plan/run_profile.h), then what the user gave explicitly; and the
// runner built from it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine/backend/accelerator.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/forward/amx_widening.h"
#include "engine/forward/model_runner.h"
#include "engine/model/loaded_model.h"
#include "engine/plan/run_profile.h"
#include "engine/schedule/hybrid_options.h"

namespace tandem::forward {

struct RunSettings {
  model::LoadOptions load;
  int threads = 0;           // 0: one per physical core
  std::int64_t context = 0;  // 0: the model's, at most 4096
  backend::AcceleratorRequest accelerator;
  // The KV cache where attention runs on the CPU: BF16 unless asked otherwise (half the
  // memory and bytes read; f32 for results that match an fp32 reference more closely).
  backend::KvCacheFormat kv_cache = backend::KvCacheFormat::Bf16;
  bool kv_cache_asked = false;  // named by the user: said when an accelerator keeps its own
  schedule::HybridOptions hybrid;
  std::string expert_stats;  // the statistics file the frequency strategy places by
  // The statistics file the run's routing is added to when it ends; empty: none.
  std::string record_expert_stats;
  // Take a context past the positions the model takes (ModelSpec::position_limit): for
  // benchmarks, which measure speed and not answers; anything that answers refuses it.
  bool past_position_limit = false;
  // Where the context is set, for a sentence that asks for a shorter one (bench sets it by
  // its tests' lengths).
  std::string context_set_by = "--context; in the app, the context length in the Setup Assistant";
  // On AMX, the tokens from which INT8 and INT4 products are widened to BF16 (0: never);
  // nullopt: measured on this CPU for the model's shapes (amx_widening.h).
  std::optional<std::int64_t> amx_widen_from;
};

// Takes the profile's values; std::invalid_argument with a sentence for one that means
// nothing (an unknown strategy, accelerator or KV cache).
void apply_profile(const plan::RunProfile& profile, RunSettings& settings);

// Whether the settings ask for anything only an accelerator does.
bool asks_for_hybrid(const schedule::HybridOptions& hybrid);

struct BuiltRunner {
  std::unique_ptr<ModelRunner> runner;
  std::string note;                   // where it runs, for the user
  std::string no_accelerator_reason;  // why there is no accelerator, in a few words
  // On AMX with INT8 or INT4 weights: where their products are widened (logged, and
  // describe() says it).
  std::optional<WideningChoice> widening;
};

// Why a context of `context_tokens` cannot run `spec`, as a sentence that says what to use;
// empty when it can (within its position limit, or the model does not say).
// `set_by` says where the context is set (RunSettings::context_set_by).
std::string context_error(const model::ModelSpec& spec, std::int64_t context_tokens,
                          std::string_view set_by);

// Why the CPU's KV cache for `context_tokens` of `spec` in `format` cannot be made with
// `available_bytes` of memory free, as a sentence with the longest context that fits and,
// where it fits more, the 8-bit cache; empty when it fits.
// `set_by` says where the context is set (RunSettings::context_set_by).
std::string cache_memory_error(const model::ModelSpec& spec, std::int64_t context_tokens,
                               backend::KvCacheFormat format, std::uint64_t available_bytes,
                               std::string_view set_by);

// The runner for `model` on `pools` with a KV cache of `context_tokens` in mind: resolves
// the accelerator, reads the statistics for the frequency strategy. Throws
// std::invalid_argument, backend::DeviceOutOfMemory or std::runtime_error with a sentence;
// std::invalid_argument for a context past the positions the model takes (context_error),
// unless settings.past_position_limit, and for a CPU KV cache larger than the memory free
// now (cache_memory_error), which would otherwise end the process when its pages are touched.
// On AMX it first sets where INT8 and INT4 products are widened (choose_widening), measuring
// it unless settings.amx_widen_from gives it.
BuiltRunner make_runner(const model::LoadedModel& model, backend::NumaPools& pools,
                        const RunSettings& settings, std::int64_t context_tokens);

}  // namespace tandem::forward
