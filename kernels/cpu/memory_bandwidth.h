// Measures how fast the CPU reads memory: the bound on decoding, which streams every
// active weight once per token.
#pragma once

#include <cstdint>

#include "kernels/cpu/aligned_bytes.h"
#include "kernels/cpu/dense_matmul.h"

namespace tandem::kernels {

// A buffer far larger than the caches, kept for measuring again and again: beside each run of
// a benchmark, on a machine whose memory speed drifts between runs (a virtual machine's
// neighbours), so that each run is held against the rate of its own moment. Touched once, when
// made.
class ReadBandwidthProbe {
 public:
  explicit ReadBandwidthProbe(std::uint64_t bytes);
  // Reads the buffer `repeats` times across `parallel`'s workers; the best rate in bytes per
  // second.
  double measure(const ParallelFor& parallel, int repeats = 5) const;

 private:
  AlignedBytes buffer_;
  std::uint64_t words_ = 0;
};

}  // namespace tandem::kernels
