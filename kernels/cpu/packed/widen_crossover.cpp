#include "kernels/cpu/packed/widen_crossover.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/measuring.h"

namespace tandem::kernels {

std::optional<std::int64_t> tiles_from(std::vector<CrossoverPoint> points) {
  std::sort(points.begin(), points.end(),
            [](const CrossoverPoint& a, const CrossoverPoint& b) { return a.tokens > b.tokens; });
  std::optional<std::int64_t> from;
  for (const CrossoverPoint& p : points) {
    if (!p.tiles_faster) break;
    from = p.tokens;
  }
  return from;
}

namespace {

// Row blocks per task, as the engine's expert tasks take at most (expert_compute.cpp).
constexpr std::int64_t kTaskBlocks = 8;
// A sample repeats the chain for at least this long, so that a chain of small products is
// not timed within the clock's and the threads' start-up.
constexpr double kMinSampleSeconds = 0.5e-3;

using Kernel = void (*)(const PackedMatrix&, const PackedActivations&, float*, std::int64_t,
                        std::int64_t, std::int64_t);

void amx_kernel(const PackedMatrix& w, const PackedActivations& x, float* y, std::int64_t stride,
                std::int64_t b0, std::int64_t b1) {
  packed_matmul_amx(w, x, y, stride, b0, b1);
}

}  // namespace

std::vector<WidenSample> measure_widening(std::span<const ProductChain> chains,
                                          std::span<const std::int64_t> tokens,
                                          const ParallelFor& parallel, int repeats) {
  if (chains.empty()) throw std::invalid_argument("no products to time widened");
  const ProductChain& first = chains.front();
  for (const ProductChain& chain : chains) {
    if (chain.size() != first.size())
      throw std::invalid_argument("the chains of products to time differ in length");
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const PackedMatrix& w = *chain[i];
      if (w.format != PackedFormat::Int8 && w.format != PackedFormat::Int4)
        throw std::invalid_argument("only INT8 and INT4 products are widened, not " +
                                    std::string(packed_format_name(w.format)));
      if (w.rows != first[i]->rows || w.cols != first[i]->cols || w.format != first[i]->format ||
          w.group != first[i]->group)
        throw std::invalid_argument("the chains of products to time differ in shape or format");
    }
  }
  if (!variant_supported(CpuVariant::Amx, detect_isa().usable))
    throw std::invalid_argument("widened products need AMX, which this CPU lacks");
  std::size_t next_chain = 0;
  std::vector<WidenSample> out;
  for (const std::int64_t n : tokens) {
    const std::size_t links = first.size();
    std::vector<PackedActivations> quantised(links), widened(links);
    std::vector<std::vector<float>> y(links);
    for (std::size_t i = 0; i < links; ++i) {
      const PackedMatrix& w = *first[i];
      const std::vector<float> x = random_values(static_cast<std::size_t>(n * w.cols), i + 1);
      pack_activations_for(w, x.data(), n, quantised[i]);
      pack_widened_activations(w, x.data(), n, widened[i]);
      y[i].resize(static_cast<std::size_t>(n * w.rows));
    }
    const auto run_chain = [&](Kernel kernel, const std::vector<PackedActivations>& x) {
      const ProductChain& chain = chains[next_chain++ % chains.size()];
      for (std::size_t i = 0; i < links; ++i) {
        const PackedMatrix& w = *chain[i];
        const std::int64_t tasks = (w.blocks + kTaskBlocks - 1) / kTaskBlocks;
        parallel(tasks, [&](std::int64_t t0, std::int64_t t1) {
          kernel(w, x[i], y[i].data(), w.rows, t0 * kTaskBlocks,
                 std::min(t1 * kTaskBlocks, w.blocks));
        });
      }
    };
    // One uncounted run of each (the tile state, the widening buffers).
    run_chain(amx_kernel, widened);
    run_chain(packed_matmul_avx512, quantised);
    WidenSample s{n, std::numeric_limits<double>::infinity(),
                  std::numeric_limits<double>::infinity()};
    for (int r = 0; r < std::max(1, repeats); ++r) {
      // Each over chains run one after another (the next each time).
      s.widened_seconds =
          std::min(s.widened_seconds,
                   seconds_per_product([&] { run_chain(amx_kernel, widened); }, kMinSampleSeconds));
      s.quantised_seconds =
          std::min(s.quantised_seconds,
                   seconds_per_product([&] { run_chain(packed_matmul_avx512, quantised); },
                                       kMinSampleSeconds));
    }
    out.push_back(s);
  }
  return out;
}

std::int64_t widen_from(std::span<const WidenSample> samples) {
  std::vector<CrossoverPoint> points;
  for (const WidenSample& s : samples)
    points.push_back({s.tokens, s.widened_seconds <= kWidenWinShare * s.quantised_seconds});
  return tiles_from(std::move(points)).value_or(0);
}

}  // namespace tandem::kernels
