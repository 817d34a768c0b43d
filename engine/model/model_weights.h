// The tensors of a checkpoint bound to their roles, with every shape checked against the
// ModelSpec. Large matrices stay memory-mapped; norms and biases are copied to fp32.
#pragma once

#include <optional>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/model_spec.h"

namespace tandem::model {

using kernels::WeightMatrix;

struct AttentionWeights {
  WeightMatrix q, k, v, o;
  WeightMatrix q_gate;                        // Qwen3-Next: the output gate's half of q_proj
  std::vector<float> q_norm, k_norm;          // Qwen3: per-head RMSNorm weights
  std::vector<float> q_bias, k_bias, v_bias;  // GLM-4.5, gpt-oss
  std::vector<float> o_bias;                  // gpt-oss
  std::vector<float> sinks;                   // gpt-oss: one logit per head
  // Multi-head latent attention.
  WeightMatrix q_a, q_b;  // with q_lora_rank; otherwise `q` is the full projection
  std::vector<float> q_a_norm;
  WeightMatrix kv_a;  // [kv_lora_rank + rope dim, hidden]
  std::vector<float> kv_a_norm;
  // kv_b [heads * (nope + v), kv_lora_rank] as Hugging Face stores it, or, where a GGUF file
  // stores it split per head (current llama.cpp conversions), k_b [heads * kv_lora_rank,
  // nope] (the key part transposed, as the absorbed query multiplies it) and v_b
  // [heads * v, kv_lora_rank], each in its own block format; the other is left empty.
  WeightMatrix kv_b;
  WeightMatrix k_b, v_b;
};

// One pool's share of a routed expert split for several NUMA pools: the packed gate and up
// rows and down columns [begin, begin + width) of the intermediate dimension.
struct ExpertSlice {
  std::int64_t begin = 0, width = 0;
  const kernels::PackedMatrix* gate = nullptr;
  const kernels::PackedMatrix* up = nullptr;
  const kernels::PackedMatrix* down = nullptr;
  kernels::CpuVariant variant = kernels::CpuVariant::Scalar;
};

struct FeedForwardWeights {
  WeightMatrix gate, up, down;
  // gpt-oss: biases of the three products (empty: none) and its activation.
  std::vector<float> gate_bias, up_bias, down_bias;
  kernels::Glu glu;
  // A routed expert packed for several pools: one slice per pool, and then gate, up and down
  // carry no packed form of their own.
  std::vector<ExpertSlice> slices;
};

struct MoeWeights {
  WeightMatrix router;             // [experts, hidden]
  std::vector<float> router_bias;  // gpt-oss
  std::vector<float> score_bias;   // DeepSeek-V3 e_score_correction_bias
  std::vector<FeedForwardWeights> experts;
  std::optional<FeedForwardWeights> shared;
  WeightMatrix shared_gate;  // Qwen3-Next: [1, hidden], the shared expert's sigmoid gate
};

// Qwen3-Next's gated DeltaNet: the input projections with their rows reordered so that one
// product gives [q | k | v | z] (all key heads' q, then k, then all value heads' v, then the
// output gate z) and one [b | a] per value head; the causal convolution over q, k and v
// ([channels x kernel]); the decay's A_log and dt_bias and the gated norm per value head.
struct LinearAttentionWeights {
  WeightMatrix in_qkvz, in_ba, out;
  std::vector<float> conv, a_log, dt_bias, norm;
};

struct LayerWeights {
  std::vector<float> attention_norm;
  std::vector<float> ffn_norm;
  bool linear = false;  // a gated DeltaNet layer: linear_attention instead of attention
  AttentionWeights attention;
  LinearAttentionWeights linear_attention;
  bool moe = false;
  FeedForwardWeights dense;  // when !moe
  MoeWeights experts;        // when moe
};

struct ModelWeights {
  WeightMatrix embedding;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;
  WeightMatrix output;  // [vocab, hidden]; the embedding when tied
};

// Throws ModelError naming the file and tensor when one is missing or has the wrong shape.
// Derives the tensors a family stores fused (gpt-oss's experts) into `checkpoint`.
ModelWeights bind_weights(const ModelSpec& spec, Checkpoint& checkpoint);

}  // namespace tandem::model
