// One description of every supported architecture, read from config.json. Per-family code
// in the runtime only handles what differs (MLA attention, routing functions, q/k norms).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::model {

enum class Family { Llama, Qwen3, Qwen3Moe, Mixtral, DeepseekV3, Glm4Moe, GptOss, Qwen3Next };
std::string_view family_name(Family f);
// The Hugging Face architecture names Tandem runs, for messages.
std::string supported_architectures();
// Whether `architecture` ("Qwen3MoeForCausalLM") is one of them.
// The family as people call it ("Qwen3-MoE" for Qwen3MoeForCausalLM); the architecture
// itself when Tandem does not know it.
std::string architecture_display_name(std::string_view architecture);
bool is_supported_architecture(std::string_view architecture);

enum class RopeType { Default, Linear, Yarn, Llama3 };

struct RopeSpec {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double factor = 1.0;
  std::int64_t original_max_position = 0;
  double beta_fast = 32.0;  // YaRN
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 1.0;  // YaRN: multiplies cos and sin
  bool truncate = true;
  double low_freq_factor = 1.0;  // Llama 3
  double high_freq_factor = 4.0;
  bool interleaved = false;  // rotate (2i, 2i+1) pairs instead of the two halves
  // The share of each head's dimensions rotated (GLM-4.5: 0.5, the first half); 0: not given.
  double partial_rotary_factor = 0.0;
};

enum class RouterScoring { Softmax, Sigmoid };

// An FP8 weight `w` is stored with a tensor `w` + suffix of fp32-convertible scales:
// value = stored * scale[row / block_rows][col / block_cols]. Block FP8 (DeepSeek-V3, Qwen3
// "-FP8": quant_method "fp8") names it "_scale_inv"; llm-compressor's channel FP8
// (quant_method "compressed-tensors", e.g. GLM-4.5-FP8) names it "_scale" and keeps one
// scale per output row: block_rows 1, block_cols 0 (the whole row).
struct Fp8Scales {
  std::string suffix = "_scale_inv";
  std::int64_t block_rows = 128;
  std::int64_t block_cols = 128;  // 0: the whole row
};

struct ModelSpec {
  Family family = Family::Llama;
  std::string architecture;  // "Qwen3MoeForCausalLM"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;           // standard attention
  std::int64_t intermediate_size = 0;  // dense MLP layers
  double rms_norm_eps = 1e-6;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qk_norm = false;          // Qwen3: RMSNorm over each head's q and k before RoPE
  bool attention_bias = false;   // GLM-4.5, gpt-oss: the q, k and v projections add a bias
  bool output_bias = false;      // gpt-oss: so does the output projection
  bool attention_sinks = false;  // gpt-oss: a learned logit per head in each softmax
  // Per layer, how many positions back a token attends (itself included); 0: all of them.
  std::vector<std::int64_t> layer_window;
  // Qwen3-Next: the query projection also gives a gate per query dimension, and the
  // attention's output is multiplied by its sigmoid before o_proj.
  bool attention_output_gate = false;
  // Qwen3-Next: RMSNorm weights are stored as w and scale by 1 + w (folded in at binding).
  bool norm_plus_one = false;

  // Qwen3-Next's gated DeltaNet layers (linear attention with a recurrent state instead of
  // a KV cache): which layers, and their shapes. A layer is linear or attends, never both.
  std::vector<bool> layer_is_linear;
  std::int64_t linear_key_heads = 0, linear_value_heads = 0;
  std::int64_t linear_key_dim = 0, linear_value_dim = 0;  // per head
  std::int64_t linear_conv_kernel = 0;
  bool has_linear_layers() const {
    for (bool b : layer_is_linear)
      if (b) return true;
    return false;
  }
  std::int64_t linear_conv_channels() const {
    return 2 * linear_key_heads * linear_key_dim + linear_value_heads * linear_value_dim;
  }
  // Dimensions of each head that RoPE rotates, from its start (GLM-4.5: half); 0: all.
  std::int64_t rotary_dim = 0;
  RopeSpec rope;

  // Multi-head latent attention (DeepSeek-V3, Kimi-K2).
  bool mla = false;
  std::int64_t q_lora_rank = 0;  // 0: q_proj directly
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
  double attention_scale = 0.0;  // softmax scale; 0 means 1/sqrt(q·k dimension)

  // Mixture of experts.
  std::int64_t num_experts = 0;
  std::int64_t experts_per_token = 0;
  std::int64_t moe_intermediate_size = 0;
  std::int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = true;
  RouterScoring scoring = RouterScoring::Softmax;
  std::int64_t n_group = 1;
  std::int64_t topk_group = 1;
  double routed_scaling_factor = 1.0;
  bool score_correction_bias = false;
  bool shared_expert_gate = false;  // Qwen3-Next: the shared expert scaled by a sigmoid gate
  bool router_bias = false;         // gpt-oss: the router's logits add a bias
  // gpt-oss: the experts' products add biases, and their activation is a clamped SwiGLU
  // (swiglu_limit > 0) instead of SiLU(gate) * up.
  bool expert_bias = false;
  double swiglu_limit = 0.0;
  double swiglu_alpha = 0.0;
  // gpt-oss: the routed experts are stored as MXFP4 (quant_method "mxfp4").
  bool mxfp4_experts = false;
  std::vector<bool> layer_is_moe;  // one entry per layer

  // How an FP8 checkpoint scales its weights (from quantization_config).
  Fp8Scales fp8;

  std::vector<std::int32_t> eos_token_ids;
  std::int32_t bos_token_id = -1;

  std::int64_t qk_head_dim() const { return mla ? qk_nope_head_dim + qk_rope_head_dim : head_dim; }
  std::int64_t rope_dim() const {
    return mla ? qk_rope_head_dim : rotary_dim > 0 ? rotary_dim : head_dim;
  }
  bool is_moe() const { return num_experts > 0; }
  // The positions the model takes: max_position_embeddings, or as far as its YaRN or linear
  // RoPE scaling stretches the positions it was trained on; 0 when its files do not say.
  std::int64_t position_limit() const;
};

// The positions a model takes: its trained length (max_position_embeddings), or as far as
// YaRN or linear RoPE scaling by `factor` stretches `original` (for linear, the trained
// length when 0); what ModelSpec::position_limit and the planner count.
std::int64_t position_limit(std::int64_t max_position_embeddings, RopeType type, double factor,
                            std::int64_t original);

// Throws ModelError naming `source` for invalid values, unsupported architectures (listing
// the supported ones) and unsupported features.
ModelSpec parse_model_spec(const nlohmann::json& config, const std::string& source);
// Reads `folder`/config.json (and generation_config.json for the stop tokens).
ModelSpec load_model_spec(const std::string& folder);

}  // namespace tandem::model
