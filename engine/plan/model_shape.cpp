#include "engine/plan/model_shape.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/model/model_spec.h"

namespace tandem::plan {
namespace {

using nlohmann::json;

std::int64_t get(const json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_number_integer()) {
    throw std::runtime_error(source + ": \"" + key +
                             "\" is missing, so the model's size cannot be planned.");
  }
  return c[key].get<std::int64_t>();
}

std::int64_t get_or(const json& c, const char* key, std::int64_t fallback) {
  return c.contains(key) && c[key].is_number_integer() ? c[key].get<std::int64_t>() : fallback;
}

// A count transformers 5 writes under a new name (leaving the old one null).
std::int64_t get_renamed(const json& c, const char* old_name, const char* new_name,
                         const std::string& source) {
  return c.contains(new_name) && c[new_name].is_number_integer() ? c[new_name].get<std::int64_t>()
                                                                 : get(c, old_name, source);
}

// The positions a config.json's model takes: max_position_embeddings, stretched by the RoPE
// scaling transformers 4 writes as "rope_scaling" and 5 inside "rope_parameters".
std::int64_t config_position_limit(const json& c) {
  const std::int64_t trained = get_or(c, "max_position_embeddings", 0);
  const json* rope = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (c.contains(key) && c[key].is_object()) {
      rope = &c[key];
      break;
    }
  }
  if (rope == nullptr) return trained;
  const std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
  const double factor = rope->contains("factor") && (*rope)["factor"].is_number()
                            ? (*rope)["factor"].get<double>()
                            : 1.0;
  return model::position_limit(trained,
                               type == "yarn"     ? model::RopeType::Yarn
                               : type == "linear" ? model::RopeType::Linear
                                                  : model::RopeType::Default,
                               factor, get_or(*rope, "original_max_position_embeddings", 0));
}

}  // namespace

