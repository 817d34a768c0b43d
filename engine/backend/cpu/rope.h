// Rotary position embedding with the scalings real checkpoints use (linear, YaRN, Llama 3).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"

namespace tandem::backend {

class RotaryEmbedding {
 public:
  RotaryEmbedding(const model::RopeSpec& spec, std::int64_t dim);

  // Rotates `x` (dim values) in place for position `pos`.
  void apply(float* x, std::int64_t pos) const { apply_heads(x, 1, 0, pos); }
  // Rotates `heads` vectors `stride` floats apart, computing the angles once.
  void apply_heads(float* x, std::int64_t heads, std::int64_t stride, std::int64_t pos) const;
  const std::vector<double>& inverse_frequencies() const { return inv_freq_; }

 private:
  std::int64_t dim_;
  bool interleaved_;
  double attention_factor_;
  std::vector<double> inv_freq_;
};

}  // namespace tandem::backend
