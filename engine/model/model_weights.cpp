#include "engine/model/model_weights.h"

#include <cstring>
#include <string>

#include "engine/model/model_error.h"

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

// gpt-oss keeps a layer's experts in three fused tensors: gate_up_proj with the gate and up
// rows interleaved (gate i is row 2i, up i row 2i + 1), and down_proj; as MXFP4 (_blocks and
// _scales, [experts, out, in / 32, 16] codes and [experts, out, in / 32] exponents, as openai
// ships them) or plain ([experts, in, out], as transformers saves a dequantised model). Each
// expert's gate, up and down become derived tensors in the usual [out, in] layout, named as
// the other families' experts are, so the converter packs them like any other; a converted
// folder already holds those names.
void derive_gpt_oss_experts(Checkpoint& c, const std::string& mp, std::int64_t experts,
                            std::int64_t h, std::int64_t inner) {
  const std::string fused = mp + "experts.gate_up_proj";
  const std::string down = mp + "experts.down_proj";
  const auto name = [&](std::int64_t e, const char* part) {
    return mp + "experts." + std::to_string(e) + "." + part + ".weight";
  };
  if (c.find(fused + "_blocks") != nullptr) {
    if (h % 32 != 0 || inner % 32 != 0) {
      throw ModelError(c.folder() +
                       ": MXFP4 experts need hidden_size and intermediate_size in "
                       "multiples of 32.");
    }
    const std::int64_t hb = h / 32, ib = inner / 32;
    const TensorRef gu_codes = c.require(fused + "_blocks", {experts, 2 * inner, hb, 16});
    const TensorRef gu_scales = c.require(fused + "_scales", {experts, 2 * inner, hb});
    c.require(down + "_blocks", {experts, h, ib, 16});
    c.require(down + "_scales", {experts, h, ib});
    for (const TensorRef* t : {&gu_codes, &gu_scales}) {
      if (t->info->dtype != kernels::DType::U8)
        throw ModelError(c.folder() + ": MXFP4 blocks and scales must be stored as U8.");
    }
    const auto* codes = static_cast<const std::uint8_t*>(gu_codes.data());
    const auto* scales = static_cast<const std::uint8_t*>(gu_scales.data());
    const std::int64_t row_bytes = h / 2;
    for (std::int64_t e = 0; e < experts; ++e) {
      for (int part = 0; part < 2; ++part) {  // gate: even rows, up: odd rows
        const std::string n = name(e, part == 0 ? "gate_proj" : "up_proj");
        auto* out = static_cast<std::uint8_t*>(
            c.derive(n, kernels::DType::F4E2M1, {inner, h}, fused + "_blocks"));
        auto* out_scales = static_cast<std::uint8_t*>(
            c.derive(n + "_scales", kernels::DType::U8, {inner, hb}, fused + "_scales"));
        for (std::int64_t i = 0; i < inner; ++i) {
          const std::int64_t row = e * 2 * inner + 2 * i + part;
          std::memcpy(out + i * row_bytes, codes + row * row_bytes,
                      static_cast<std::size_t>(row_bytes));
          std::memcpy(out_scales + i * hb, scales + row * hb, static_cast<std::size_t>(hb));
        }
      }
      const std::string n = name(e, "down_proj");
      c.derive_view(n, kernels::DType::F4E2M1, {h, inner}, down + "_blocks",
                    static_cast<std::uint64_t>(e * h * inner / 2));
      c.derive_view(n + "_scales", kernels::DType::U8, {h, ib}, down + "_scales",
                    static_cast<std::uint64_t>(e * h * ib));
    }
    return;
  }
  if (c.find(fused) != nullptr) {
    const TensorRef gu = c.require(fused, {experts, h, 2 * inner});
    const TensorRef dn = c.require(down, {experts, inner, h});
    const kernels::DType t = gu.info->dtype;
    const std::size_t size = kernels::dtype_size(t);
    if (t != kernels::DType::F32 && t != kernels::DType::F16 && t != kernels::DType::BF16) {
      throw ModelError(gu.file_path() + ": tensor " + fused + " is stored as " +
                       std::string(kernels::dtype_name(t)) +
                       "; Tandem reads F32, F16 or BF16 here.");
    }
    const auto* src = static_cast<const char*>(gu.data());
    const auto* dsrc = static_cast<const char*>(dn.data());
    for (std::int64_t e = 0; e < experts; ++e) {
      for (int part = 0; part < 2; ++part) {
        auto* out = static_cast<char*>(
            c.derive(name(e, part == 0 ? "gate_proj" : "up_proj"), t, {inner, h}, fused));
        for (std::int64_t i = 0; i < inner; ++i)
          for (std::int64_t k = 0; k < h; ++k)
            std::memcpy(out + (i * h + k) * size,
                        src + ((e * h + k) * 2 * inner + 2 * i + part) * size, size);
      }
      auto* out =
          static_cast<char*>(c.derive(name(e, "down_proj"), dn.info->dtype, {h, inner}, down));
      const std::size_t dsize = kernels::dtype_size(dn.info->dtype);
      for (std::int64_t r = 0; r < h; ++r)
        for (std::int64_t i = 0; i < inner; ++i)
          std::memcpy(out + (r * inner + i) * dsize, dsrc + ((e * inner + i) * h + r) * dsize,
                      dsize);
    }
  }
  // Neither: a converted folder, whose packed experts bind by name.
}