ModelShape model_shape_from_config(const json& c, const std::string& source) {
  ModelShape s;
  s.architecture =
      c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty()
          ? c["architectures"][0].get<std::string>()
          : "unknown";
  const std::string a = s.architecture;
  const std::int64_t h = get(c, "hidden_size", source);
  const std::int64_t layers = get(c, "num_hidden_layers", source);
  const std::int64_t vocab = get(c, "vocab_size", source);
  const std::int64_t heads = get(c, "num_attention_heads", source);
  const std::int64_t kv_heads = get_or(c, "num_key_value_heads", heads);
  const std::int64_t head_dim = get_or(c, "head_dim", h / heads);
  const bool tied = c.value("tie_word_embeddings", false);
  s.hidden = h;
  s.layers = layers;
  s.embedding_params = vocab * h;
  s.output_params = tied ? 0 : vocab * h;

  const bool deepseek =
      a == "DeepseekV3ForCausalLM" || a == "KimiK2ForCausalLM" || a == "DeepseekV2ForCausalLM";
  std::int64_t attention_per_layer = 0;
  if (deepseek) {
    s.mla = true;
    const std::int64_t q_lora = get_or(c, "q_lora_rank", 0);
    const std::int64_t kv_lora = get(c, "kv_lora_rank", source);
    const std::int64_t nope = get(c, "qk_nope_head_dim", source);
    const std::int64_t rope = get(c, "qk_rope_head_dim", source);
    const std::int64_t v = get(c, "v_head_dim", source);
    const std::int64_t qk = nope + rope;
    attention_per_layer =
        (q_lora > 0 ? h * q_lora + q_lora + q_lora * heads * qk : h * heads * qk) +
        h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + v) + heads * v * h;
    s.kv_elements_per_token = layers * (kv_lora + rope);
    s.kv_key_width = kv_lora + rope;
    s.kv_value_width = kv_lora;
    s.attention_width = heads * std::max(qk, v);
    s.attention_extra_width = q_lora;  // the queries' low-rank row
  } else {
    s.attention_width = heads * head_dim;
    attention_per_layer = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h;
    if (a == "Qwen3MoeForCausalLM" || a == "Qwen3ForCausalLM" || a == "Qwen3NextForCausalLM")
      attention_per_layer += 2 * head_dim;
    if (c.value("attention_bias", false))
      attention_per_layer += heads * head_dim + 2 * kv_heads * head_dim + h;
    s.kv_elements_per_token = layers * 2 * kv_heads * head_dim;
    s.kv_key_width = s.kv_value_width = head_dim;
  }
  attention_per_layer += 2 * h;  // the two RMSNorms around attention and the MLP
  s.attention_params = attention_per_layer * layers;
  if (a == "Qwen3NextForCausalLM") {
    // The full-attention layers' q_proj gives a sigmoid gate beside each query. The other
    // layers are gated DeltaNet: fused projections to q, k, v, z and to b, a, a causal
    // convolution over q, k and v, per-head decay and step, a gated norm, and the output
    // product; no KV cache but a fixed state per sequence.
    const std::int64_t nk = get(c, "linear_num_key_heads", source);
    const std::int64_t nv = get(c, "linear_num_value_heads", source);
    const std::int64_t dk = get(c, "linear_key_head_dim", source);
    const std::int64_t dv = get(c, "linear_value_head_dim", source);
    const std::int64_t kernel = get(c, "linear_conv_kernel_dim", source);
    const std::int64_t channels = 2 * nk * dk + nv * dv;
    std::int64_t linear = 0;
    if (c.contains("layer_types") && c["layer_types"].is_array()) {
      for (const auto& t : c["layer_types"])
        linear += t.is_string() && t.get<std::string>() == "linear_attention" ? 1 : 0;
    } else {
      const std::int64_t interval = get(c, "full_attention_interval", source);
      for (std::int64_t l = 0; l < layers; ++l) linear += (l + 1) % interval != 0 ? 1 : 0;
    }
    const std::int64_t full = layers - linear;
    s.attention_extra_width = heads * head_dim + channels + nv * dv + 2 * nv;
    const std::int64_t full_attention = attention_per_layer + h * heads * head_dim;
    const std::int64_t linear_attention = h * (channels + nv * dv) + h * 2 * nv +
                                          channels * kernel + 2 * nv + dv + nv * dv * h + 2 * h;
    s.attention_params = full * full_attention + linear * linear_attention;
    s.kv_elements_per_token = full * 2 * kv_heads * head_dim;
    s.linear_layers = linear;
    s.recurrent_state_elements = linear * ((kernel - 1) * channels + nv * dk * dv);
  }

  // Which layers are MoE, and their expert sizes.
  std::int64_t experts = 0, top_k = get_or(c, "num_experts_per_tok", 0), moe_inter = 0,
               shared_inter = 0, dense_layers = 0;
  const std::int64_t inter = get_or(c, "intermediate_size", 0);
  if (deepseek || a == "Glm4MoeForCausalLM") {
    experts = get(c, "n_routed_experts", source);
    moe_inter = get(c, "moe_intermediate_size", source);
    shared_inter = moe_inter * get_or(c, "n_shared_experts", 0);
    dense_layers = get_or(c, "first_k_dense_replace", 0);
  } else if (a == "Qwen3MoeForCausalLM" || a == "Qwen3NextForCausalLM") {
    // transformers 5 writes Qwen3-MoE's expert count as num_local_experts.
    experts = get_renamed(c, "num_experts", "num_local_experts", source);
    moe_inter = get(c, "moe_intermediate_size", source);
    if (a == "Qwen3NextForCausalLM")
      shared_inter = get(c, "shared_expert_intermediate_size", source);
    const std::int64_t step = std::max<std::int64_t>(1, get_or(c, "decoder_sparse_step", 1));
    std::int64_t moe = 0;
    for (std::int64_t l = 0; l < layers; ++l) {
      bool dense = (l + 1) % step != 0;
      if (c.contains("mlp_only_layers")) {
        for (const auto& d : c["mlp_only_layers"]) dense = dense || d.get<std::int64_t>() == l;
      }
      moe += dense ? 0 : 1;
    }
    dense_layers = layers - moe;
  } else if (a == "GptOssForCausalLM") {
    experts = get(c, "num_local_experts", source);
    moe_inter = inter;
  } else if (a == "MixtralForCausalLM") {
    experts = get(c, "num_local_experts", source);
    moe_inter = inter;
  } else {
    dense_layers = layers;  // dense Llama / Qwen3
  }
  s.experts = experts;
  s.experts_per_token = experts > 0 ? top_k : 0;
  s.moe_layers = experts > 0 ? layers - dense_layers : 0;
  s.dense_ffn_params = dense_layers * 3 * h * inter;
  s.expert_params = 3 * h * moe_inter;
  s.shared_expert_params = s.moe_layers * 3 * h * shared_inter;
  s.router_params = s.moe_layers * experts * h;
  // Qwen3-Next scales its shared expert by sigmoid(gate . x).
  if (a == "Qwen3NextForCausalLM" && shared_inter > 0) s.shared_expert_params += s.moe_layers * h;
  if (a == "GptOssForCausalLM") {
    // Biases on every expert product and the router, a sink logit per head.
    s.expert_params += 2 * moe_inter + h;
    s.router_params += s.moe_layers * experts;
    s.attention_params += layers * heads;
    s.mxfp4_experts = c.contains("quantization_config") && c["quantization_config"].is_object() &&
                      c["quantization_config"].value("quant_method", std::string()) == "mxfp4";
  }
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const auto& t : c["layer_types"])
      s.sliding_layers += t.is_string() && t.get<std::string>() == "sliding_attention" ? 1 : 0;
  }
  s.max_positions = config_position_limit(c);
  return s;
}

}  // namespace tandem::plan
