#include "engine/forward/amx_widening.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/files/user_cache.h"
#include "engine/log/log.h"
#include "engine/version.h"
#include "kernels/cpu/isa.h"

namespace tandem::forward {

namespace {

// Up to this many FFNs are timed in turn, so that each run reads its weights from memory as a
// layer's experts do (Qwen3-30B-A3B's 128: 600 MB in INT8, past the last-level cache; the
// weights are loaded already, so more of them cost no time).
constexpr std::size_t kTimedChains = 256;

// The packed gate, up and down of the FFNs that widening matters most for: a layer's routed
// experts (their first pool's slices where they are split), else the dense FFNs of the
// layers; none where they are not packed.
std::vector<kernels::ProductChain> widening_chains(const model::ModelWeights& w) {
  std::vector<kernels::ProductChain> chains;
  for (const model::LayerWeights& layer : w.layers) {
    if (!layer.moe || layer.experts.experts.empty()) continue;
    for (const model::FeedForwardWeights& e : layer.experts.experts) {
      if (chains.size() == kTimedChains) break;
      if (!e.slices.empty())
        chains.push_back({e.slices.front().gate, e.slices.front().up, e.slices.front().down});
      else if (e.gate.packed && e.up.packed && e.down.packed)
        chains.push_back({e.gate.packed, e.up.packed, e.down.packed});
      else
        return {};
    }
    return chains;
  }
  for (const model::LayerWeights& layer : w.layers) {
    if (chains.size() == kTimedChains) break;
    if (!layer.moe && !layer.linear && layer.dense.gate.packed && layer.dense.up.packed &&
        layer.dense.down.packed)
      chains.push_back({layer.dense.gate.packed, layer.dense.up.packed, layer.dense.down.packed});
  }
  return chains;
}

// Rotated INT8 is never widened (its prompts take integer tiles): nothing to time for it.
bool widenable(const kernels::PackedMatrix& m) {
  return (m.format == kernels::PackedFormat::Int8 || m.format == kernels::PackedFormat::Int4) &&
         m.rotation == 0;
}

// The cache's key for a measurement: the CPU, the threads, the timed chain's shapes and
// formats, and this build (whose kernels were timed).
std::string cache_key(const kernels::ProductChain& chain, const backend::NumaPools& pools) {
  const kernels::CpuIdentity& cpu = kernels::detect_isa().identity;
  std::string key =
      fmt::format("{} (family {}, model {}, stepping {})|{} threads, {} pools|", cpu.brand,
                  cpu.family, cpu.model, cpu.stepping, pools.threads(), pools.pools());
  for (const kernels::PackedMatrix* m : chain)
    key += fmt::format("{}x{} {}/{} ", m->rows, m->cols, kernels::packed_format_name(m->format),
                       m->group);
  return key + "|" + kTandemBuild;
}

std::vector<kernels::WidenSample> cached_samples(const nlohmann::json& cache,
                                                 const std::string& key) {
  std::vector<kernels::WidenSample> samples;
  if (!cache.contains(key) || !cache[key].is_object()) return samples;
  try {
    for (const auto& s : cache[key].at("samples"))
      samples.push_back({s.at("tokens").get<std::int64_t>(), s.at("widened_seconds").get<double>(),
                         s.at("quantised_seconds").get<double>()});
  } catch (const std::exception&) {
    samples.clear();
  }
  for (const kernels::WidenSample& s : samples)
    if (s.tokens < 1 || !(s.widened_seconds > 0) || !(s.quantised_seconds > 0)) return {};
  return samples;
}

}  // namespace

std::string default_widening_cache() {
  return files::user_cache_file("amx-widening.json");
}

std::optional<WideningChoice> choose_widening(const model::LoadedModel& model,
                                              backend::NumaPools& pools,
                                              std::optional<std::int64_t> given,
                                              const std::string& cache_path) {
  if (model.cpu_variant() != kernels::CpuVariant::Amx) return std::nullopt;
  const std::vector<kernels::ProductChain> chains = widening_chains(model.weights());
  if (chains.empty() || !widenable(*chains.front().front())) return std::nullopt;
  const kernels::ProductChain& chain = chains.front();
  WideningChoice choice;
  choice.format = chain.front()->format;
  if (given) {
    choice.from = *given;
    kernels::set_amx_widen_tokens(kernels::PackedFormat::Int8, *given);
    kernels::set_amx_widen_tokens(kernels::PackedFormat::Int4, *given);
    return choice;
  }
  // An INT8 down beside INT4 gate and up (int4-down8) is timed widened with them, and takes
  // the same count.
  for (const kernels::PackedMatrix* m : chain)
    if (!widenable(*m)) return std::nullopt;
  choice.int8_downs = chain.back()->format != choice.format;
  const std::string key = cache_key(chain, pools);
  const nlohmann::json cache =
      cache_path.empty() ? nlohmann::json::object()
                         : files::read_cache_object(cache_path, "where AMX widening pays");
  choice.samples = cached_samples(cache, key);
  choice.cached = !choice.samples.empty();
  choice.cache_path = cache_path;
  if (!choice.cached) {
    backend::CpuThreads threads(pools);
    choice.samples =
        kernels::measure_widening(chains, kernels::kWidenTokenCounts, threads.kernels_for());
    if (!cache_path.empty()) {
      nlohmann::json kept = cache;
      kept[key] = {{"samples", samples_json(choice.samples)}};
      files::write_cache_object(cache_path, kept, "where AMX widening pays");
    }
  }
  choice.measured = true;
  choice.from = kernels::widen_from(choice.samples);
  for (const kernels::PackedMatrix* m : chain)
    kernels::set_amx_widen_tokens(m->format, choice.from);
  log::info("{}", describe(choice));
  return choice;
}

nlohmann::json samples_json(const std::vector<kernels::WidenSample>& samples) {
  nlohmann::json list = nlohmann::json::array();
  for (const kernels::WidenSample& s : samples)
    list.push_back({{"tokens", s.tokens},
                    {"widened_seconds", s.widened_seconds},
                    {"quantised_seconds", s.quantised_seconds}});
  return list;
}

bool parse_widen_from(const std::string& text, std::optional<std::int64_t>& out) {
  if (text == "auto") {
    out.reset();
    return true;
  }
  if (text == "never") {
    out = 0;
    return true;
  }
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > (1 << 20)) return false;
  out = n;
  return true;
}

