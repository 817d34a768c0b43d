#include "app/bench_command.h"

#include <algorithm>
#include <cinttypes>

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/load_progress_printer.h"
#include "engine/hw/topology.h"
#include "engine/measure/attention_benchmark.h"
#include "engine/measure/benchmark.h"
#include "engine/measure/delta_rule_benchmark.h"
#include "engine/measure/gguf_product_benchmark.h"
#include "engine/measure/kernel_benchmark.h"
#include "engine/measure/trace.h"
#include "engine/model/gguf/model.h"
#include "engine/model/loaded_model.h"
#include "engine/model/manifest.h"
#include "engine/model/synthetic_checkpoint.h"
#include "kernels/cpu/compute_peak.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::app {

namespace {

// A benchmark's progress lines, on stderr; none with --json, whose document is the output.
std::function<void(const std::string&)> progress_to_stderr(const BenchCommandOptions& o) {
  return [json = o.json](const std::string& line) {
    if (!json) std::fprintf(stderr, "%s\n", line.c_str());
  };
}

// Runs `run`; false, with its error's sentence on stderr, where it throws.
template <class Run>
bool reported(Run&& run) {
  try {
    run();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return false;
  }
}

nlohmann::json path_json(const measure::KernelPathResult& p) {
  return {{"implementation", p.implementation},
          {"weight_bytes", p.weight_bytes},
          {"gflops_mean", p.gflops.mean()},
          {"gflops_stddev", p.gflops.stddev()},
          {"gflops", p.gflops.values},
          {"weight_gb_per_s_mean", p.weight_gb_per_s.mean()},
          {"weight_gb_per_s_stddev", p.weight_gb_per_s.stddev()}};
}

nlohmann::json peaks_json(const std::vector<measure::InstructionPeak>& peaks) {
  nlohmann::json j = nlohmann::json::array();
  for (const measure::InstructionPeak& p : peaks)
    j.push_back({{"instruction", p.instruction}, {"threads", p.threads}, {"gflops", p.gflops}});
  return j;
}

// "73%", or "-" where no instruction peak applies (nor to one token, which memory bounds).
std::string peak_share(double fraction) {
  return fraction > 0 ? fmt::format("{:.0f}%", 100 * fraction) : std::string("-");
}

// The ceilings the rows' shares are of: independent chains of each instruction (twelve
// registers, or four tiles).
void print_peaks(const std::vector<measure::InstructionPeak>& peaks) {
  if (peaks.empty()) return;
  std::cout << fmt::format(
      "\nInstruction peaks (independent chains on every thread: twelve registers, four tiles; "
      "best of {}):\n",
      kernels::kPeakRepeats);
  for (const measure::InstructionPeak& p : peaks)
    std::cout << fmt::format("  {}, {} thread{}: {:.0f} GFLOP/s\n", p.instruction, p.threads,
                             p.threads == 1 ? "" : "s", p.gflops);
}

nlohmann::json prompt_ceiling_json(const measure::BenchResult& r) {
  if (r.prompt_work.products.empty() && r.prompt_work.uncounted.empty()) return nullptr;
  nlohmann::json products = nlohmann::json::array();
  for (const measure::ProductWork& p : r.prompt_work.products) {
    products.push_back(
        {{"instruction", std::string(kernels::product_instruction_name(p.instruction))},
         {"multiply_adds_per_token", p.multiply_adds},
         {"peak_multiply_adds_per_s", r.peak_of(p.instruction)}});
  }
  return {{"tokens_per_s", r.prompt_ceiling_tokens_per_s},
          {"fraction", r.prompt_ceiling_fraction()},
          {"products", products},
          {"uncounted", r.prompt_work.uncounted}};
}

// Where AMX widens the model's products: null where it does not run on AMX with INT8 or INT4.
nlohmann::json widening_json(const std::optional<forward::WideningChoice>& w) {
  if (!w) return nullptr;
  return {{"format", kernels::packed_format_name(w->format)},
          {"from_tokens", w->from},
          {"measured", w->measured},
          {"cached", w->cached},
          {"samples", forward::samples_json(w->samples)}};
}

// The prompt's compute ceiling beside the decode roofline: each instruction's share of a
// token's multiply-adds and its measured peak.
void print_prompt_ceiling(const measure::BenchResult& r) {
  if (!r.prompt_work.uncounted.empty()) {
    std::cout << fmt::format("prompt ceiling: not given; {}\n", r.prompt_work.uncounted);
    return;
  }
  std::string parts;
  for (const measure::ProductWork& p : r.prompt_work.products) {
    parts +=
        fmt::format("{}{} {:.3f} G multiply-adds a token at {:.0f} GFLOP/s",
                    parts.empty() ? "" : ", ", kernels::product_instruction_name(p.instruction),
                    p.multiply_adds / 1e9, 2 * r.peak_of(p.instruction) / 1e9);
  }
  std::cout << fmt::format(
      "prompt ceiling: {:.1f} tokens/s at the product instructions' peaks ({}); achieved {:.0f}% "
      "of it\n",
      r.prompt_ceiling_tokens_per_s, parts, 100.0 * r.prompt_ceiling_fraction());
}

// The thread counts a kernel-level benchmark measures: -t's, else every core and one.
std::vector<int> measured_thread_counts(const BenchCommandOptions& o) {
  const int cores = std::max(1, hw::probe_topology().physical_cores);
  if (o.threads > 0) return {o.threads};
  return cores > 1 ? std::vector<int>{cores, 1} : std::vector<int>{1};
}

// On AMX machines: the tile kernels from one token beside AVX-512, and where tiles win.
void print_tile_crossovers(const measure::KernelBenchReport& r) {
  const std::vector<measure::TileCrossover> crossovers = measure::tile_crossovers(r);
  if (crossovers.empty()) return;
  std::cout << "\nTiles (from one token on; INT8 and INT4 widened, with BF16 activations) against "
               "AVX-512 (INT8 and INT4 with quantised activations), the kernels alone on "
               "activations packed beforehand, GFLOP/s:\n\n";
  std::cout << fmt::format("| {:<11} | {:<5} | {:>3} | {:>4} | {:>18} | {:>18} | {:>5} |\n",
                           "matrix", "fmt", "thr", "M", "tiles", "AVX-512", "ratio");
  std::cout << fmt::format("| {:-<11} | {:-<5} | {:->3} | {:->4} | {:->18} | {:->18} | {:->5} |\n",
                           "", "", "", "", "", "", "");
  const auto cell = [](const measure::KernelPathResult& p) {
    return fmt::format("{:.1f} ± {:.1f}", p.gflops.mean(), p.gflops.stddev());
  };
  for (const measure::KernelBenchRow& row : r.rows) {
    if (!row.tiles) continue;
    const double avx512 = row.avx512->gflops.mean();
    std::cout << fmt::format("| {:<11} | {:<5} | {:>3} | {:>4} | {:>18} | {:>18} | {:>5.2f} |\n",
                             row.shape.name, row.format, row.threads, row.tokens, cell(*row.tiles),
                             cell(*row.avx512),
                             avx512 > 0 ? row.tiles->gflops.mean() / avx512 : 0.0);
  }
  std::cout << fmt::format(
      "\nWhere tiles win (Tandem takes BF16 into tiles from {} tokens, and INT8 and INT4 widened "
      "from {} and {} unless a model measures its own when it loads: --amx-widen-from):\n",
      kernels::kAmxMinTokens, kernels::kAmxWidenInt8Tokens, kernels::kAmxWidenInt4Tokens);
  for (const measure::TileCrossover& c : crossovers) {
    std::cout << fmt::format(
        "  {} {}, {} threads: {}\n", c.shape, c.format, c.threads,
        c.tiles_from ? fmt::format("from {} tokens on", *c.tiles_from)
                     : fmt::format("AVX-512 as fast or faster at {} tokens, the most measured",
                                   c.tokens_measured_max));
  }
}

int run_kernel_bench(const BenchCommandOptions& o) {
  measure::KernelBenchOptions options;
  options.shapes = measure::qwen3_30b_a3b_shapes(o.head_rows);
  options.tokens = o.kernel_tokens;
  options.min_sample_seconds = o.sample_seconds;
  options.working_set_bytes = o.working_set_mib << 20;
  options.repetitions = std::max(1, o.repetitions);
  options.threads = measured_thread_counts(o);
  options.formats.clear();
  for (const std::string& name : o.kernel_formats) {
    model::Method method;  // the names a converted folder's manifest takes (checked by CLI11)
    if (!model::parse_method(name, method)) continue;
    const measure::KernelFormat f(model::packed_format(method),
                                  model::rotates_int8(model::cpu_format_of(method)));
    if (std::find(options.formats.begin(), options.formats.end(), f) == options.formats.end())
      options.formats.push_back(f);
  }
  measure::KernelBenchReport r;
  if (!reported([&] { r = measure::run_kernel_benchmark(options, progress_to_stderr(o)); }))
    return 1;
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const measure::KernelBenchRow& row : r.rows) {
      rows.push_back({{"matrix", row.shape.name},
                      {"rows", row.shape.rows},
                      {"cols", row.shape.cols},
                      {"format", row.format},
                      {"threads", row.threads},
                      {"tokens", row.tokens},
                      {"packed", path_json(row.packed)},
                      {"packed_instruction", row.packed_instruction},
                      {"packed_peak_fraction", row.packed_peak_fraction()},
                      {"onednn", row.onednn ? path_json(*row.onednn) : nlohmann::json(nullptr)},
                      {"speedup", row.speedup()},
                      {"winner", row.winner()}});
      if (row.tiles) {
        rows.back()["tiles"] = path_json(*row.tiles);
        rows.back()["avx512"] = path_json(*row.avx512);
      }
    }
    nlohmann::json j = {{"cpu", r.cpu},
                        {"cpu_variant", r.variant},
                        {"onednn", r.onednn},
                        {"onednn_refusals", r.onednn_refusals},
                        {"repetitions", options.repetitions},
                        {"rows", rows},
                        {"instruction_peaks", peaks_json(r.peaks)}};
    const std::vector<measure::TileCrossover> crossovers = measure::tile_crossovers(r);
    if (!crossovers.empty()) {
      nlohmann::json list = nlohmann::json::array();
      for (const measure::TileCrossover& c : crossovers) {
        list.push_back({{"matrix", c.shape},
                        {"format", c.format},
                        {"threads", c.threads},
                        {"tiles_from_tokens",
                         c.tiles_from ? nlohmann::json(*c.tiles_from) : nlohmann::json(nullptr)},
                        {"tokens_measured_max", c.tokens_measured_max}});
      }
      j["tile_crossovers"] = list;
      j["amx_min_tokens"] = kernels::kAmxMinTokens;
      j["amx_widen_int8_tokens"] = kernels::kAmxWidenInt8Tokens;
      j["amx_widen_int4_tokens"] = kernels::kAmxWidenInt4Tokens;
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{}; packed kernels: {}; {}\n", r.cpu, r.variant, r.onednn);
  for (const std::string& refusal : r.onednn_refusals)
    std::cout << "oneDNN left out: " << refusal << "\n";
  std::cout << "GFLOP/s (weights GB/s at 1 token), mean ± sd over " << options.repetitions
            << " repetitions; INT8 activations: packed with a scale per "
            << kernels::kInt8ActivationGroup
            << " columns (what Tandem runs), oneDNN with one per token (--dense onednn); INT4 "
               "and MXFP4 activations with a scale per weight group, no oneDNN product; peak: "
               "packed's share of its product instruction's peak\n\n";
  std::cout << fmt::format(
      "| {:<11} | {:>13} | {:<5} | {:>3} | {:>4} | {:>24} | {:>4} | {:>24} | {:>5} | {:<6} |\n",
      "matrix", "out x in", "fmt", "thr", "M", "packed", "peak", "oneDNN", "ratio", "winner");
  std::cout << fmt::format(
      "| {:-<11} | {:->13} | {:-<5} | {:->3} | {:->4} | {:->24} | {:->4} | {:->24} | {:->5} | "
      "{:-<6} |\n",
      "", "", "", "", "", "", "", "", "", "");
  const auto cell = [](const measure::KernelBenchRow& row, const measure::KernelPathResult& p) {
    std::string s = fmt::format("{:.1f} ± {:.1f}", p.gflops.mean(), p.gflops.stddev());
    if (row.tokens == 1) s += fmt::format(" ({:.1f} GB/s)", p.weight_gb_per_s.mean());
    return s;
  };
  for (const measure::KernelBenchRow& row : r.rows) {
    std::cout << fmt::format(
        "| {:<11} | {:>13} | {:<5} | {:>3} | {:>4} | {:>24} | {:>4} | {:>24} | {:>5} | {:<6} |\n",
        row.shape.name, fmt::format("{}x{}", row.shape.rows, row.shape.cols), row.format,
        row.threads, row.tokens, cell(row, row.packed),
        peak_share(row.tokens > 1 ? row.packed_peak_fraction() : 0),
        row.onednn ? cell(row, *row.onednn) : "none",
        row.onednn ? fmt::format("{:.2f}", row.speedup()) : "", row.winner());
  }
  print_peaks(r.peaks);
  // Which oneDNN code ran where: it switches kernels with the token count (to AMX from 16
  // tokens on AMX machines), so each is named with the rows it served.
  std::vector<std::pair<std::string, std::string>> used;  // implementation, where
  for (const measure::KernelBenchRow& row : r.rows) {
    if (!row.onednn) continue;
    const std::string where = fmt::format("{} {} tokens", row.format, row.tokens);
    auto it = std::find_if(used.begin(), used.end(),
                           [&](const auto& u) { return u.first == row.onednn->implementation; });
    if (it == used.end())
      used.emplace_back(row.onednn->implementation, where);
    else if (it->second.find(where) == std::string::npos)
      it->second += ", " + where;
  }
  if (!used.empty()) {
    std::cout << "\noneDNN implementations:\n";
    for (const auto& [impl, where] : used) std::cout << fmt::format("  {}: {}\n", impl, where);
  }
  print_tile_crossovers(r);
  return 0;
}

int run_delta_rule_bench(const BenchCommandOptions& o) {
  measure::DeltaRuleBenchOptions options;
  if (o.tokens_given) options.tokens = o.kernel_tokens;
  options.min_sample_seconds = o.sample_seconds;
  options.repetitions = std::max(1, o.repetitions);
  options.threads = measured_thread_counts(o);
  measure::DeltaRuleBenchReport r;
  if (!reported([&] { r = measure::run_delta_rule_benchmark(options, progress_to_stderr(o)); }))
    return 1;
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const measure::DeltaRuleBenchRow& row : r.rows) {
      rows.push_back({{"form", row.form},
                      {"threads", row.threads},
                      {"tokens", row.tokens},
                      {"us_per_token_mean", row.microseconds_per_token.mean()},
                      {"us_per_token_stddev", row.microseconds_per_token.stddev()},
                      {"us_per_token", row.microseconds_per_token.values}});
    }
    std::cout << nlohmann::json{{"cpu", r.cpu},
                                {"shape", r.shape},
                                {"repetitions", options.repetitions},
                                {"rows", rows}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("{}; {}\n", r.cpu, r.shape);
  std::cout << "µs per token (one token: a decode step), mean ± sd over " << options.repetitions
            << " repetitions\n\n";
  std::cout << fmt::format("| {:<15} | {:>3} | {:>6} | {:>16} |\n", "form", "thr", "tokens",
                           "µs per token");
  std::cout << fmt::format("| {:-<15} | {:->3} | {:->6} | {:->16} |\n", "", "", "", "");
  for (const measure::DeltaRuleBenchRow& row : r.rows) {
    std::cout << fmt::format("| {:<15} | {:>3} | {:>6} | {:>16} |\n", row.form, row.threads,
                             row.tokens,
                             fmt::format("{:.1f} ± {:.1f}", row.microseconds_per_token.mean(),
                                         row.microseconds_per_token.stddev()));
  }
  return 0;
}

int run_attention_bench(const BenchCommandOptions& o) {
  measure::AttentionBenchOptions options;
  if (o.tokens_given) options.tokens = o.kernel_tokens;
  if (o.depth_given) options.depths = o.depth_tokens;
  options.min_sample_seconds = o.sample_seconds;
  options.repetitions = std::max(1, o.repetitions);
  options.threads = measured_thread_counts(o);
  int used = 0;
  if (std::sscanf(o.attention_shape.c_str(), "%" SCNd64 "/%" SCNd64 "/%" SCNd64 "%n",
                  &options.heads, &options.kv_heads, &options.head_dim, &used) != 3 ||
      static_cast<std::size_t>(used) != o.attention_shape.size() || options.heads < 1 ||
      options.kv_heads < 1 || options.head_dim < 1 || options.heads % options.kv_heads != 0) {
    std::fprintf(stderr,
                 "tandem: --shape takes query heads, KV heads and head width as Q/KV/D, the "
                 "query heads a multiple of the KV heads (such as 32/4/128 or 9/3/64), not "
                 "\"%s\".\n",
                 o.attention_shape.c_str());
    return 2;
  }
  if (!backend::parse_kv_cache_format(o.engine.kv_cache, options.cache) ||
      options.cache == backend::KvCacheFormat::F32) {
    std::fprintf(stderr, "tandem: bench --attention measures --kv-cache bf16 or int8.\n");
    return 2;
  }
  // Heads the cache cannot keep: said as bench takes them (there is no f32 here).
  if ((options.cache == backend::KvCacheFormat::Bf16 && options.head_dim % 2 != 0) ||
      (options.cache == backend::KvCacheFormat::Int8 &&
       !kernels::int8_cache_takes(options.head_dim))) {
    std::fprintf(
        stderr, "tandem: heads %lld wide do not fit the %s cache: it takes %s (--shape Q/KV/D).\n",
        static_cast<long long>(options.head_dim),
        std::string(backend::kv_cache_format_name(options.cache)).c_str(),
        options.cache == backend::KvCacheFormat::Bf16
            ? "an even width"
            : fmt::format("whole {}s, at most {} wide", kernels::kInt8Group, kernels::kInt8MaxDim)
                  .c_str());
    return 2;
  }
  measure::AttentionBenchReport r;
  if (!reported([&] { r = measure::run_attention_benchmark(options, progress_to_stderr(o)); }))
    return 1;
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const measure::AttentionBenchRow& row : r.rows) {
      rows.push_back({{"form", row.form},
                      {"threads", row.threads},
                      {"tokens", row.tokens},
                      {"depth", row.depth},
                      {"peak_fraction", row.peak_fraction()},
                      {"gflops_mean", row.gflops.mean()},
                      {"gflops_stddev", row.gflops.stddev()},
                      {"gflops", row.gflops.values}});
    }
    std::cout << nlohmann::json{{"cpu", r.cpu},       {"shape", r.shape},
                                {"kernel", r.kernel}, {"repetitions", options.repetitions},
                                {"rows", rows},       {"instruction_peaks", peaks_json(r.peaks)}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::cout << fmt::format("{}; {}; {} kernels\n", r.cpu, r.shape, r.kernel);
  std::cout << "GFLOP/s (4 x 32 heads x 128 per token and position it sees), mean ± sd over "
            << options.repetitions
            << " repetitions; peak: the share of the kernel's product instruction's peak\n\n";
  std::cout << fmt::format("| {:<11} | {:>3} | {:>6} | {:>6} | {:>12} | {:>4} |\n", "form", "thr",
                           "tokens", "depth", "GFLOP/s", "peak");
  std::cout << fmt::format("| {:-<11} | {:->3} | {:->6} | {:->6} | {:->12} | {:->4} |\n", "", "",
                           "", "", "", "");
  for (const measure::AttentionBenchRow& row : r.rows) {
    std::cout << fmt::format("| {:<11} | {:>3} | {:>6} | {:>6} | {:>12} | {:>4} |\n", row.form,
                             row.threads, row.tokens, row.depth,
                             fmt::format("{:.0f} ± {:.0f}", row.gflops.mean(), row.gflops.stddev()),
                             peak_share(row.peak_fraction()));
  }
  print_peaks(r.peaks);
  return 0;
}

int run_gguf_product_bench(const BenchCommandOptions& o) {
  if (!model::is_gguf_path(o.model)) {
    std::fprintf(stderr,
                 "tandem: --gguf-products times the matrices of a .gguf file, and %s is not "
                 "one. Give the model's .gguf file with -m.\n",
                 o.model.c_str());
    return 2;
  }
  measure::GgufProductBenchOptions options;
  options.path = o.model;
  options.tokens = o.tokens_given ? o.kernel_tokens : std::vector<std::int64_t>{1};
  options.threads = o.threads > 0 ? o.threads : std::max(1, hw::probe_topology().physical_cores);
  options.repetitions = std::max(1, o.repetitions);
  options.min_sample_seconds = o.sample_seconds;
  options.working_set_bytes = o.working_set_mib << 20;
  measure::GgufProductReport r;
  if (!reported([&] { r = measure::run_gguf_product_benchmark(options, progress_to_stderr(o)); }))
    return 1;
  if (o.json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const measure::GgufProductRow& row : r.rows) {
      rows.push_back({{"format", row.format},
                      {"first_matrix", row.first},
                      {"matrices", row.matrices},
                      {"matrices_in_file", row.matrices_in_file},
                      {"pass_bytes", row.pass_bytes},
                      {"tokens", row.tokens},
                      {"variant", row.variant},
                      {"weight_gb_per_s_mean", row.weight_gb_per_s.mean()},
                      {"weight_gb_per_s_stddev", row.weight_gb_per_s.stddev()},
                      {"weight_gb_per_s", row.weight_gb_per_s.values},
                      {"gflops_mean", row.gflops.mean()},
                      {"gflops_stddev", row.gflops.stddev()},
                      {"gflops", row.gflops.values}});
    }
    const nlohmann::json j = {{"cpu", r.cpu},         {"file", r.file},
                              {"threads", r.threads}, {"repetitions", options.repetitions},
                              {"rows", rows},         {"other_formats", r.other_formats}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("{}; {} threads; {}\n", r.cpu, r.threads, r.file);
  std::cout << "GB/s of weights and GFLOP/s, mean ± sd over " << options.repetitions
            << " repetitions; a pass multiplies by the format's matrices in file order, up to "
            << o.working_set_mib << " MiB\n\n";
  std::cout << fmt::format("| {:<8} | {:>8} | {:>9} | {:>6} | {:<7} | {:>14} | {:>16} | {} |\n",
                           "format", "matrices", "MiB/pass", "tokens", "variant", "GB/s", "GFLOP/s",
                           "first matrix");
  std::cout << fmt::format(
      "| {:-<8} | {:->8} | {:->9} | {:->6} | {:-<7} | {:->14} | {:->16} | {:-<12} |\n", "", "", "",
      "", "", "", "", "");
  for (const measure::GgufProductRow& row : r.rows) {
    std::cout << fmt::format(
        "| {:<8} | {:>8} | {:>9.2f} | {:>6} | {:<7} | {:>14} | {:>16} | {} |\n", row.format,
        fmt::format("{}/{}", row.matrices, row.matrices_in_file),
        static_cast<double>(row.pass_bytes) / (1 << 20), row.tokens, row.variant,
        fmt::format("{:.2f} ± {:.2f}", row.weight_gb_per_s.mean(), row.weight_gb_per_s.stddev()),
        fmt::format("{:.1f} ± {:.1f}", row.gflops.mean(), row.gflops.stddev()), row.first);
  }
  if (!r.other_formats.empty()) {
    std::string others;
    for (const std::string& name : r.other_formats) others += (others.empty() ? "" : ", ") + name;
    std::cout << "\nNot block formats, so not timed here: " << others << "\n";
  }
  return 0;
}

// A model benchmark's tests. With one value each of -p, -n and -d: one run of the prompt, then
// one of the decode. With lists, as llama-bench: each prompt length and each decode length a
// test of its own, at each depth in turn.
struct BenchTest {
  std::int64_t prompt = 0, decode = 0, depth = 0;
};
std::vector<BenchTest> bench_tests(const BenchCommandOptions& o) {
  if (o.prompt_tokens.size() == 1 && o.decode_tokens.size() == 1 && o.depth_tokens.size() == 1)
    return {{o.prompt_tokens[0], o.decode_tokens[0], o.depth_tokens[0]}};
  std::vector<BenchTest> tests;
  for (const std::int64_t depth : o.depth_tokens) {
    for (const std::int64_t p : o.prompt_tokens)
      if (p > 0) tests.push_back({p, 0, depth});
    for (const std::int64_t n : o.decode_tokens)
      if (n > 0) tests.push_back({0, n, depth});
  }
  return tests;
}

}  // namespace

int run_bench(const BenchCommandOptions& o) {
  if (o.kernels) return run_kernel_bench(o);
  if (o.gguf_products) return run_gguf_product_bench(o);
  if (o.delta_rule) return run_delta_rule_bench(o);
  if (o.attention) return run_attention_bench(o);
  if (o.model.empty()) {
    std::fprintf(stderr,
                 "tandem: bench needs a model folder or .gguf file (-m), --kernels, "
                 "--delta-rule or --attention.\n");
    return 2;
  }
  forward::RunSettings settings;
  const std::string asked = !o.cpu_format.empty()          ? o.cpu_format
                            : model::is_gguf_path(o.model) ? "native"
                                                           : "int8";
  if (!model::parse_cpu_format(asked, settings.load.cpu_format)) {
    std::fprintf(stderr, "tandem: --cpu-format must be %s.\n",
                 model::cpu_format_names_in_words().c_str());
    return 2;
  }
  settings.load.cpu_format_asked = !o.cpu_format.empty();
  settings.threads = o.threads;
  settings.load.pools = o.pools;
  settings.load.dense_bf16 = o.dense_bf16;
  settings.load.dense = o.dense == "packed"   ? model::DenseBackend::Packed
                        : o.dense == "onednn" ? model::DenseBackend::Onednn
                                              : model::DenseBackend::Auto;
  std::string error;
  if (!resolve_engine_flags(o.engine, o.threads > 0, o.pools > 0, settings, error) ||
      !apply_int4_group(o.int4_group, settings.load, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  settings.hybrid.overlap = !o.serial;
  const int threads = command_threads(settings.threads);
  settings.load.threads = threads;
  const std::vector<BenchTest> tests = bench_tests(o);
  if (tests.empty()) {
    std::fprintf(stderr,
                 "tandem: nothing to measure: every -p and -n is 0; give a prompt or a decode "
                 "length above 0.\n");
    return 2;
  }
  if (tests.size() > 1 && !o.trace_path.empty()) {
    std::fprintf(stderr,
                 "tandem: --trace records one test; give -p, -n and -d one value each with it.\n");
    return 2;
  }
  if (!o.trace_path.empty()) {
    // Found out now, not after the whole benchmark has run.
    const std::string probe = o.trace_path + ".tmp";
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    if (f == nullptr) {
      std::fprintf(stderr,
                   "tandem: --trace %s cannot be written; check the folder exists and is "
                   "writable.\n",
                   o.trace_path.c_str());
      return 2;
    }
    std::fclose(f);
    std::remove(probe.c_str());
  }
  std::unique_ptr<model::LoadedModel> model;
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.json) settings.load.on_progress = stderr_load_progress().callback();
  try {
    model = model::LoadedModel::load(o.model, settings.load);
  } catch (const std::exception& e) {
    stderr_load_progress().finish();
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
  if (!check_expert_stats_target(o.engine, model->spec(), error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  // oneDNN takes dense INT8 matrices only: a model with none in its CPU format would measure
  // our kernels under --dense onednn's name.
  if (o.dense == "onednn" && model->onednn_matrices() == 0) {
    if (o.dense_bf16) {
      std::fprintf(stderr,
                   "tandem: --dense onednn multiplies dense INT8 matrices, and --dense-bf16 keeps "
                   "them in BF16; give one of the two.\n");
      return 2;
    }
    std::fprintf(stderr,
                 "tandem: --dense onednn multiplies dense INT8 matrices, and this model has none "
                 "in the %s format; give --cpu-format int8 or int4 with it.\n",
                 std::string(model::cpu_format_name(model->cpu_format())).c_str());
    return 2;
  }
  backend::NumaPools pool(threads, model->pools());
  std::int64_t context = 1;
  for (const BenchTest& t : tests) context = std::max(context, t.depth + t.prompt + t.decode + 1);
  // Speed past the positions the model takes can still be measured (random tokens, no
  // answers), as llama-bench does; it is said, not refused.
  settings.past_position_limit = true;
  settings.context_set_by = "the longest test's -d, -p and -n add up to the context";
  const std::string past_limit =
      forward::context_error(model->spec(), context, settings.context_set_by);
  if (!past_limit.empty() && !o.json)
    std::fprintf(stderr, "tandem: measured all the same (speed only): %s\n", past_limit.c_str());
  int status = 0;
  std::optional<forward::BuiltRunner> made = build_runner(*model, pool, settings, context, status);
  if (!made) return status;
  forward::BuiltRunner& built = *made;
  forward::ModelRunner& runner = *built.runner;
  if (!o.json) std::fprintf(stderr, "tandem: %s\n", built.note.c_str());
  const std::string widening = built.widening ? forward::describe(*built.widening) : "";
  if (!o.json && !widening.empty()) std::fprintf(stderr, "tandem: %s\n", widening.c_str());
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  measure::BenchOptions options;
  options.trace = !o.trace_path.empty();
  options.repetitions = std::max(1, o.repetitions);
  options.warmup = !o.no_warmup;
  // The CPU's own prompt ceiling, attention counted as the kernels in use multiply.
  options.prompt_ceiling = !runner.has_accelerator();
  // Attention, and so the cache it reads, on the CPU alone.
  if (!runner.has_accelerator()) options.cpu_cache_format = settings.kv_cache;
  options.attention_instruction = kernels::attention_product_instruction(
      kernels::active_attention_variant(), backend::cache_elements(settings.kv_cache),
      kernels::detect_isa().usable);
  std::vector<measure::BenchResult> results;
  for (const BenchTest& t : tests) {
    options.prompt_tokens = t.prompt;
    options.decode_tokens = t.decode;
    options.depth_tokens = t.depth;
    results.push_back(measure::run_benchmark(runner, pool, options, progress_to_stderr(o)));
  }
  // With --trace: the file, each worker's busy share of the counted runs, and where the idle
  // time lies (the workers' busy share inside each operation), in text or in the JSON.
  nlohmann::json trace_json = nullptr;
  if (options.trace) {
    if (!trace::write_chrome_json(o.trace_path, &error)) {
      std::fprintf(stderr, "tandem: %s\n", error.c_str());
      return 1;
    }
    trace_json = {{"path", o.trace_path},
                  {"spans", trace::event_count()},
                  {"workers_busy", nlohmann::json::array()},
                  {"operations", nlohmann::json::array()}};
    std::string workers;
    for (const trace::ThreadShare& t : trace::busy_shares()) {
      if (!t.worker) continue;
      workers += fmt::format("{}{} {:.1f}%", workers.empty() ? "" : ", ", t.name, 100 * t.busy);
      trace_json["workers_busy"].push_back({{"thread", t.name}, {"busy", t.busy}});
    }
    std::string operations;
    int small = 0;
    for (const trace::OperationShare& op : trace::operation_shares()) {
      trace_json["operations"].push_back({{"name", op.name},
                                          {"seconds", op.seconds},
                                          {"share", op.share},
                                          {"workers_busy", op.workers_busy}});
      if (op.share < 0.01) {
        ++small;
        continue;
      }
      operations += fmt::format("{}{} {:.1f}% ({:.1f}%)", operations.empty() ? "" : ", ", op.name,
                                100 * op.share, 100 * op.workers_busy);
    }
    if (small > 0) operations += fmt::format(", and {} under 1% each", small);
    if (!o.json) {
      std::fprintf(stderr,
                   "trace: %zu spans of the counted runs written to %s (open it in "
                   "ui.perfetto.dev or chrome://tracing)\n",
                   trace::event_count(), o.trace_path.c_str());
      if (!workers.empty())
        std::fprintf(stderr, "trace: busy over the counted runs: %s\n", workers.c_str());
      if (!operations.empty()) {
        std::fprintf(stderr,
                     "trace: each operation's share of the counted runs (the workers' busy "
                     "share inside it): %s\n",
                     operations.c_str());
      }
    }
  }
  if (!record_expert_stats(o.engine, runner, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 1;
  }
  const bool hybrid = runner.has_accelerator();
  const auto split_json = [&](const measure::TimeSplit& s) {
    nlohmann::json j = {{"attention_ms", s.attention_ms},
                        {"cpu_experts_ms", s.cpu_experts_ms},
                        {"dense_ms", s.dense_ms},
                        {"other_ms", s.other_ms}};
    if (hybrid) {
      j["accelerator_experts_ms"] = s.gpu_experts_ms;
      j["bus_ms"] = s.bus_ms;
      j["waiting_ms"] = s.waiting_ms;
      j["accelerator_idle_ms"] = s.device_idle_ms;
      j["copy_queue_ms"] = s.copy_ms;
      j["bus_bytes"] = s.bus_bytes;
      j["moves"] = s.moves;
    }
    return j;
  };
  nlohmann::json accelerator = nullptr;
  if (hybrid) {
    const schedule::HybridOptions& h = runner.hybrid();
    accelerator = {
        {"device", runner.device().description()},
        {"memory_used_bytes", runner.device().memory_used()},
        {"gpu_experts_per_layer", runner.gpu_experts_per_layer()},
        {"placement", std::string(schedule::strategy_name(h.strategy))},
        {"max_deferred_experts_per_token", h.max_deferred_per_token},
        {"gpu_prefill_token_threshold", runner.layerwise_prefill() ? h.prefill_token_threshold : 0},
        {"dynamic_update", h.dynamic_update},
        {"overlap", h.overlap}};
  }
  const std::string used_format(model::cpu_format_name(model->cpu_format()));
  const std::string variant(kernels::variant_name(model->cpu_variant()));
  // The memory's read rate and the weights read per token, from the last test.
  const measure::BenchResult& last = results.back();
  // One test's figures: its prompt and decode, their split and what bounds them.
  const auto test_json = [&](const BenchTest& t, const measure::BenchResult& r) {
    return nlohmann::json{
        {"depth", t.depth},
        {"prompt_time_per_token", split_json(r.prompt_split)},
        {"decode_time_per_token", split_json(r.decode_split)},
        {"prompt",
         {{"tokens", t.prompt},
          {"tokens_per_s", r.prompt.tokens_per_s},
          {"mean", r.prompt.mean()},
          {"stddev", r.prompt.stddev()}}},
        {"decode",
         {{"tokens", t.decode},
          {"tokens_per_s", r.decode.tokens_per_s},
          {"mean", r.decode.mean()},
          {"stddev", r.decode.stddev()}}},
        {"cache_bytes_per_token", r.cache_bytes_per_token},
        {"decode_read_bandwidth_bytes_per_s", r.decode_bandwidth_bytes_per_s},
        {"decode_roofline_tokens_per_s", r.roofline_tokens_per_s()},
        {"decode_roofline_fraction", r.roofline_fraction()},
        {"prompt_ceiling", prompt_ceiling_json(r)},
    };
  };
  if (o.json) {
    nlohmann::json j = {
        {"model", o.model},
        {"architecture", model->spec().architecture},
        {"layers", model->spec().num_layers},
        {"cpu_format", used_format},
        {"cpu_variant", variant},
        {"dense", o.dense},
        {"onednn_matrices", model->onednn_matrices()},
        {"threads", threads},
        {"pools", model->pools()},
        {"load_seconds", load_s},
        {"accelerator", accelerator},
        // The CPU's KV cache; with an accelerator, attention and its cache are the GPU's.
        {"kv_cache",
         runner.has_accelerator()
             ? nlohmann::json()
             : nlohmann::json(std::string(backend::kv_cache_format_name(settings.kv_cache)))},
        {"prefill_chunk", runner.prefill_chunk_tokens()},
        {"amx_widening", widening_json(built.widening)},
        {"read_bandwidth_bytes_per_s", last.read_bandwidth_bytes_per_s},
        {"active_bytes_per_token", last.active_bytes_per_token},
    };
    if (tests.size() == 1) {
      j.update(test_json(tests[0], results[0]));  // one test: its figures at the top level
    } else {
      j["tests"] = nlohmann::json::array();
      for (std::size_t i = 0; i < tests.size(); ++i)
        j["tests"].push_back(test_json(tests[i], results[i]));
    }
    if (!trace_json.is_null()) j["trace"] = trace_json;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  // The format column takes "int4-down8".
  std::cout << fmt::format(
      "| {:<24} | {:>10} | {:>7} | {:>7} | {:>5} | {:>8} | {:>16} | {:>18} |\n", "model", "format",
      "variant", "threads", "pools", "kv cache", "test", "tokens/s");
  std::cout << fmt::format(
      "| {:-<24} | {:->10} | {:->7} | {:->7} | {:->5} | {:->8} | {:->16} | {:->18} |\n", "", "", "",
      "", "", "", "", "");
  const std::string name = model->spec().architecture.substr(0, 24);
  // As in --json: the CPU's cache, or the GPU's own where it runs attention.
  const std::string kv_cache = runner.has_accelerator()
                                   ? std::string("gpu")
                                   : std::string(backend::kv_cache_format_name(settings.kv_cache));
  const auto row = [&](const std::string& test, const measure::Measurement& m) {
    std::cout << fmt::format(
        "| {:<24} | {:>10} | {:>7} | {:>7} | {:>5} | {:>8} | {:>16} | {:>9.2f} ± {:<6.2f} |\n",
        name, used_format, variant, threads, model->pools(), kv_cache, test, m.mean(), m.stddev());
  };
  // As llama-bench names the tests: "pp512", or "pp512 @ d8192" at a depth.
  const auto test_name = [&](const char* kind, std::int64_t tokens, std::int64_t depth) {
    return depth > 0 ? fmt::format("{}{} @ d{}", kind, tokens, depth)
                     : fmt::format("{}{}", kind, tokens);
  };
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const BenchTest& t = tests[i];
    if (t.prompt > 0) row(test_name("pp", t.prompt, t.depth), results[i].prompt);
    if (t.decode > 0) row(test_name("tg", t.decode, t.depth), results[i].decode);
  }
  bool prompted = false;
  for (const BenchTest& t : tests) prompted = prompted || t.prompt > 0;
  if (prompted)
    std::cout << fmt::format("\nprompts in passes of at most {} tokens (--prefill-chunk)",
                             runner.prefill_chunk_tokens());
  std::cout << fmt::format(
      "\nmemory read bandwidth: {:.1f} GB/s; active weights per token: {:.1f} MB{}\n",
      last.read_bandwidth_bytes_per_s / 1e9, static_cast<double>(last.active_bytes_per_token) / 1e6,
      tests.size() == 1 && last.cache_bytes_per_token > 0
          ? fmt::format("; KV cache read per token: {:.1f} MB",
                        static_cast<double>(last.cache_bytes_per_token) / 1e6)
          : std::string());
  // The read rates the decode runs were held against, one measured after each.
  const auto rates_beside = [](const measure::BenchResult& r) {
    const std::vector<double>& rates = r.decode_bandwidth_bytes_per_s;
    if (rates.empty()) return std::string();
    const auto [low, high] = std::minmax_element(rates.begin(), rates.end());
    return *low == *high ? fmt::format("the memory read {:.1f} GB/s after its run", *low / 1e9)
                         : fmt::format("the memory read {:.1f}-{:.1f} GB/s after its runs",
                                       *low / 1e9, *high / 1e9);
  };
  // Each decode test held against the roofline (with several tests, named, and the cache its
  // depth reads); without a decode test there is nothing to hold against it.
  bool decoded = false;
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const BenchTest& t = tests[i];
    const measure::BenchResult& r = results[i];
    if (t.decode == 0) continue;
    decoded = true;
    std::string notes;
    if (tests.size() > 1 && r.cache_bytes_per_token > 0)
      notes = fmt::format("KV cache read per token: {:.1f} MB",
                          static_cast<double>(r.cache_bytes_per_token) / 1e6);
    if (const std::string rates = rates_beside(r); !rates.empty())
      notes += (notes.empty() ? "" : "; ") + rates;
    std::cout << fmt::format(
        "decode roofline{}: {:.1f} tokens/s{}; achieved {:.0f}% of it\n",
        tests.size() == 1 ? std::string() : ", " + test_name("tg", t.decode, t.depth),
        r.roofline_tokens_per_s(), notes.empty() ? std::string() : " (" + notes + ")",
        100.0 * r.roofline_fraction());
  }
  if (!decoded) {
    std::cout << fmt::format("decode roofline: {:.1f} tokens/s (no decode measured)\n",
                             last.roofline_tokens_per_s());
  }
  // Each prompt test's ceiling; where none is given (the same reason for every test), once.
  bool ceiling_refused = false;
  for (std::size_t i = 0; i < tests.size(); ++i) {
    if (tests[i].prompt == 0 || !options.prompt_ceiling) continue;
    if (!results[i].prompt_work.uncounted.empty()) {
      if (!ceiling_refused) print_prompt_ceiling(results[i]);
      ceiling_refused = true;
      continue;
    }
    if (tests.size() > 1) std::cout << test_name("pp", tests[i].prompt, tests[i].depth) << ": ";
    print_prompt_ceiling(results[i]);
  }
  // Packing happens at load only for a model that is not converted (or GGUF as stored).
  const bool packed_at_load = !model->converted() && used_format != "native";
  std::cout << fmt::format("{}: {:.1f} s\n", packed_at_load ? "load and pack" : "load", load_s);
  std::cout << "\n" << built.note << "\n";
  if (!widening.empty()) std::cout << widening << "\n";
  if (hybrid) {
    const schedule::HybridOptions& h = runner.hybrid();
    std::cout << fmt::format(
        "{} experts per MoE layer on it ({} placement), {} deferred per token, layerwise "
        "prefill {}, dynamic update {}, {} order\n",
        runner.gpu_experts_per_layer(), schedule::strategy_name(h.strategy),
        h.max_deferred_per_token,
        runner.layerwise_prefill() ? fmt::format("from {} tokens", h.prefill_token_threshold)
                                   : std::string("off"),
        h.dynamic_update ? "on" : "off", h.overlap ? "overlapped" : "serial");
  }
  // The tests' names right-aligned in one column.
  std::size_t width = 6;
  for (const BenchTest& t : tests) {
    width = std::max({width, test_name("pp", t.prompt, t.depth).size(),
                      test_name("tg", t.decode, t.depth).size()});
  }
  const auto split_line = [&](const std::string& test, const measure::TimeSplit& s) {
    if (!hybrid) {
      std::cout << fmt::format(
          "{:>{}} ms per token: attention {:.3f}, CPU experts {:.3f}, dense {:.3f}, other "
          "{:.3f}\n",
          test, width, s.attention_ms, s.cpu_experts_ms, s.dense_ms, s.other_ms);
      return;
    }
    std::cout << fmt::format(
        "{:>{}} ms per token: host: CPU experts {:.3f}, waiting {:.3f}, other {:.3f}; "
        "accelerator: attention {:.3f}, experts {:.3f}, dense {:.3f}, bus {:.3f}, idle {:.3f}; "
        "copy queue {:.3f}; {:.0f} bus bytes per token{}\n",
        test, width, s.cpu_experts_ms, s.waiting_ms, s.other_ms, s.attention_ms, s.gpu_experts_ms,
        s.dense_ms, s.bus_ms, s.device_idle_ms, s.copy_ms, s.bus_bytes,
        s.moves > 0 ? fmt::format("; {} moves", s.moves) : std::string());
  };
  for (std::size_t i = 0; i < tests.size(); ++i) {
    const BenchTest& t = tests[i];
    if (t.prompt > 0) split_line(test_name("pp", t.prompt, t.depth), results[i].prompt_split);
    if (t.decode > 0) split_line(test_name("tg", t.decode, t.depth), results[i].decode_split);
  }
  return 0;
}

int run_synth(const SynthCommandOptions& o) {
  model::SynthOptions options{o.like, o.layers, o.experts, o.out, o.seed, {}};
  const bool tty = isatty(STDERR_FILENO);
  auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  try {
    model::write_synthetic_checkpoint(options, [&](std::uint64_t done, std::uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(250) && done < total) return;
      last = now;
      const double s = std::chrono::duration<double>(now - start).count();
      std::fprintf(stderr, "%swriting %s: %.1f of %.1f GB (%.0f MB/s)%s", tty ? "\r" : "",
                   o.out.c_str(), done / 1e9, total / 1e9, done / 1e6 / std::max(s, 1e-3),
                   tty ? "   " : "\n");
    });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ntandem: %s\n", e.what());
    return 1;
  }
  std::fprintf(
      stderr, "\nwrote a random-weight %s checkpoint to %s (for benchmarks: it has no tokenizer)\n",
      o.like.c_str(), o.out.c_str());
  return 0;
}

}  // namespace tandem::app
