// What the planner needs to know about a model, from its config.json alone: parameter counts
// by category and the size of one token's KV cache. Covers the families Tandem runs and the
// ones it can plan for before they run.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tandem::plan {

struct ModelShape {
  std::string architecture;
  std::int64_t layers = 0;
  std::int64_t moe_layers = 0;
  std::int64_t hidden = 0;
  std::int64_t experts = 0;  // routed experts per MoE layer
  std::int64_t experts_per_token = 0;
  // Parameter counts.
  std::int64_t embedding_params = 0;
  std::int64_t output_params = 0;     // 0 when tied to the embedding
  std::int64_t attention_params = 0;  // all layers, with their norms
  std::int64_t dense_ffn_params = 0;  // the dense feed-forward layers
  std::int64_t shared_expert_params = 0;
  std::int64_t router_params = 0;
  std::int64_t expert_params = 0;  // one routed expert (gate, up, down)
  // Query heads times the wider of their key and value widths: a token's widest attention
  // rows in the forward pass's scratch; 0: unknown.
  std::int64_t attention_width = 0;
  // A token's other attention rows in that scratch: Qwen3-Next's sigmoid gate beside each
  // query, and its gated DeltaNet's fused q, k, v, z projection with its b and a; MLA's
  // low-rank query row.
  std::int64_t attention_extra_width = 0;
  // KV cache elements per token over all layers (MLA: the latent and the rotary key).
  std::int64_t kv_elements_per_token = 0;
  bool mla = false;
  // The widths of the rows the CPU's KV cache keeps a head's keys and values in (MLA: the
  // latent with the rotary key, and the latent); 0: unknown. The 8-bit cache takes whole 32s.
  std::int64_t kv_key_width = 0, kv_value_width = 0;
  // The routed experts are stored as MXFP4 (gpt-oss: quantization_config quant_method mxfp4).
  bool mxfp4_experts = false;
  // Layers that attend through a sliding window (gpt-oss: every other one). The CPU engine
  // keeps every position of them as of the others, so the KV cache counts all layers.
  std::int64_t sliding_layers = 0;
  // The positions the model takes (model::position_limit: its trained length, or as far as
  // its RoPE scaling stretches it); 0: unknown. The plan's context stays within it.
  std::int64_t max_positions = 0;
  // Qwen3-Next's gated DeltaNet layers: no KV cache, but a state per sequence of this many
  // elements over all of them (the convolution's last inputs and each head's matrix).
  std::int64_t linear_layers = 0;
  std::int64_t recurrent_state_elements = 0;
  // A GGUF file's bytes per category as stored (each tensor in its own block format), which
  // the plan counts when the model runs as stored (WeightFormat::Native); known: read.
  struct StoredBytes {
    bool known = false;
    std::uint64_t embedding = 0, output = 0, attention = 0, dense_ffn = 0, shared_experts = 0,
                  router = 0;
    std::uint64_t expert = 0;  // one routed expert, the average over the layers
  } stored;

  std::int64_t routed_expert_params() const { return expert_params * experts * moe_layers; }
  std::int64_t always_active_params() const {
    return attention_params + dense_ffn_params + shared_expert_params + router_params +
           output_params;
  }
  std::int64_t total_params() const {
    return embedding_params + always_active_params() + routed_expert_params();
  }
  std::int64_t active_params_per_token() const {
    return always_active_params() + expert_params * experts_per_token * moe_layers;
  }
};

// Throws std::runtime_error naming `source` when the config lacks what the shape needs.
ModelShape model_shape_from_config(const nlohmann::json& config, const std::string& source);

}  // namespace tandem::plan
