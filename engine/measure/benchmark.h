// `tandem bench`: prompt processing and decoding speed as llama-bench measures them (mean
// and standard deviation over repetitions), with the memory bandwidth and the decode
// roofline it implies.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/forward/model_runner.h"
#include "engine/measure/compute_ceiling.h"
#include "engine/measure/metrics.h"

namespace tandem::measure {

struct BenchOptions {
  std::int64_t prompt_tokens = 512;
  std::int64_t decode_tokens = 128;
  // Tokens already in the KV cache before each prompt and decode test (llama-bench's -d):
  // filled anew, uncounted, before every repetition, so each test starts at that depth.
  std::int64_t depth_tokens = 0;
  int repetitions = 3;
  // One uncounted prompt and decode first, as llama-bench does: the first pass pays for
  // page faults in fresh buffers and the KV cache.
  bool warmup = true;
  std::uint64_t seed = 1;
  // Record a timeline of every thread over the counted runs (measure/trace.h); the caller
  // writes it.
  bool trace = false;
  // Measure the prompt's compute ceiling (compute_ceiling.h): for the CPU alone, with the
  // instruction its attention multiplies with (none: attention not counted).
  bool prompt_ceiling = false;
  std::optional<kernels::ProductInstruction> attention_instruction;
  // How the CPU keeps keys and values, when attention runs on the CPU: the decode roofline
  // then counts the cache a token reads beside the weights (none: weights only).
  std::optional<backend::KvCacheFormat> cpu_cache_format;
};

// The bytes of keys and values a decoded token reads, on average over `decode_tokens` decoded
// after `context` cached ones (the i-th sees context + i positions): each attention layer's
// positions (a sliding window's at most) at the cache's bytes a position, plus each linear
// layer's state once.
std::uint64_t cache_bytes_per_decode_token(const model::LoadedModel& model, std::int64_t context,
                                           std::int64_t decode_tokens,
                                           backend::KvCacheFormat format);

// Mean and sample standard deviation (n - 1) of repeated measurements; 0 when too few.
double sample_mean(const std::vector<double>& values);
double sample_stddev(const std::vector<double>& values);

struct Measurement {
  std::vector<double> tokens_per_s;  // one per repetition
  double mean() const;
  double stddev() const;
};

// Where a test's time went, per token, over its counted runs (measure/metrics.h says what
// the parts are); with an accelerator the host's and the device's parts overlap.
struct TimeSplit {
  double attention_ms = 0, cpu_experts_ms = 0, gpu_experts_ms = 0, dense_ms = 0, bus_ms = 0,
         waiting_ms = 0, other_ms = 0, device_idle_ms = 0, copy_ms = 0;
  double bus_bytes = 0;
  std::uint64_t moves = 0;  // dynamic-update moves that completed during the test
  static TimeSplit between(const MetricsSnapshot& before, const MetricsSnapshot& after);
};

struct BenchResult {
  Measurement prompt;
  Measurement decode;
  TimeSplit prompt_split;
  TimeSplit decode_split;
  // The memory's read rate, measured after the runs.
  double read_bandwidth_bytes_per_s = 0;
  // The read rate measured right after each counted decode run, one per repetition (none with
  // BenchOptions::trace): a machine whose memory speed drifts between runs (a virtual
  // machine's, by up to twice) holds each run against its own moment's rate.
  std::vector<double> decode_bandwidth_bytes_per_s;
  std::uint64_t active_bytes_per_token = 0;
  // The KV cache (and linear layers' state) a decoded token reads, on average over the decode
  // test (BenchOptions::cpu_cache_format; 0 without it).
  std::uint64_t cache_bytes_per_token = 0;
  // The bandwidth over the weights and cache a decoded token reads: the mean of the rates
  // beside the decode runs where there are some, else the rate after the runs.
  double roofline_tokens_per_s() const;
  // The decode runs' mean share of the roofline, each run against its own rate where measured
  // beside it (else the decode mean over roofline_tokens_per_s).
  double roofline_fraction() const;
  // With BenchOptions::prompt_ceiling: what a prompt token multiplies, each instruction's
  // measured multiply-adds a second on the benchmark's threads (the better of a probe before
  // the runs and one after), and the tokens a second they allow (0 when something went
  // uncounted: prompt_work.uncounted says what).
  PromptWork prompt_work;
  std::vector<std::pair<kernels::ProductInstruction, double>> peak_multiply_adds;
  double prompt_ceiling_tokens_per_s = 0;
  double prompt_ceiling_fraction() const;  // prompt mean / ceiling
  // The measured multiply-adds a second of `instruction`, 0 when not measured.
  double peak_of(kernels::ProductInstruction instruction) const;
};

// Runs on random token ids (no tokenizer needed) on `runner`, the CPU alone or hybrid; `pool`
// holds the CPU's threads (the bandwidth probe runs on them). `progress` gets a line per step.
BenchResult run_benchmark(forward::ModelRunner& runner, backend::NumaPools& pool,
                          const BenchOptions& options,
                          const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
