#include "engine/backend/cpu/rope.h"

#include <algorithm>
#include <cmath>

namespace tandem::backend {
namespace {

constexpr double kPi = 3.14159265358979323846;

// YaRN (arXiv:2309.00071): dimensions that rotate fewer than beta_slow times over the
// original context are interpolated, those above beta_fast extrapolated, a linear ramp between.
void apply_yarn(const model::RopeSpec& s, std::int64_t dim, std::vector<double>& inv) {
  const auto correction_dim = [&](double rotations) {
    return dim * std::log(static_cast<double>(s.original_max_position) / (rotations * 2 * kPi)) /
           (2 * std::log(s.theta));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double interpolated = inv[i] / s.factor;
    inv[i] = interpolated * (1.0 - extrapolation_weight) + inv[i] * extrapolation_weight;
  }
}

void apply_llama3(const model::RopeSpec& s, std::vector<double>& inv) {
  const double old_context = static_cast<double>(s.original_max_position);
  const double low_wavelen = old_context / s.low_freq_factor;
  const double high_wavelen = old_context / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * kPi / f;
    if (wavelen > low_wavelen) {
      f /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const model::RopeSpec& spec, std::int64_t dim)
    : dim_(dim), interleaved_(spec.interleaved), attention_factor_(1.0) {
  inv_freq_.resize(static_cast<std::size_t>(dim / 2));
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    // Computed in fp32 as the reference implementations do, so positions agree bit for bit
    // in the exponent.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    inv_freq_[static_cast<std::size_t>(i)] =
        1.0 / std::pow(spec.theta, static_cast<double>(exponent));
  }
  switch (spec.type) {
    case model::RopeType::Default:
      break;
    case model::RopeType::Linear:
      for (double& f : inv_freq_) f /= spec.factor;
      break;
    case model::RopeType::Yarn:
      apply_yarn(spec, dim, inv_freq_);
      attention_factor_ = spec.attention_factor;
      break;
    case model::RopeType::Llama3:
      apply_llama3(spec, inv_freq_);
      break;
  }
}

void RotaryEmbedding::apply_heads(float* x, std::int64_t heads, std::int64_t stride,
                                  std::int64_t pos) const {
  const std::int64_t half = dim_ / 2;
  thread_local std::vector<float> cos_table, sin_table;
  cos_table.resize(static_cast<std::size_t>(half));
  sin_table.resize(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * inv_freq_[static_cast<std::size_t>(i)];
    cos_table[static_cast<std::size_t>(i)] =
        static_cast<float>(std::cos(angle) * attention_factor_);
    sin_table[static_cast<std::size_t>(i)] =
        static_cast<float>(std::sin(angle) * attention_factor_);
  }
  for (std::int64_t h = 0; h < heads; ++h) {
    float* v = x + h * stride;
    for (std::int64_t i = 0; i < half; ++i) {
      const float c = cos_table[static_cast<std::size_t>(i)];
      const float s = sin_table[static_cast<std::size_t>(i)];
      // Interleaved checkpoints pair neighbours (2i, 2i+1); the others pair i with i + dim/2.
      const std::int64_t a = interleaved_ ? 2 * i : i;
      const std::int64_t b = interleaved_ ? 2 * i + 1 : i + half;
      const float x1 = v[a];
      const float x2 = v[b];
      v[a] = x1 * c - x2 * s;
      v[b] = x2 * c + x1 * s;
    }
  }
}

}  // namespace tandem::backend