namespace {

std::string widened_formats(const WideningChoice& choice) {
  return !choice.measured                               ? "INT8 and INT4"
         : choice.int8_downs                            ? "INT4 (and INT8 down)"
         : choice.format == kernels::PackedFormat::Int4 ? "INT4"
                                                        : "INT8";
}

// "8 tokens 2.04, 16 tokens 1.46, ...": the widened time over the quantised at each count.
std::string ratios(const std::vector<kernels::WidenSample>& samples) {
  std::string out;
  for (const kernels::WidenSample& s : samples) {
    out += fmt::format("{}{} tokens {:.2f}", out.empty() ? "" : ", ", s.tokens,
                       s.quantised_seconds > 0 ? s.widened_seconds / s.quantised_seconds : 0.0);
  }
  return out;
}

}  // namespace

std::string summary(const WideningChoice& choice) {
  const std::string which = widened_formats(choice);
  const char* how = !choice.measured ? "set by --amx-widen-from"
                    : choice.cached  ? "measured on this CPU at an earlier start"
                                     : "measured on this CPU";
  return choice.from > 0
             ? fmt::format("{} products of {} tokens or more widened to BF16 tiles ({})", which,
                           choice.from, how)
             : fmt::format("{} products never widened to BF16 tiles ({})", which, how);
}

std::string figures(const WideningChoice& choice) {
  if (!choice.measured) return {};
  std::string out = "The widened time over the AVX-512 time at " + ratios(choice.samples);
  out += fmt::format(
      " (products are widened from the fewest tokens at which it is at most {:.1f}, there and "
      "at every count above).",
      kernels::kWidenWinShare);
  if (!choice.cache_path.empty())
    out += " Kept in " + choice.cache_path + ", which may be deleted to measure again.";
  return out;
}

std::string describe(const WideningChoice& choice) {
  const std::string which = widened_formats(choice);
  std::string out =
      choice.from > 0
          ? fmt::format("AMX takes {} products widened to BF16 from {} tokens", which, choice.from)
          : fmt::format("AMX never widens {} products to BF16", which);
  if (!choice.measured) return out + " (--amx-widen-from)";
  out += choice.cached
             ? " (measured on this CPU at an earlier start and kept in " + choice.cache_path +
                   ", which may be deleted to measure again; the widened time over the AVX-512 "
                   "time at"
             : " (measured on this CPU, the widened time over the AVX-512 time at";
  return out + " " + ratios(choice.samples) + ")";
}

}  // namespace tandem::forward
