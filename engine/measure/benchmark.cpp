#include "engine/measure/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/generate/generator.h"
#include "engine/measure/trace.h"
#include "kernels/cpu/memory_bandwidth.h"

namespace tandem::measure {

double sample_mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double sample_stddev(const std::vector<double>& values) {
  if (values.size() < 2) return 0.0;
  const double m = sample_mean(values);
  double ss = 0.0;
  for (double v : values) ss += (v - m) * (v - m);
  return std::sqrt(ss / static_cast<double>(values.size() - 1));
}

double Measurement::mean() const {
  return sample_mean(tokens_per_s);
}

double Measurement::stddev() const {
  return sample_stddev(tokens_per_s);
}

double BenchResult::roofline_tokens_per_s() const {
  const double bandwidth = decode_bandwidth_bytes_per_s.empty()
                               ? read_bandwidth_bytes_per_s
                               : sample_mean(decode_bandwidth_bytes_per_s);
  return active_bytes_per_token > 0
             ? bandwidth / static_cast<double>(active_bytes_per_token + cache_bytes_per_token)
             : 0.0;
}

std::uint64_t cache_bytes_per_decode_token(const model::LoadedModel& model, std::int64_t context,
                                           std::int64_t decode_tokens,
                                           backend::KvCacheFormat format) {
  const model::ModelSpec& spec = model.spec();
  const std::vector<model::LayerWeights>& layers = model.weights().layers;
  const auto attention = static_cast<std::uint64_t>(
      std::count_if(layers.begin(), layers.end(), [](const auto& l) { return !l.linear; }));
  // What the cache holds per position and attention layer, and the linear layers' state (the
  // cache keeps it twice, the second a copy to rewind to).
  const std::uint64_t state = backend::KvCache::bytes_for(spec, 0, format);
  const std::uint64_t per_position =
      attention > 0 ? (backend::KvCache::bytes_for(spec, 1, format) - state) / attention : 0;
  const double seen = static_cast<double>(context) + static_cast<double>(decode_tokens + 1) / 2.0;
  double bytes = static_cast<double>(state) / 2.0;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].linear) continue;
    const std::int64_t window = l < spec.layer_window.size() ? spec.layer_window[l] : 0;
    const double positions = window > 0 ? std::min(seen, static_cast<double>(window)) : seen;
    bytes += positions * static_cast<double>(per_position);
  }
  return static_cast<std::uint64_t>(bytes);
}

double BenchResult::roofline_fraction() const {
  const std::vector<double>& rates = decode_bandwidth_bytes_per_s;
  if (!rates.empty() && rates.size() == decode.tokens_per_s.size() && active_bytes_per_token > 0) {
    const auto bytes = static_cast<double>(active_bytes_per_token + cache_bytes_per_token);
    std::vector<double> shares;
    for (std::size_t r = 0; r < rates.size(); ++r)
      shares.push_back(rates[r] > 0 ? decode.tokens_per_s[r] * bytes / rates[r] : 0.0);
    return sample_mean(shares);
  }
  const double roof = roofline_tokens_per_s();
  return roof > 0 ? decode.mean() / roof : 0.0;
}

double BenchResult::peak_of(kernels::ProductInstruction instruction) const {
  for (const auto& [measured, rate] : peak_multiply_adds)
    if (measured == instruction) return rate;
  return 0.0;
}

double BenchResult::prompt_ceiling_fraction() const {
  return prompt_ceiling_tokens_per_s > 0 ? prompt.mean() / prompt_ceiling_tokens_per_s : 0.0;
}

