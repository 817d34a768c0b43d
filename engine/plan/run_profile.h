// The parameters a saved profile runs a model with: the plan that `tandem recommend --save`
// and the setup wizard write (its "parameters" list, under the seeds' names). Each may be
// absent; what a profile leaves out keeps the command's own default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::plan {

struct RunProfile {
  std::string path;
  std::optional<std::string> kt_method;  // e.g. AMXINT8: the CPU format of the experts
  std::optional<int> cpuinfer;           // threads
  std::optional<int> threadpool_count;
  std::optional<std::int64_t> num_gpu_experts;
  std::optional<std::int64_t> max_deferred_experts_per_token;
  std::optional<std::int64_t> gpu_prefill_token_threshold;
  std::optional<std::string> expert_placement_strategy;
  std::optional<bool> enable_dynamic_expert_update;
  std::optional<std::int64_t> context_length;
  std::optional<std::int64_t> prefill_chunk;  // tokens a prompt's forward pass takes
  std::optional<std::string> accelerator;     // auto, cuda, emulated, none
  std::optional<std::string> kv_cache;        // the CPU's KV cache: bf16, int8, f32
  std::optional<std::string> expert_stats;    // a statistics file for the frequency strategy
};

// Throws std::runtime_error with a sentence naming the file and the parameter for anything
// unreadable or malformed. Names it does not know are left alone (a newer Tandem's).
RunProfile read_run_profile(const std::string& path);
RunProfile run_profile_from_json(const nlohmann::json& document, const std::string& path);

// Writes a profile document (the plan's JSON, plan/memory_planner.h) to `path`, creating
// its folder, under a temporary name renamed into place. Throws std::runtime_error with a
// sentence when it cannot.
void write_run_profile(const std::string& path, const nlohmann::json& document);

// The CPU format a kt-method names ("AMXINT4" -> "int4"): AMX, AVX512 or AVX2 followed by
// INT8, INT4, BF16, MXFP4, INT4DOWN8 ("int4-down8") or INT8ROTATED ("int8-rotated"); empty when
// it names none.
std::string cpu_format_of_method(const std::string& kt_method);

}  // namespace tandem::plan
