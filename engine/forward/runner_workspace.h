// The scratch of ModelRunner's forward pass: activations on the device for a chunk of tokens,
// and the host's copies of what the CPU experts read (the routing, the normed activations)
// and write. Kept between passes; grown when a pass has more tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/expert_compute.h"
#include "engine/forward/model_runner.h"

namespace tandem::forward {

struct ModelRunner::Workspace {
  std::int64_t tokens = 0;      // capacity in tokens
  std::int64_t logit_rows = 0;  // capacity of the output head's rows
  std::int64_t tokens_now = 0;  // in the pass running
  std::int64_t k = 0;

  std::unique_ptr<backend::DeviceBuffer> ids, x, xn, branch, ffn_out, q, k_buf, v, attended, qa, kv,
      gate, up, router_logits, route_ids, route_weights, cpu_out, deferred_out, head_in, head_out,
      q_gate, qkvz, ba, shared_gate;

  std::vector<std::int32_t> host_ids;  // [layers x tokens x k]
  std::vector<float> host_weights;     // [layers x tokens x k]
  std::vector<float> host_x[2];        // [tokens x hidden], alternate MoE layers
  std::vector<float> host_cpu_out, host_deferred_out;
  std::vector<backend::ExpertPair> pairs, token_pairs;
  std::vector<const backend::DeviceExpert*> table;

  std::int32_t* layer_ids(std::int64_t layer) { return host_ids.data() + layer * tokens * k; }
  float* layer_weights(std::int64_t layer) { return host_weights.data() + layer * tokens * k; }

  // Device bytes for `tokens` tokens and `logit_rows` rows of logits.
  static std::uint64_t device_bytes(const model::ModelSpec& spec, const model::ModelWeights& w,
                                    std::int64_t tokens, std::int64_t logit_rows);
  void allocate(backend::Backend& device, const model::ModelSpec& spec,
                const model::ModelWeights& w, std::int64_t tokens, std::int64_t logit_rows);

 private:
  using Member = std::unique_ptr<backend::DeviceBuffer> Workspace::*;
  // Calls add(buffer, floats) for every device buffer, sized for `tokens` tokens.
  static void for_each_buffer(const model::ModelSpec& spec, const model::ModelWeights& w,
                              std::int64_t tokens, std::int64_t logit_rows,
                              const std::function<void(Member, std::int64_t)>& add);
};

// Short names for the buffers' views as fp32; the forward pass is full of them.
inline backend::DevicePtr<const float> cf(const std::unique_ptr<backend::DeviceBuffer>& b) {
  return backend::device_ptr<const float>(b);
}
inline backend::DevicePtr<float> f(const std::unique_ptr<backend::DeviceBuffer>& b) {
  return backend::device_ptr<float>(b);
}

// Each token's lowest-weighted CPU experts of one layer, computed while the next layer runs.
struct ModelRunner::PendingDeferral {
  std::int64_t layer = -1;
  int buffer = 0;  // which host_x holds the layer's activations
  std::vector<backend::ExpertPair> pairs, token_pairs;
  std::vector<const backend::DeviceExpert*> table;
};

}  // namespace tandem::forward