// A derived matrix of `source`'s rows in the order `rows` lists them (Qwen3-Next's fused
// projections, regrouped so that one product gives each part contiguously). An FP8 source
// keeps its format when every block of derived rows comes from one block of source rows
// (the parts of the real checkpoints are whole 128-row blocks): its scales are regrouped
// alike, under the derived name.
void derive_rows(Checkpoint& c, const std::string& source, const std::string& name,
                 const std::vector<std::int64_t>& rows, std::int64_t total_rows,
                 std::int64_t cols) {
  const TensorRef ref = c.require(source, {total_rows, cols});
  const kernels::DType t = ref.info->dtype;
  const bool fp8 = t == kernels::DType::F8E4M3;
  if (t != kernels::DType::F32 && t != kernels::DType::F16 && t != kernels::DType::BF16 && !fp8) {
    throw ModelError(ref.file_path() + ": tensor " + source + " is stored as " +
                     std::string(kernels::dtype_name(t)) +
                     "; Tandem reads Qwen3-Next's fused projections in F32, F16, BF16 or FP8 "
                     "only, so use the BF16 or FP8 release.");
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  if (fp8) {
    const Fp8Scales& f = c.fp8_scales();
    const std::string scale = source + f.suffix;
    const TensorRef* s = c.find(scale);
    if (s == nullptr) {
      throw ModelError(ref.file_path() + ": tensor " + source + " is FP8 but its scales (" + scale +
                       ") are missing; the checkpoint is incomplete.");
    }
    const std::int64_t block = f.block_rows;
    const std::int64_t blocks_out = (n + block - 1) / block;
    std::vector<std::int64_t> from(static_cast<std::size_t>(blocks_out));
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t b = rows[static_cast<std::size_t>(i)] / block;
      if (i % block == 0) from[static_cast<std::size_t>(i / block)] = b;
      if (from[static_cast<std::size_t>(i / block)] != b) {
        throw ModelError(ref.file_path() + ": tensor " + source + " is FP8 in blocks of " +
                         std::to_string(block) +
                         " rows, which do not line up with its parts (query, key, value, "
                         "gate); Tandem cannot regroup it without changing its scales. Use "
                         "the BF16 release.");
      }
    }
    const auto& shape = s->info->shape;
    const std::uint64_t scale_row =
        kernels::dtype_bytes(s->info->dtype, shape.size() > 1 ? shape[1] : 1);
    auto* out = static_cast<char*>(c.derive(name + f.suffix, s->info->dtype,
                                            shape.size() > 1
                                                ? std::vector<std::int64_t>{blocks_out, shape[1]}
                                                : std::vector<std::int64_t>{blocks_out},
                                            scale));
    const auto* in = static_cast<const char*>(s->data());
    for (std::size_t b = 0; b < from.size(); ++b)
      std::memcpy(out + b * scale_row, in + static_cast<std::uint64_t>(from[b]) * scale_row,
                  scale_row);
  }
  const std::uint64_t row_bytes = kernels::dtype_bytes(t, cols);
  auto* out = static_cast<char*>(c.derive(name, t, {n, cols}, source));
  const auto* in = static_cast<const char*>(ref.data());
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out + i * row_bytes, in + static_cast<std::uint64_t>(rows[i]) * row_bytes,
                row_bytes);
}

// Binds a matrix derived from `source` by derive_rows, or, in a converted folder (which
// holds the derived matrix packed and no longer `source`), the packed one by its name.
WeightMatrix regrouped(Checkpoint& c, const std::string& source, const std::string& name,
                       const std::vector<std::int64_t>& rows, std::int64_t total_rows,
                       std::int64_t cols) {
  if (c.find(source) != nullptr) derive_rows(c, source, name, rows, total_rows, cols);
  return c.matrix(name, static_cast<std::int64_t>(rows.size()), cols);
}

