// KL(reference || other) of the softmax distributions of two logit vectors, computed
// independently of the engine (in double), for tests that compare a format to a reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::test {

inline double kl_divergence_of_logits(const std::vector<float>& reference,
                                      const std::vector<float>& other) {
  auto softmax = [](const std::vector<float>& l) {
    const float mx = *std::max_element(l.begin(), l.end());
    std::vector<double> p(l.size());
    double sum = 0;
    for (std::size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp(double(l[i]) - mx);
    for (double& v : p) v /= sum;
    return p;
  };
  const auto p = softmax(reference), q = softmax(other);
  double kl = 0;
  for (std::size_t i = 0; i < p.size(); ++i) kl += p[i] > 0 ? p[i] * std::log(p[i] / q[i]) : 0.0;
  return kl;
}

// The mean of kl_divergence_of_logits over rows of logits (one per prompt or position), as
// many in `other` as in `reference`.
inline double mean_kl_divergence_of_logits(const std::vector<std::vector<float>>& reference,
                                           const std::vector<std::vector<float>>& other) {
  double sum = 0;
  for (std::size_t i = 0; i < other.size(); ++i)
    sum += kl_divergence_of_logits(reference[i], other[i]);
  return sum / static_cast<double>(other.size());
}

}  // namespace tandem::test
