#include "engine/backend/cpu/routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/attention/attention.h"

namespace tandem::backend {
namespace {

// Indices of the k largest values, largest first; ties go to the lower index.
std::vector<std::int32_t> top_k(const float* v, std::int64_t n, std::int64_t k) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [v](std::int32_t a, std::int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// Experts of groups other than the top_groups best by group_score compete with 0.
void keep_best_groups(std::vector<float>& choice, const std::vector<float>& group_score,
                      std::int64_t top_groups) {
  const auto groups = static_cast<std::int64_t>(group_score.size());
  const auto per_group = static_cast<std::int64_t>(choice.size()) / groups;
  const auto kept = top_k(group_score.data(), groups, top_groups);
  std::vector<bool> eligible(static_cast<std::size_t>(groups), false);
  for (std::int32_t g : kept) eligible[static_cast<std::size_t>(g)] = true;
  for (std::size_t e = 0; e < choice.size(); ++e) {
    if (!eligible[e / static_cast<std::size_t>(per_group)]) choice[e] = 0.0f;
  }
}

}  // namespace

Routing route_softmax(const float* logits, std::int64_t tokens, std::int64_t experts,
                      std::int64_t k, bool normalize, std::int64_t groups, std::int64_t top_groups,
                      float scaling) {
  Routing r;
  r.experts.resize(static_cast<std::size_t>(tokens * k));
  r.weights.resize(static_cast<std::size_t>(tokens * k));
  const std::int64_t per_group = experts / groups;
  std::vector<float> p(static_cast<std::size_t>(experts));
  std::vector<float> choice(static_cast<std::size_t>(experts));
  std::vector<float> group_score(static_cast<std::size_t>(groups));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::copy(logits + t * experts, logits + (t + 1) * experts, p.begin());
    kernels::softmax_inplace(p.data(), experts);
    choice = p;
    if (groups > 1) {
      // A group's score is its best expert's; only the best top_groups groups stay eligible.
      for (std::int64_t g = 0; g < groups; ++g) {
        group_score[static_cast<std::size_t>(g)] =
            *std::max_element(p.begin() + g * per_group, p.begin() + (g + 1) * per_group);
      }
      keep_best_groups(choice, group_score, top_groups);
    }
    const auto chosen = top_k(choice.data(), experts, k);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) sum += p[static_cast<std::size_t>(chosen[j])];
    for (std::int64_t j = 0; j < k; ++j) {
      const float w = p[static_cast<std::size_t>(chosen[j])];
      r.experts[static_cast<std::size_t>(t * k + j)] = chosen[static_cast<std::size_t>(j)];
      r.weights[static_cast<std::size_t>(t * k + j)] = (normalize ? w / sum : w) * scaling;
    }
  }
  return r;
}

Routing route_grouped_sigmoid(const float* logits, const float* bias, std::int64_t tokens,
                              std::int64_t experts, std::int64_t k, std::int64_t groups,
                              std::int64_t top_groups, bool normalize, float scaling) {
  Routing r;
  r.experts.resize(static_cast<std::size_t>(tokens * k));
  r.weights.resize(static_cast<std::size_t>(tokens * k));
  const std::int64_t per_group = experts / groups;
  std::vector<float> scores(static_cast<std::size_t>(experts));
  std::vector<float> choice(static_cast<std::size_t>(experts));
  std::vector<float> group_score(static_cast<std::size_t>(groups));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t e = 0; e < experts; ++e) {
      scores[static_cast<std::size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[t * experts + e]));
      choice[static_cast<std::size_t>(e)] =
          scores[static_cast<std::size_t>(e)] + (bias ? bias[e] : 0.0f);
    }
    // A group's score is the sum of its two best experts; only the best groups stay eligible.
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* gs = choice.data() + g * per_group;
      const auto best = top_k(gs, per_group, std::min<std::int64_t>(2, per_group));
      float s = 0.0f;
      for (std::int32_t b : best) s += gs[b];
      group_score[static_cast<std::size_t>(g)] = s;
    }
    keep_best_groups(choice, group_score, top_groups);
    const auto chosen = top_k(choice.data(), experts, k);
    float sum = 0.0f;
    for (std::int32_t e : chosen) sum += scores[static_cast<std::size_t>(e)];
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = chosen[static_cast<std::size_t>(j)];
      float w = scores[static_cast<std::size_t>(e)];
      if (normalize) w /= (sum + 1e-20f);
      r.experts[static_cast<std::size_t>(t * k + j)] = e;
      r.weights[static_cast<std::size_t>(t * k + j)] = w * scaling;
    }
  }
  return r;
}

}  // namespace tandem::backend
