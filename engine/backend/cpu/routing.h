// The routers of the mixture-of-experts layers: which k experts each token goes to, and
// with what weight. Softmax top-k (Qwen3-MoE, Mixtral) and DeepSeek-V3's grouped sigmoid
// with its score-correction bias and scaling.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::backend {

// Which experts each token chose in one layer, and with what weight.
struct Routing {
  std::vector<std::int32_t> experts;  // [tokens x k]
  std::vector<float> weights;         // [tokens x k]
};

Routing route_softmax(const float* logits, std::int64_t tokens, std::int64_t experts,
                      std::int64_t k, bool normalize);
Routing route_grouped_sigmoid(const float* logits, const float* bias, std::int64_t tokens,
                              std::int64_t experts, std::int64_t k, std::int64_t groups,
                              std::int64_t top_groups, bool normalize, float scaling);

}  // namespace tandem::backend