void plus_one(std::vector<float>& w) {
  for (float& x : w) x += 1.0f;
}

// Qwen3-Next's gated DeltaNet layer.
LinearAttentionWeights linear_attention(Checkpoint& c, const ModelSpec& s, const std::string& p) {
  const std::int64_t h = s.hidden_size, nk = s.linear_key_heads, nv = s.linear_value_heads;
  const std::int64_t dk = s.linear_key_dim, dv = s.linear_value_dim, r = nv / nk;
  // in_proj_qkvz holds, per key head g, [q (dk) | k (dk) | v (r dv) | z (r dv)].
  const std::int64_t group = 2 * dk + 2 * r * dv;
  std::vector<std::int64_t> qkvz;
  for (int part = 0; part < 4; ++part) {
    const std::int64_t offset = part == 0   ? 0
                                : part == 1 ? dk
                                : part == 2 ? 2 * dk
                                            : 2 * dk + r * dv;
    const std::int64_t width = part < 2 ? dk : r * dv;
    for (std::int64_t g = 0; g < nk; ++g)
      for (std::int64_t i = 0; i < width; ++i) qkvz.push_back(g * group + offset + i);
  }
  // in_proj_ba holds, per key head, [b (r) | a (r)].
  std::vector<std::int64_t> ba;
  for (int part = 0; part < 2; ++part)
    for (std::int64_t g = 0; g < nk; ++g)
      for (std::int64_t i = 0; i < r; ++i) ba.push_back(g * 2 * r + part * r + i);
  const std::string lp = p + "linear_attn.";
  LinearAttentionWeights w;
  w.in_qkvz = regrouped(c, lp + "in_proj_qkvz.weight", lp + "in_proj_qkvz.regrouped.weight", qkvz,
                        nk * group, h);
  w.in_ba =
      regrouped(c, lp + "in_proj_ba.weight", lp + "in_proj_ba.regrouped.weight", ba, 2 * nv, h);
  w.out = c.matrix(lp + "out_proj.weight", h, nv * dv);
  w.conv = c.vector_f32(lp + "conv1d.weight", {s.linear_conv_channels(), 1, s.linear_conv_kernel});
  w.a_log = c.vector_f32(lp + "A_log", {nv});
  w.dt_bias = c.vector_f32(lp + "dt_bias", {nv});
  w.norm = c.vector_f32(lp + "norm.weight", {dv});
  return w;
}

// The per-expert halves of gpt-oss's interleaved gate/up bias.
void split_gate_up_bias(const std::vector<float>& fused, std::int64_t e, std::int64_t inner,
                        FeedForwardWeights& f) {
  f.gate_bias.resize(static_cast<std::size_t>(inner));
  f.up_bias.resize(static_cast<std::size_t>(inner));
  for (std::int64_t i = 0; i < inner; ++i) {
    f.gate_bias[static_cast<std::size_t>(i)] = fused[static_cast<std::size_t>((e * inner + i) * 2)];
    f.up_bias[static_cast<std::size_t>(i)] =
        fused[static_cast<std::size_t>((e * inner + i) * 2 + 1)];
  }
}

}  // namespace

