// `tandem bench --kernels`: our packed kernels against oneDNN's matmul on the dense
// matrices of Qwen3-30B-A3B (attention projections, output head) and one of its experts,
// INT8 and BF16, for a few token counts and thread counts. Random weights: speed does not
// depend on the values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/compute_peak.h"
#include "kernels/cpu/measuring.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::measure {

struct KernelShape {
  std::string name;   // "q", "k/v", "o", "head", "expert up", "expert down"
  std::int64_t rows;  // outputs
  std::int64_t cols;  // inputs
};

// Qwen3-30B-A3B: hidden 2048, 32 query heads and 4 key/value heads of 128, experts of
// 768, vocabulary 151936 (`head_rows` may cut the head short to save time and memory).
std::vector<KernelShape> qwen3_30b_a3b_shapes(std::int64_t head_rows = 151936);

// A tile kernel over a block range, as packed_matmul_amx.
using TileKernel =
    std::function<void(const kernels::PackedMatrix&, const kernels::PackedActivations&, float* y,
                       std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end)>;
// On a machine whose kernels are AMX: the AMX kernels taking every product into tiles, from
// one token on (below kernels::kAmxMinTokens too; INT8 and INT4 given widened activations,
// which take tiles at every count). Elsewhere none.
TileKernel amx_from_one_token();

// A weight format as the kernel benchmark packs it: a packed format, INT8 rotated or not
// (kernels::pack_int8_rotated).
struct KernelFormat {
  kernels::PackedFormat format = kernels::PackedFormat::Int8;
  bool rotated = false;
  KernelFormat(kernels::PackedFormat f, bool r = false) : format(f), rotated(r) {}  // NOLINT
  bool operator==(const KernelFormat&) const = default;
  // "int8", "int8-rotated", "int4", ...: as rows and manifests name them.
  std::string name() const;
};

struct KernelBenchOptions {
  std::vector<KernelShape> shapes = qwen3_30b_a3b_shapes();
  std::vector<std::int64_t> tokens = {1, 8, 64, 512};
  std::vector<int> threads = {2, 1};
  // INT4 in groups of kernels::kDefaultInt4Group, as Tandem converts; MXFP4 from random codes
  // and scales, as gpt-oss stores its experts.
  std::vector<KernelFormat> formats = {kernels::PackedFormat::Int8, kernels::PackedFormat::Bf16};
  int repetitions = 5;
  double min_sample_seconds = 0.2;  // each sample repeats the product at least this long
  // Products rotate over copies of the weights totalling at least this many bytes, so that
  // they come from memory as in a model (every layer has its own), not from the L3 cache.
  std::uint64_t working_set_bytes = std::uint64_t{256} << 20;
  std::uint64_t seed = 1;
  // Measured beside the AVX-512 kernels in every row where set (KernelBenchRow::tiles): the
  // crossover from which tiles win, per shape. Tests pass the emulated tile unit.
  TileKernel tile_kernel = amx_from_one_token();
};

struct RateSamples {
  std::vector<double> values;  // one per repetition
  double mean() const;
  double stddev() const;
};

// What one product instruction sustained on a number of threads (kernels/cpu/compute_peak.h):
// the ceiling of the kernels that multiply with it.
struct InstructionPeak {
  std::string instruction;  // "VPDPBUSD zmm"
  int threads = 1;
  double gflops = 0;  // two operations per multiply-add, as the rows count them
};

// The peak of `instruction` on `threads` threads in `peaks`, measured and added when missing.
double instruction_peak_gflops(std::vector<InstructionPeak>& peaks,
                               kernels::ProductInstruction instruction, int threads);

struct KernelPathResult {
  std::string implementation;  // "packed avx512", "oneDNN brg:avx512_core_vnni"
  std::uint64_t weight_bytes = 0;
  RateSamples gflops;
  RateSamples weight_gb_per_s;
};

struct KernelBenchRow {
  KernelShape shape;
  std::string format;  // "int8", "int4", "bf16", "mxfp4"
  int threads = 1;
  std::int64_t tokens = 1;
  KernelPathResult packed;
  std::optional<KernelPathResult> onednn;  // INT8 and BF16 only
  // The peak of the instruction our packed kernel multiplies with (0 where no single one
  // does: the scalar and AMX variants, INT8 on AVX2 without AVX-VNNI).
  std::string packed_instruction;
  double packed_peak_gflops = 0;
  // With a tile kernel (AMX machines): the tile kernel from one token on and the AVX-512
  // kernel on the same copies, both on activations packed beforehand (the kernels alone).
  std::optional<KernelPathResult> tiles;
  std::optional<KernelPathResult> avx512;
  double packed_peak_fraction() const;
  // oneDNN's mean over ours; "onednn" or "packed" when the means differ by more than 5% and
  // by more than both standard deviations together, else "tie". Without oneDNN: 0 and "".
  double speedup() const;
  std::string winner() const;
};

struct KernelBenchReport {
  std::string cpu;      // brand string
  std::string variant;  // the packed kernels' variant
  std::string onednn;   // version and threading runtime
  // Why oneDNN is left out of formats asked for (kernels::onednn_refusal), one sentence each.
  std::vector<std::string> onednn_refusals;
  std::vector<KernelBenchRow> rows;
  std::vector<InstructionPeak> peaks;
};

// Where tiles overtake AVX-512 for one shape, format and thread count: the fewest tokens
// measured from which the tile kernel's mean is higher at that count and every larger one
// measured; none where AVX-512 is as fast at the largest count.
struct TileCrossover {
  std::string shape;
  std::string format;
  int threads = 1;
  std::optional<std::int64_t> tiles_from;
  std::int64_t tokens_measured_max = 0;
};
std::vector<TileCrossover> tile_crossovers(const KernelBenchReport& report);

// What the benchmarks share with the kernels' other measurements (kernels/cpu/measuring.h).
using kernels::random_values;
using kernels::seconds_per_product;

// `progress` gets a line per measured row.
KernelBenchReport run_kernel_benchmark(
    const KernelBenchOptions& options,
    const std::function<void(const std::string&)>& progress = {});

}  // namespace tandem::measure
