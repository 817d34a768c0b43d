// Where widened products (matmul.h) start to beat the AVX-512 kernel on this machine. How
// many tokens a widened product needs to pay for widening its weights depends on the CPU:
// on the 2-core Xeon VM Tandem is tuned on, the tile unit and the vector units did not
// overlap (a product's widening and its tile work took the sum of their times), so INT8
// needed about 64 tokens; a CPU that runs them side by side needs fewer. The engine measures
// it once per shape at load (engine/forward) and sets amx_widen_tokens from it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {

// Whether the tiles beat the other kernel at `tokens` tokens.
struct CrossoverPoint {
  std::int64_t tokens = 0;
  bool tiles_faster = false;
};
// The fewest tokens from which the tiles win at every point measured from there up: down
// from the most tokens measured while they keep winning; nullopt when they lose at the most.
std::optional<std::int64_t> tiles_from(std::vector<CrossoverPoint> points);

// Token counts the engine measures at: partial tiles (8), one and two whole tiles, and past
// the default crossover.
inline constexpr std::int64_t kWidenTokenCounts[] = {8, 16, 24, 32, 48, 64, 96, 128, 256};

// One token count: the seconds the chain of products took widened (AMX tiles) and with
// quantised activations (AVX-512), each the best of the repetitions.
struct WidenSample {
  std::int64_t tokens = 0;
  double widened_seconds = 0;
  double quantised_seconds = 0;
};

// Times a chain of INT8 or INT4 products (an FFN's gate, up and down, as an expert runs
// them) at each of `tokens`, widened and not, the two interleaved, in tasks of 8 row blocks
// across `parallel` as the engine runs an expert's; each the best of `repeats`. Each run takes
// the next of `chains` (FFNs of the same shapes and formats: a layer's experts), so that its
// weights come from memory, as a prompt's experts' do, rather than from a cache warm from
// the run before. The activations are packed beforehand (as a layer packs them once for all
// its experts). Throws std::invalid_argument when the CPU lacks AMX, a matrix is neither INT8
// nor INT4, or the chains differ in shape or format.
using ProductChain = std::vector<const PackedMatrix*>;
std::vector<WidenSample> measure_widening(std::span<const ProductChain> chains,
                                          std::span<const std::int64_t> tokens,
                                          const ParallelFor& parallel, int repeats = 3);

// A widened product wins where it takes at most this share of the quantised one's time: a
// win past the run-to-run noise between the two kernels timed alternately (a few percent to
// a tenth on the Xeon VM). Near parity the products stay quantised, as on every other
// variant: at 32 tokens the VM's INT4 products measured 0.85-1.04, and a prompt's experts
// were no faster end to end widened from there (docs/benchmarks.md).
inline constexpr double kWidenWinShare = 0.9;

// Where the samples say to widen from (tiles_from, a win being kWidenWinShare), 0 (never)
// where widening did not win at the most tokens measured.
std::int64_t widen_from(std::span<const WidenSample> samples);

}  // namespace tandem::kernels