TimeSplit TimeSplit::between(const MetricsSnapshot& a, const MetricsSnapshot& b) {
  TimeSplit s;
  const double tokens = static_cast<double>(b.tokens - a.tokens);
  if (tokens <= 0) return s;
  const auto ms = [&](double before, double after) { return (after - before) * 1e3 / tokens; };
  s.attention_ms = ms(a.attention_seconds, b.attention_seconds);
  s.cpu_experts_ms = ms(a.cpu_expert_seconds, b.cpu_expert_seconds);
  s.gpu_experts_ms = ms(a.gpu_expert_seconds, b.gpu_expert_seconds);
  s.dense_ms = ms(a.dense_seconds, b.dense_seconds);
  s.bus_ms = ms(a.bus_seconds, b.bus_seconds);
  s.waiting_ms = ms(a.waiting_seconds, b.waiting_seconds);
  s.other_ms = ms(a.other_seconds, b.other_seconds);
  s.copy_ms = ms(a.copy_seconds, b.copy_seconds);
  s.device_idle_ms = ms(a.device_idle_seconds(), b.device_idle_seconds());
  s.bus_bytes = static_cast<double>(b.bus_bytes - a.bus_bytes) / tokens;
  s.moves = b.moves - a.moves;
  return s;
}

namespace {

// Adds what happened between `a` and `b` to `sum` (the counters only).
void accumulate(MetricsSnapshot& sum, const MetricsSnapshot& a, const MetricsSnapshot& b) {
  sum.tokens += b.tokens - a.tokens;
  for (auto field : {&MetricsSnapshot::forward_seconds, &MetricsSnapshot::attention_seconds,
                     &MetricsSnapshot::cpu_expert_seconds, &MetricsSnapshot::gpu_expert_seconds,
                     &MetricsSnapshot::dense_seconds, &MetricsSnapshot::bus_seconds,
                     &MetricsSnapshot::copy_seconds, &MetricsSnapshot::waiting_seconds,
                     &MetricsSnapshot::other_seconds})
    sum.*field += b.*field - a.*field;
  sum.bus_bytes += b.bus_bytes - a.bus_bytes;
  sum.moves += b.moves - a.moves;
}

}  // namespace

