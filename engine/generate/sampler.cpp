#include "engine/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include <fmt/format.h>

namespace tandem::generate {

std::string sampling_problem(const SamplingParams& p) {
  const auto outside = [](const char* what, float value, const char* range) {
    return fmt::format("The {} must be {}; it is {}.", what, range, value);
  };
  if (!(p.temperature >= 0.0f && p.temperature <= kMaxTemperature))
    return outside("temperature", p.temperature, "from 0 (always the likeliest token) to 2");
  if (p.top_k < 0) return fmt::format("The top-k must be 0 (off) or more; it is {}.", p.top_k);
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f))
    return outside("top-p", p.top_p, "from 0 to 1 (1: off)");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return outside("min-p", p.min_p, "from 0 (off) to 1");
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= kMaxRepetitionPenalty))
    return outside("repetition penalty", p.repetition_penalty, "above 0 and at most 10 (1: off)");
  return {};
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (std::string problem = sampling_problem(params); !problem.empty())
    throw std::invalid_argument(problem);
}

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
  const std::size_t n = logits.size();
  work_.assign(logits.begin(), logits.end());

  if (params_.repetition_penalty != 1.0f && !history.empty()) {
    // The CTRL-paper penalty as Hugging Face applies it: a seen token's logit moves towards
    // "less likely" by the factor, whatever its sign.
    const std::size_t window = std::min<std::size_t>(
        history.size(), static_cast<std::size_t>(std::max(0, params_.penalty_window)));
    std::unordered_set<std::int32_t> seen(history.end() - static_cast<std::ptrdiff_t>(window),
                                          history.end());
    for (std::int32_t id : seen) {
      if (id < 0 || static_cast<std::size_t>(id) >= n) continue;
      float& l = work_[static_cast<std::size_t>(id)];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    }
  }

  if (params_.temperature <= 0.0f) {
    return static_cast<std::int32_t>(std::max_element(work_.begin(), work_.end()) - work_.begin());
  }

  ids_.resize(n);
  std::iota(ids_.begin(), ids_.end(), 0);
  std::size_t keep = n;
  if (params_.top_k > 0 && static_cast<std::size_t>(params_.top_k) < n)
    keep = static_cast<std::size_t>(params_.top_k);
  std::partial_sort(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(keep), ids_.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      return work_[static_cast<std::size_t>(a)] >
                             work_[static_cast<std::size_t>(b)];
                    });
  ids_.resize(keep);

  // Softmax over the survivors at the given temperature (largest first, so probs are sorted).
  std::vector<double> probs(keep);
  const double top = work_[static_cast<std::size_t>(ids_[0])];
  double sum = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((work_[static_cast<std::size_t>(ids_[i])] - top) / params_.temperature);
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;

  std::size_t cut = keep;
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (std::size_t i = 0; i < keep; ++i) {
      cumulative += probs[i];
      if (cumulative >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const double floor = probs[0] * params_.min_p;
    std::size_t i = 1;
    while (i < cut && probs[i] >= floor) ++i;
    cut = i;
  }
  std::discrete_distribution<std::size_t> pick(probs.begin(),
                                               probs.begin() + static_cast<std::ptrdiff_t>(cut));
  return ids_[pick(rng_)];
}

}  // namespace tandem::generate