ModelWeights bind_weights(const ModelSpec& s, Checkpoint& c) {
  ModelWeights w;
  const std::int64_t h = s.hidden_size;
  w.embedding = c.matrix("model.embed_tokens.weight", s.vocab_size, h);
  w.final_norm = c.vector_f32("model.norm.weight", {h});
  if (s.norm_plus_one) plus_one(w.final_norm);
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
    layer.linear = !s.layer_is_linear.empty() && s.layer_is_linear[static_cast<std::size_t>(l)];
    if (layer.linear) {
      layer.linear_attention = linear_attention(c, s, p);
    } else if (s.mla) {
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
      if (c.find(ap + "kv_b_proj.weight") == nullptr && c.find(ap + "k_b_proj.weight") != nullptr) {
        a.k_b = c.matrix(ap + "k_b_proj.weight", s.num_heads * s.kv_lora_rank, s.qk_nope_head_dim);
        a.v_b = c.matrix(ap + "v_b_proj.weight", s.num_heads * s.v_head_dim, s.kv_lora_rank);
      } else {
        a.kv_b = c.matrix(ap + "kv_b_proj.weight",
                          s.num_heads * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank);
      }
      a.o = c.matrix(ap + "o_proj.weight", h, s.num_heads * s.v_head_dim);
    } else if (s.attention_output_gate) {
      // Qwen3-Next's q_proj gives, per head, [query (head_dim) | gate (head_dim)].
      std::vector<std::int64_t> query, gate;
      for (std::int64_t head = 0; head < s.num_heads; ++head) {
        for (std::int64_t i = 0; i < s.head_dim; ++i) {
          query.push_back(head * 2 * s.head_dim + i);
          gate.push_back(head * 2 * s.head_dim + s.head_dim + i);
        }
      }
      const std::int64_t rows = 2 * s.num_heads * s.head_dim;
      const std::string q = ap + "q_proj.weight";
      if (c.find(q) != nullptr) {
        derive_rows(c, q, ap + "q_proj.query.weight", query, rows, h);
        derive_rows(c, q, ap + "q_proj.gate.weight", gate, rows, h);
      }
      a.q = c.matrix(ap + "q_proj.query.weight", s.num_heads * s.head_dim, h);
      a.q_gate = c.matrix(ap + "q_proj.gate.weight", s.num_heads * s.head_dim, h);
      a.k = c.matrix(ap + "k_proj.weight", s.num_kv_heads * s.head_dim, h);
      a.v = c.matrix(ap + "v_proj.weight", s.num_kv_heads * s.head_dim, h);
      a.o = c.matrix(ap + "o_proj.weight", h, s.num_heads * s.head_dim);
      a.q_norm = c.vector_f32(ap + "q_norm.weight", {s.head_dim});
      a.k_norm = c.vector_f32(ap + "k_norm.weight", {s.head_dim});
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
      if (s.output_bias) a.o_bias = c.vector_f32(ap + "o_proj.bias", {h});
      if (s.attention_sinks) a.sinks = c.vector_f32(ap + "sinks", {s.num_heads});
    }

    layer.moe = s.layer_is_moe[static_cast<std::size_t>(l)];
    if (!layer.moe) {
      layer.dense = swiglu(c, p + "mlp.", h, s.intermediate_size);
    } else if (s.family == Family::GptOss) {
      const std::string mp = p + "mlp.";
      const std::int64_t inner = s.moe_intermediate_size;
      layer.experts.router = c.matrix(mp + "router.weight", s.num_experts, h);
      layer.experts.router_bias = c.vector_f32(mp + "router.bias", {s.num_experts});
      derive_gpt_oss_experts(c, mp, s.num_experts, h, inner);
      const std::vector<float> gate_up_bias =
          c.vector_f32(mp + "experts.gate_up_proj_bias", {s.num_experts, 2 * inner});
      const std::vector<float> down_bias =
          c.vector_f32(mp + "experts.down_proj_bias", {s.num_experts, h});
      for (std::int64_t e = 0; e < s.num_experts; ++e) {
        FeedForwardWeights f = swiglu(c, mp + "experts." + std::to_string(e) + ".", h, inner);
        split_gate_up_bias(gate_up_bias, e, inner, f);
        f.down_bias.assign(down_bias.begin() + e * h, down_bias.begin() + (e + 1) * h);
        layer.experts.experts.push_back(std::move(f));
      }
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
      if (s.shared_expert_gate) {
        // Qwen3-Next: one shared expert ("shared_expert"), scaled by sigmoid(gate · x).
        layer.experts.shared =
            swiglu(c, mp + "shared_expert.", h, s.shared_expert_intermediate_size);
        layer.experts.shared_gate = c.matrix(mp + "shared_expert_gate.weight", 1, h);
      } else if (s.shared_expert_intermediate_size > 0) {
        layer.experts.shared =
            swiglu(c, mp + "shared_experts.", h, s.shared_expert_intermediate_size);
      }
    }
    if (s.norm_plus_one) {
      plus_one(layer.attention_norm);
      plus_one(layer.ffn_norm);
      plus_one(a.q_norm);
      plus_one(a.k_norm);
    }
    if (s.swiglu_limit > 0) {
      const kernels::Glu glu{kernels::Glu::Kind::ClampedSwiglu, static_cast<float>(s.swiglu_alpha),
                             static_cast<float>(s.swiglu_limit)};
      layer.dense.glu = glu;
      for (FeedForwardWeights& f : layer.experts.experts) f.glu = glu;
      if (layer.experts.shared) layer.experts.shared->glu = glu;
    }
    w.layers.push_back(std::move(layer));
  }
  return w;
}

}  // namespace tandem::model
