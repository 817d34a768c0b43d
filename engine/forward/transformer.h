// The forward pass of every supported family on the CPU, in fp32: embeddings, attention
// (grouped-query or multi-head latent), dense or mixture-of-experts feed-forward, output head.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/backend/cpu/rope.h"
#include "engine/measure/metrics.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/packed_matmul.h"

namespace tandem::forward {

// Which experts each token chose in one layer, and with what weight.
struct Routing {
  std::vector<std::int32_t> experts;  // [tokens x k]
  std::vector<float> weights;         // [tokens x k]
};

// The routing functions, exposed so they can be tested on their own.
Routing route_softmax(const float* logits, std::int64_t tokens, std::int64_t experts,
                      std::int64_t k, bool normalize);
Routing route_grouped_sigmoid(const float* logits, const float* bias, std::int64_t tokens,
                              std::int64_t experts, std::int64_t k, std::int64_t groups,
                              std::int64_t top_groups, bool normalize, float scaling);

class Transformer {
 public:
  // Routed experts split for several pools run on the pools of `pools`, which must have as
  // many (std::invalid_argument otherwise); everything else runs on all its threads.
  Transformer(const model::ModelSpec& spec, const model::ModelWeights& weights,
              backend::NumaPools& pools);

  // Runs `tokens` at positions cache.size() onwards and appends them to the cache. Writes
  // the logits of the last token to `logits` ([vocab]), or of every token ([n x vocab]) when
  // `all_logits` is set. Throws std::length_error when the cache has no room.
  void forward(std::span<const std::int32_t> tokens, backend::KvCache& cache,
               std::vector<float>& logits, bool all_logits = false);

  const model::ModelSpec& spec() const { return spec_; }
  // Records routing hits and time per part into `metrics` (may be null).
  void set_metrics(measure::Metrics* metrics) { metrics_ = metrics; }

 private:
  void attention(std::int64_t layer, const float* x, std::int64_t n, std::int64_t pos0,
                 backend::KvCache& cache, float* out);
  void latent_attention(std::int64_t layer, const float* x, std::int64_t n, std::int64_t pos0,
                        backend::KvCache& cache, float* out);
  void feed_forward(const model::FeedForwardWeights& w, const float* x, std::int64_t n, float* out);
  void mixture_of_experts(const model::MoeWeights& w, const float* x, std::int64_t n, float* out);
  void packed_experts(const model::MoeWeights& w, const float* x,
                      const std::vector<std::int64_t>& count,
                      const std::vector<std::int64_t>& slot_token,
                      const std::vector<float>& slot_weight, float* out);
  void matmul(const float* x, std::int64_t n, const kernels::WeightMatrix& w, float* y);

  const model::ModelSpec& spec_;
  const model::ModelWeights& weights_;
  backend::NumaPools& pool_;
  kernels::ParallelFor parallel_;
  backend::RotaryEmbedding rope_;
  measure::Metrics* metrics_ = nullptr;
  std::int64_t current_layer_ = 0;
  // Scratch of the packed expert path, kept between calls to avoid reallocation. With
  // several expert slices, each buffer holds one block per slice.
  std::vector<kernels::PackedActivations> moe_inputs_;
  std::vector<kernels::PackedActivations> moe_hidden_;
  std::vector<float> moe_gate_, moe_up_, moe_out_;
};

// y = x / rms(x) * weight over `n` values.
void rms_norm(const float* x, const float* weight, std::int64_t n, double eps, float* y);

}  // namespace tandem::forward
