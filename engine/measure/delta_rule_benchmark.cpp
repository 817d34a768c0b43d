#include "engine/measure/delta_rule_benchmark.h"

#include <fmt/format.h>


#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "kernels/cpu/isa.h"

namespace tandem::measure {
namespace {

// Qwen3-Next-80B-A3B's linear attention: 16 key heads and 32 value heads of 128, a
// convolution of 4 taps, one layer.
model::ModelSpec qwen3_next_80b_layer() {
  model::ModelSpec s;
  s.num_layers = 1;
  s.layer_is_linear = {true};
  s.num_heads = 16;
  s.num_kv_heads = 2;
  s.head_dim = 256;
  s.linear_key_heads = 16;
  s.linear_value_heads = 32;
  s.linear_key_dim = 128;
  s.linear_value_dim = 128;
  s.linear_conv_kernel = 4;
  s.rms_norm_eps = 1e-6;
  return s;
}

std::vector<float> values(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<float> v = random_values(n, seed);
  for (float& x : v) x *= scale;
  return v;
}

}  // namespace

DeltaRuleBenchReport run_delta_rule_benchmark(
    const DeltaRuleBenchOptions& options, const std::function<void(const std::string&)>& progress) {
  DeltaRuleBenchReport report;
  report.cpu = kernels::detect_isa().identity.brand;
  const model::ModelSpec spec = qwen3_next_80b_layer();
  report.shape = "Qwen3-Next-80B-A3B's gated DeltaNet layer (16 key and 32 value heads of 128)";
  const std::int64_t nv = spec.linear_value_heads, dv = spec.linear_value_dim;
  const std::int64_t row = spec.linear_conv_channels() + nv * dv;
  std::int64_t most = 1;
  for (std::int64_t t : options.tokens) most = std::max(most, t);
  const auto n = static_cast<std::size_t>(most);
  const std::vector<float> qkvz = values(n * static_cast<std::size_t>(row), 1, 1.0f);
  const std::vector<float> ba = values(n * static_cast<std::size_t>(2 * nv), 2, 2.0f);
  const std::vector<float> conv = values(
      static_cast<std::size_t>(spec.linear_conv_channels() * spec.linear_conv_kernel), 3, 0.5f);
  const std::vector<float> a_log = values(static_cast<std::size_t>(nv), 4, 1.0f);
  const std::vector<float> dt_bias(static_cast<std::size_t>(nv), 1.0f);
  const std::vector<float> norm(static_cast<std::size_t>(dv), 1.0f);
  std::vector<float> out(n * static_cast<std::size_t>(nv * dv));

  for (int threads : options.threads) {
    backend::NumaPools pools(threads, 1, /*pin=*/true);
    backend::CpuThreads cpu(pools);
    for (std::int64_t tokens : options.tokens) {
      for (std::int64_t chunk : {std::int64_t{0}, backend::cpu_ops::kDeltaRuleChunk}) {
        // One token per call runs token by token whatever the form: measured once.
        if (tokens < backend::cpu_ops::kDeltaRuleChunk / 2 && chunk > 0) continue;
        DeltaRuleBenchRow r;
        r.form = chunk > 0 ? fmt::format("chunks of {}", chunk) : "token by token";
        r.threads = threads;
        r.tokens = tokens;
        backend::KvCache cache(spec, 1);
        // A call is a prompt of `tokens` from position 0; a one-token call is a decode step
        // after the ones before it.
        const std::int64_t steps = tokens == 1 ? std::min<std::int64_t>(most, 64) : 1;
        const auto once = [&] {
          for (std::int64_t s = 0; s < steps; ++s) {
            backend::cpu_ops::gated_delta_net(
                cpu, spec, cache, 0, qkvz.data() + s * row, ba.data() + s * 2 * nv, tokens, s,
                conv.data(), a_log.data(), dt_bias.data(), norm.data(), out.data(), chunk);
          }
        };
        for (int rep = 0; rep < options.repetitions; ++rep) {
          const double seconds = seconds_per_product(once, options.min_sample_seconds);
          r.microseconds_per_token.values.push_back(seconds / static_cast<double>(steps) /
                                                    static_cast<double>(tokens) * 1e6);
        }
        if (progress) {
          progress(fmt::format("{} threads, {} tokens, {}: {:.1f} ± {:.1f} µs per token", threads,
                               tokens, r.form, r.microseconds_per_token.mean(),
                               r.microseconds_per_token.stddev()));
        }
        report.rows.push_back(std::move(r));
      }
    }
  }
  return report;
}

}  // namespace tandem::measure
