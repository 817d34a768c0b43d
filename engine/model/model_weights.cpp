#include "engine/model/model_weights.h"

#include <string>

namespace tandem::model {
namespace {

FeedForwardWeights feed_forward(const Checkpoint& c, const std::string& prefix, const char* gate,
                                const char* up, const char* down, std::int64_t hidden,
                                std::int64_t inner) {
  return {c.matrix(prefix + gate + ".weight", inner, hidden),
          c.matrix(prefix + up + ".weight", inner, hidden),
          c.matrix(prefix + down + ".weight", hidden, inner)};
}

FeedForwardWeights swiglu(const Checkpoint& c, const std::string& prefix, std::int64_t hidden,
                          std::int64_t inner) {
  return feed_forward(c, prefix, "gate_proj", "up_proj", "down_proj", hidden, inner);
}

}  // namespace

ModelWeights bind_weights(const ModelSpec& s, const Checkpoint& c) {
  ModelWeights w;
  const std::int64_t h = s.hidden_size;
  w.embedding = c.matrix("model.embed_tokens.weight", s.vocab_size, h);
  w.final_norm = c.vector_f32("model.norm.weight", {h});
  if (s.tie_word_embeddings && c.find("lm_head.weight") == nullptr) {
    w.output = w.embedding;
  } else {
    w.output = c.matrix("lm_head.weight", s.vocab_size, h);
  }

  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights layer;
    layer.attention_norm = c.vector_f32(p + "input_layernorm.weight", {h});
    layer.ffn_norm = c.vector_f32(p + "post_attention_layernorm.weight", {h});
    AttentionWeights& a = layer.attention;
    const std::string ap = p + "self_attn.";
    if (s.mla) {
      const std::int64_t qk = s.qk_head_dim();
      if (s.q_lora_rank > 0) {
        a.q_a = c.matrix(ap + "q_a_proj.weight", s.q_lora_rank, h);
        a.q_a_norm = c.vector_f32(ap + "q_a_layernorm.weight", {s.q_lora_rank});
        a.q_b = c.matrix(ap + "q_b_proj.weight", s.num_heads * qk, s.q_lora_rank);
      } else {
        a.q = c.matrix(ap + "q_proj.weight", s.num_heads * qk, h);
      }
      a.kv_a = c.matrix(ap + "kv_a_proj_with_mqa.weight", s.kv_lora_rank + s.qk_rope_head_dim, h);
      a.kv_a_norm = c.vector_f32(ap + "kv_a_layernorm.weight", {s.kv_lora_rank});
      a.kv_b = c.matrix(ap + "kv_b_proj.weight", s.num_heads * (s.qk_nope_head_dim + s.v_head_dim),
                        s.kv_lora_rank);
      a.o = c.matrix(ap + "o_proj.weight", h, s.num_heads * s.v_head_dim);
    } else {
      a.q = c.matrix(ap + "q_proj.weight", s.num_heads * s.head_dim, h);
      a.k = c.matrix(ap + "k_proj.weight", s.num_kv_heads * s.head_dim, h);
      a.v = c.matrix(ap + "v_proj.weight", s.num_kv_heads * s.head_dim, h);
      a.o = c.matrix(ap + "o_proj.weight", h, s.num_heads * s.head_dim);
      if (s.qk_norm) {
        a.q_norm = c.vector_f32(ap + "q_norm.weight", {s.head_dim});
        a.k_norm = c.vector_f32(ap + "k_norm.weight", {s.head_dim});
      }
      if (s.attention_bias) {
        a.q_bias = c.vector_f32(ap + "q_proj.bias", {s.num_heads * s.head_dim});
        a.k_bias = c.vector_f32(ap + "k_proj.bias", {s.num_kv_heads * s.head_dim});
        a.v_bias = c.vector_f32(ap + "v_proj.bias", {s.num_kv_heads * s.head_dim});
      }
    }

    layer.moe = s.layer_is_moe[static_cast<std::size_t>(l)];
    if (!layer.moe) {
      layer.dense = swiglu(c, p + "mlp.", h, s.intermediate_size);
    } else if (s.family == Family::Mixtral) {
      const std::string mp = p + "block_sparse_moe.";
      layer.experts.router = c.matrix(mp + "gate.weight", s.num_experts, h);
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        layer.experts.experts.push_back(feed_forward(c, mp + "experts." + std::to_string(e) + ".",
                                                     "w1", "w3", "w2", h, s.moe_intermediate_size));
      }
    } else {
      const std::string mp = p + "mlp.";
      layer.experts.router = c.matrix(mp + "gate.weight", s.num_experts, h);
      if (s.score_correction_bias) {
        layer.experts.score_bias =
            c.vector_f32(mp + "gate.e_score_correction_bias", {s.num_experts});
      }
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        layer.experts.experts.push_back(
            swiglu(c, mp + "experts." + std::to_string(e) + ".", h, s.moe_intermediate_size));
      }
      if (s.shared_expert_intermediate_size > 0) {
        layer.experts.shared =
            swiglu(c, mp + "shared_experts.", h, s.shared_expert_intermediate_size);
      }
    }
    w.layers.push_back(std::move(layer));
  }
  return w;
}

}  // namespace tandem::model
