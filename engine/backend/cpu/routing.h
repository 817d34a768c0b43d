// The routers of the mixture-of-experts layers: which k experts each token goes to, and
// with what weight. Softmax top-k (Qwen3-MoE, Mixtral; DeepSeek-V2 with its groups and
// scaling) and DeepSeek-V3's grouped sigmoid with its score-correction bias and scaling.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::backend {

// Which experts each token chose in one layer, and with what weight.
struct Routing {
  std::vector<std::int32_t> experts;  // [tokens x k]
  std::vector<float> weights;         // [tokens x k]
};

// Softmax scores, the top k; with groups > 1 only the experts of the top_groups groups whose
// best expert scores highest (DeepSeek-V2's group-limited greedy; the others compete at 0).
// Weights: the chosen scores, renormalised to sum 1 if `normalize`, times `scaling`.
Routing route_softmax(const float* logits, std::int64_t tokens, std::int64_t experts,
                      std::int64_t k, bool normalize, std::int64_t groups = 1,
                      std::int64_t top_groups = 1, float scaling = 1.0f);
Routing route_grouped_sigmoid(const float* logits, const float* bias, std::int64_t tokens,
                              std::int64_t experts, std::int64_t k, std::int64_t groups,
                              std::int64_t top_groups, bool normalize, float scaling);

}  // namespace tandem::backend