BenchResult run_benchmark(forward::ModelRunner& runner, backend::NumaPools& pool,
                          const BenchOptions& o,
                          const std::function<void(const std::string&)>& progress) {
  using Clock = std::chrono::steady_clock;
  const model::LoadedModel& model = runner.model();
  BenchResult result;
  result.active_bytes_per_token = model.active_weight_bytes_per_token();
  // The decode test runs after the depth's tokens, or a one-token context.
  if (o.cpu_cache_format && o.decode_tokens > 0)
    result.cache_bytes_per_token = cache_bytes_per_decode_token(
        model, std::max<std::int64_t>(1, o.depth_tokens), o.decode_tokens, *o.cpu_cache_format);
  // Each instruction's peak on the benchmark's own threads while nothing else computes: before
  // the runs and again after them, the higher kept. A peak is the most the instruction
  // sustains, and a host that holds one of a VM's CPUs through one probe (seen: a quarter of a
  // second at one thread's rate) would otherwise put the ceiling below the prompt's own speed.
  const auto probe = [&](kernels::ProductInstruction i) {
    return kernels::measure_peak_multiply_adds(i, pool.as_parallel_for());
  };
  const auto set_ceiling = [&] {
    result.prompt_ceiling_tokens_per_s = prompt_ceiling_tokens_per_s(
        result.prompt_work, [&](kernels::ProductInstruction i) { return result.peak_of(i); });
  };
  bool ceiling = false;
  if (o.prompt_ceiling && o.prompt_tokens > 0) {
    result.prompt_work =
        prompt_work_per_token(model, o.prompt_tokens, o.depth_tokens, o.attention_instruction);
    ceiling = result.prompt_work.uncounted.empty();
    if (ceiling) {
      for (const ProductWork& p : result.prompt_work.products) {
        if (result.peak_of(p.instruction) == 0)
          result.peak_multiply_adds.emplace_back(p.instruction, probe(p.instruction));
      }
      set_ceiling();
    }
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<std::int32_t> token(
      0, static_cast<std::int32_t>(model.spec().vocab_size - 1));
  generate::Generator generator(runner, o.depth_tokens + o.prompt_tokens + o.decode_tokens + 1);
  const std::string at_depth =
      o.depth_tokens > 0 ? fmt::format(" @ d{}", o.depth_tokens) : std::string();
  // The depth's tokens, evaluated (uncounted) into a fresh cache before each test.
  const auto fill_depth = [&] {
    generator.reset();
    std::vector<std::int32_t> context(static_cast<std::size_t>(o.depth_tokens));
    for (auto& t : context) t = token(rng);
    if (!context.empty()) generator.evaluate(context);
    return context;
  };
  const Metrics& metrics = *runner.metrics();
  // A buffer far larger than the caches (1 GiB), for the read rate beside each decode run
  // and after the runs.
  const kernels::ReadBandwidthProbe bandwidth(1ull << 30);
  MetricsSnapshot prompt_sum, decode_sum;
  // Run -1 is the warm-up: measured the same way, not recorded.
  for (int r = o.warmup ? -1 : 0; r < o.repetitions; ++r) {
    const bool counted = r >= 0;
    if (o.trace && r == 0) {
      trace::name_thread("engine");
      trace::start();
    }
    if (o.prompt_tokens > 0) {
      std::vector<std::int32_t> prompt = fill_depth();
      for (std::int64_t i = 0; i < o.prompt_tokens; ++i) prompt.push_back(token(rng));
      const MetricsSnapshot before = metrics.snapshot();
      const auto t0 = Clock::now();
      generator.evaluate(prompt);  // the depth is cached: only the prompt's tokens run
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (counted) {
        result.prompt.tokens_per_s.push_back(static_cast<double>(o.prompt_tokens) / s);
        accumulate(prompt_sum, before, metrics.snapshot());
      }
      if (progress)
        progress(fmt::format("pp{}{} {}: {:.2f} tokens/s", o.prompt_tokens, at_depth,
                             counted ? fmt::format("run {}", r + 1) : std::string("warm-up"),
                             static_cast<double>(o.prompt_tokens) / s));
    }
    if (o.decode_tokens > 0) {
      // Decode after the depth's tokens, or a one-token context, as llama-bench's tg test.
      std::vector<std::int32_t> context = fill_depth();
      if (context.empty()) {
        context.push_back(token(rng));
        generator.evaluate(context);
      }
      const MetricsSnapshot before = metrics.snapshot();
      const auto t0 = Clock::now();
      for (std::int64_t i = 0; i < o.decode_tokens; ++i) {
        context.push_back(token(rng));
        generator.evaluate(context);
      }
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (counted) {
        result.decode.tokens_per_s.push_back(static_cast<double>(o.decode_tokens) / s);
        accumulate(decode_sum, before, metrics.snapshot());
        // Not inside a trace, whose timeline and busy shares are the runs' alone.
        if (!o.trace)
          result.decode_bandwidth_bytes_per_s.push_back(bandwidth.measure(pool.as_parallel_for()));
      }
      if (progress)
        progress(fmt::format("tg{}{} {}: {:.2f} tokens/s", o.decode_tokens, at_depth,
                             counted ? fmt::format("run {}", r + 1) : std::string("warm-up"),
                             static_cast<double>(o.decode_tokens) / s));
    }
  }
  if (o.trace) trace::stop();
  result.prompt_split = TimeSplit::between(MetricsSnapshot{}, prompt_sum);
  result.decode_split = TimeSplit::between(MetricsSnapshot{}, decode_sum);
  if (ceiling) {
    for (auto& [instruction, rate] : result.peak_multiply_adds)
      rate = std::max(rate, probe(instruction));
    set_ceiling();
  }
  result.read_bandwidth_bytes_per_s = bandwidth.measure(pool.as_parallel_for());
  return result;
}

}  // namespace tandem::measure
