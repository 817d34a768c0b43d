// The weights the forward pass reads, placed on the backend it runs on: everything but the
// routed experts (their placement is the scheduler's, engine/schedule). On the CPU these are
// views of the loaded model's own weights; on an accelerator, copies in its memory.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"

namespace tandem::forward {

struct DeviceFeedForward {
  std::unique_ptr<backend::DeviceMatrix> gate, up, down;
};

struct DeviceAttention {
  std::unique_ptr<backend::DeviceMatrix> q, k, v, o;
  std::unique_ptr<backend::DeviceMatrix> q_gate;  // may be null
  std::unique_ptr<backend::DeviceBuffer> q_norm, k_norm;
  std::unique_ptr<backend::DeviceBuffer> q_bias, k_bias, v_bias, o_bias;  // may be null
  std::unique_ptr<backend::DeviceBuffer> sinks;                           // may be null
  std::unique_ptr<backend::DeviceMatrix> q_a, q_b, kv_a;
  // Latent attention's up-projections: kv_b, or k_b and v_b as a GGUF file stores them where
  // the backend reads them so (Backend::reads_split_latent_projections).
  std::unique_ptr<backend::DeviceMatrix> kv_b, k_b, v_b;
  backend::LatentProjections latent() const { return {kv_b.get(), k_b.get(), v_b.get()}; }
  std::unique_ptr<backend::DeviceBuffer> q_a_norm, kv_a_norm;
};

struct DeviceLinearAttention {
  std::unique_ptr<backend::DeviceMatrix> in_qkvz, in_ba, out;
  std::unique_ptr<backend::DeviceBuffer> conv, a_log, dt_bias, norm;
};

struct DeviceLayer {
  std::unique_ptr<backend::DeviceBuffer> attention_norm, ffn_norm;
  bool linear = false;
  DeviceAttention attention;
  DeviceLinearAttention linear_attention;
  bool moe = false;
  DeviceFeedForward dense;  // a dense layer's FFN
  std::unique_ptr<backend::DeviceMatrix> router;
  std::unique_ptr<backend::DeviceBuffer> score_bias;   // may be null
  std::unique_ptr<backend::DeviceBuffer> router_bias;  // may be null
  std::unique_ptr<DeviceFeedForward> shared;           // may be null
  std::unique_ptr<backend::DeviceMatrix> shared_gate;  // may be null
};

struct DeviceWeights {
  std::unique_ptr<backend::DeviceMatrix> embedding, output;
  std::unique_ptr<backend::DeviceBuffer> final_norm;
  std::vector<DeviceLayer> layers;
  std::unique_ptr<backend::DeviceRope> rope;
  // kv_b joined from a GGUF file's k_b and v_b for a backend that reads it joined only,
  // kept while the weights are (the copies to the device may still be queued).
  std::vector<std::vector<float>> joined_kv_b;
};

// kv_b joined from a layer's k_b and v_b in F32 ([heads * (nope + v), kv_lora_rank]), for a
// backend whose latent attention reads the joined form only (the CUDA backend).
std::vector<float> join_latent_projections(const model::AttentionWeights& a, std::int64_t heads,
                                           std::int64_t nope, std::int64_t v, std::int64_t latent);

// Copies on the compute queue; throws backend::DeviceOutOfMemory when they do not fit.
DeviceWeights place_weights(backend::Backend& device, const model::ModelSpec& spec,
                            const model::ModelWeights& weights);
// The device memory place_weights takes.
std::uint64_t device_weight_bytes(const backend::Backend& device,
                                  const model::ModelWeights& weights);

}  // namespace tandem::forward
