#include "engine/measure/attention_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/isa.h"

namespace tandem::measure {
namespace {

// Layers whose caches the measurement takes in turn: as many as the 8-layer synthetic's, so
// that a deep cache comes from memory as in a model (134 MB at a depth of 8192), not from
// the third-level cache that one layer's 17 MB would fit.
constexpr std::int64_t kLayers = 8;

// Attention layers of the options' shape (Qwen3-30B-A3B's: 32 query heads over 4 KV heads of
// 128).
model::ModelSpec attention_layers(const AttentionBenchOptions& o) {
  if (o.heads < 1 || o.kv_heads < 1 || o.head_dim < 1 || o.heads % o.kv_heads != 0)
    throw std::invalid_argument(
        "bench --attention takes query heads that are a multiple of the "
        "KV heads, such as 32/4/128");
  model::ModelSpec s;
  s.num_layers = kLayers;
  s.num_heads = o.heads;
  s.num_kv_heads = o.kv_heads;
  s.head_dim = o.head_dim;
  s.attention_scale = 1.0 / std::sqrt(static_cast<double>(o.head_dim));
  return s;
}

}  // namespace

double AttentionBenchRow::peak_fraction() const {
  return peak_gflops > 0 ? gflops.mean() / peak_gflops : 0;
}

AttentionBenchReport run_attention_benchmark(
    const AttentionBenchOptions& options, const std::function<void(const std::string&)>& progress) {
  AttentionBenchReport report;
  report.cpu = kernels::detect_isa().identity.brand;
  const model::ModelSpec spec = attention_layers(options);
  const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
  const std::int64_t group = nh / nkv;
  const kernels::AttentionVariant variant = kernels::active_attention_variant();
  if (options.cache == backend::KvCacheFormat::F32)
    throw std::invalid_argument("bench --attention measures a bf16 or an int8 KV cache");
  const bool int8 = options.cache == backend::KvCacheFormat::Int8;
  const bool qwen3 = nh == 32 && nkv == 4 && hd == 128;
  report.shape = fmt::format("{}attention ({} query heads over {} KV heads of {}), {}",
                             qwen3 ? "Qwen3-30B-A3B's " : "", nh, nkv, hd,
                             int8 ? "8-bit cache" : "BF16 cache");
  report.kernel = kernels::attention_variant_name(variant);
  std::int64_t longest = 1, deepest = 0;
  for (std::int64_t t : options.tokens) longest = std::max(longest, t);
  for (std::int64_t d : options.depths) deepest = std::max(deepest, d);
  const auto n = static_cast<std::size_t>(longest);
  const std::vector<float> q = random_values(n * static_cast<std::size_t>(nh * hd), 1);
  const std::vector<float> k =
      random_values(static_cast<std::size_t>((deepest + longest) * nkv * hd), 2);
  const std::vector<float> v =
      random_values(static_cast<std::size_t>((deepest + longest) * nkv * hd), 3);
  std::vector<float> out(n * static_cast<std::size_t>(nh * hd));
  const std::optional<kernels::ProductInstruction> instruction =
      kernels::attention_product_instruction(variant, backend::cache_elements(options.cache),
                                             kernels::detect_isa().usable);

  for (int threads : options.threads) {
    const double peak =
        instruction.has_value() ? instruction_peak_gflops(report.peaks, *instruction, threads) : 0;
    backend::NumaPools pools(threads, 1, /*pin=*/true);
    backend::CpuThreads cpu(pools);
    for (std::int64_t depth : options.depths) {
      for (std::int64_t tokens : options.tokens) {
        backend::KvCache cache(spec, depth + tokens, options.cache);
        for (std::int64_t layer = 0; layer < kLayers; ++layer) {
          for (std::int64_t pos = 0; pos < depth + tokens; ++pos) {
            cache.store_key(layer, pos, k.data() + pos * nkv * hd);
            cache.store_value(layer, pos, v.data() + pos * nkv * hd);
          }
        }
        std::int64_t next_layer = 0;
        double flops = 0.0;
        for (std::int64_t t = 0; t < tokens; ++t)
          flops += 4.0 * static_cast<double>(nh * hd) * static_cast<double>(depth + t + 1);
        for (const char* form : {"flash-style", "per token"}) {
          const bool flash = form[0] == 'f';
          const auto once = [&] {
            const std::int64_t layer = next_layer++ % kLayers;
            if (flash) {
              backend::cpu_ops::attention(cpu, spec, cache, layer, q.data(),
                                          k.data() + depth * nkv * hd, v.data() + depth * nkv * hd,
                                          tokens, depth, out.data());
              return;
            }
            // Each (token, KV head) on its own, the latest first, as prompts ran before.
            const std::int64_t jobs = tokens * nkv;
            cpu.parallel_for(jobs, 1, [&](std::int64_t begin, std::int64_t end) {
              thread_local std::vector<float> scores;
              scores.resize(static_cast<std::size_t>(group * (depth + tokens)));
              for (std::int64_t job = begin; job < end; ++job) {
                const std::int64_t t = tokens - 1 - job / nkv, kvh = job % nkv;
                const std::int64_t head0 = t * nh + kvh * group;
                const auto scale = static_cast<float>(spec.attention_scale);
                if (int8) {
                  kernels::attend_heads_int8(
                      q.data() + head0 * hd, group, cache.int8_head(layer, kvh), 0, depth + t + 1,
                      scale, scores.data(), out.data() + head0 * hd, nullptr, variant);
                } else {
                  kernels::attend_heads_bf16(
                      q.data() + head0 * hd, group, cache.bf16_head(layer, kvh), 0, depth + t + 1,
                      scale, scores.data(), out.data() + head0 * hd, nullptr, variant);
                }
              }
            });
          };
          AttentionBenchRow r;
          r.form = form;
          r.threads = threads;
          r.tokens = tokens;
          r.depth = depth;
          r.peak_gflops = peak;
          for (int rep = 0; rep < options.repetitions; ++rep)
            r.gflops.values.push_back(flops /
                                      seconds_per_product(once, options.min_sample_seconds) / 1e9);
          if (progress) {
            progress(fmt::format("{} threads, {} tokens after {}, {}: {:.0f} ± {:.0f} GFLOP/s",
                                 threads, tokens, depth, r.form, r.gflops.mean(),
                                 r.gflops.stddev()));
          }
          report.rows.push_back(std::move(r));
        }
      }
    }
  }
  return report;
}

}  // namespace tandem::measure
