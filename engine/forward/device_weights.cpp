#include "engine/forward/device_weights.h"

#include <algorithm>
#include <stdexcept>

namespace tandem::forward {
namespace {

std::unique_ptr<backend::DeviceBuffer> place_vector(backend::Backend& device,
                                                    const std::vector<float>& host) {
  if (host.empty()) return nullptr;
  auto b = device.allocate(host.size() * sizeof(float));
  device.upload(backend::Queue::Compute, b->as<void>(), host.data(), host.size() * sizeof(float));
  return b;
}

// `name`: what a trace calls its products (a literal).
std::unique_ptr<backend::DeviceMatrix> place(backend::Backend& device,
                                             const kernels::WeightMatrix& host, const char* name) {
  if (host.data == nullptr) return nullptr;
  std::unique_ptr<backend::DeviceMatrix> m = device.place_matrix(host, backend::Queue::Compute);
  m->set_name(name);
  return m;
}

DeviceFeedForward place_ffn(backend::Backend& device, const model::FeedForwardWeights& f,
                            bool shared) {
  // Dense FFNs and shared experts run through the backend's SiLU product; no family has a
  // biased or clamped one (gpt-oss's experts are all routed).
  if (f.glu.kind != kernels::Glu::Kind::Silu || !f.gate_bias.empty() || !f.down_bias.empty())
    throw std::invalid_argument("a dense FFN with biases or a clamped SwiGLU is not supported");
  if (shared) {
    return {place(device, f.gate, "matmul: shared expert: gate"),
            place(device, f.up, "matmul: shared expert: up"),
            place(device, f.down, "matmul: shared expert: down")};
  }
  return {place(device, f.gate, "matmul: dense FFN: gate"),
          place(device, f.up, "matmul: dense FFN: up"),
          place(device, f.down, "matmul: dense FFN: down")};
}

// Every matrix and vector place_weights places, for counting and placing alike.
template <class MatrixFn, class VectorFn>
void for_each_placed(const model::ModelWeights& w, MatrixFn&& matrix, VectorFn&& vector) {
  matrix(w.embedding);
  matrix(w.output);
  vector(w.final_norm);
  for (const model::LayerWeights& l : w.layers) {
    vector(l.attention_norm);
    vector(l.ffn_norm);
    const model::AttentionWeights& a = l.attention;
    for (const kernels::WeightMatrix* m :
         {&a.q, &a.q_gate, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.k_b, &a.v_b})
      matrix(*m);
    const model::LinearAttentionWeights& la = l.linear_attention;
    for (const kernels::WeightMatrix* m : {&la.in_qkvz, &la.in_ba, &la.out}) matrix(*m);
    for (const std::vector<float>* v : {&la.conv, &la.a_log, &la.dt_bias, &la.norm}) vector(*v);
    for (const std::vector<float>* v : {&a.q_norm, &a.k_norm, &a.q_a_norm, &a.kv_a_norm, &a.q_bias,
                                        &a.k_bias, &a.v_bias, &a.o_bias, &a.sinks})
      vector(*v);
    const auto ffn = [&](const model::FeedForwardWeights& f) {
      matrix(f.gate);
      matrix(f.up);
      matrix(f.down);
    };
    if (l.moe) {
      matrix(l.experts.router);
      vector(l.experts.score_bias);
      vector(l.experts.router_bias);
      matrix(l.experts.shared_gate);
      if (l.experts.shared) ffn(*l.experts.shared);
    } else {
      ffn(l.dense);
    }
  }
}

}  // namespace

std::vector<float> join_latent_projections(const model::AttentionWeights& a, std::int64_t heads,
                                           std::int64_t nope, std::int64_t v, std::int64_t latent) {
  std::vector<float> out(static_cast<std::size_t>(heads * (nope + v) * latent));
  std::vector<float> row(static_cast<std::size_t>(std::max(nope, latent)));
  for (std::int64_t h = 0; h < heads; ++h) {
    float* head = out.data() + h * (nope + v) * latent;
    for (std::int64_t j = 0; j < latent; ++j) {
      a.k_b.row_f32(h * latent + j, row.data());
      for (std::int64_t i = 0; i < nope; ++i)
        head[i * latent + j] = row[static_cast<std::size_t>(i)];
    }
    for (std::int64_t i = 0; i < v; ++i) a.v_b.row_f32(h * v + i, head + (nope + i) * latent);
  }
  return out;
}

std::uint64_t device_weight_bytes(const backend::Backend& device,
                                  const model::ModelWeights& weights) {
  std::uint64_t total = 0;
  for_each_placed(
      weights,
      [&](const kernels::WeightMatrix& m) {
        if (m.data != nullptr) total += device.matrix_bytes(m);
      },
      [&](const std::vector<float>& v) {
        if (device.memory_budget() > 0) total += v.size() * sizeof(float);
      });
  return total;
}

DeviceWeights place_weights(backend::Backend& device, const model::ModelSpec& spec,
                            const model::ModelWeights& w) {
  DeviceWeights d;
  d.embedding = place(device, w.embedding, "matmul: embedding");
  d.output = place(device, w.output, "matmul: output head");
  d.final_norm = place_vector(device, w.final_norm);
  d.rope = device.make_rope(spec.rope, spec.rope_dim());
  for (const model::LayerWeights& l : w.layers) {
    DeviceLayer layer;
    layer.attention_norm = place_vector(device, l.attention_norm);
    layer.ffn_norm = place_vector(device, l.ffn_norm);
    const model::AttentionWeights& a = l.attention;
    DeviceAttention& da = layer.attention;
    da.q = place(device, a.q, "matmul: q");
    da.q_gate = place(device, a.q_gate, "matmul: q gate");
    layer.linear = l.linear;
    const model::LinearAttentionWeights& la = l.linear_attention;
    DeviceLinearAttention& dla = layer.linear_attention;
    dla.in_qkvz = place(device, la.in_qkvz, "matmul: linear qkvz");
    dla.in_ba = place(device, la.in_ba, "matmul: linear ba");
    dla.out = place(device, la.out, "matmul: linear out");
    dla.conv = place_vector(device, la.conv);
    dla.a_log = place_vector(device, la.a_log);
    dla.dt_bias = place_vector(device, la.dt_bias);
    dla.norm = place_vector(device, la.norm);
    da.k = place(device, a.k, "matmul: k");
    da.v = place(device, a.v, "matmul: v");
    da.o = place(device, a.o, "matmul: o");
    da.q_norm = place_vector(device, a.q_norm);
    da.k_norm = place_vector(device, a.k_norm);
    da.q_bias = place_vector(device, a.q_bias);
    da.k_bias = place_vector(device, a.k_bias);
    da.v_bias = place_vector(device, a.v_bias);
    da.o_bias = place_vector(device, a.o_bias);
    da.sinks = place_vector(device, a.sinks);
    da.q_a = place(device, a.q_a, "matmul: q_a");
    da.q_b = place(device, a.q_b, "matmul: q_b");
    da.kv_a = place(device, a.kv_a, "matmul: kv_a");
    if (a.k_b.data != nullptr && !device.reads_split_latent_projections()) {
      const std::int64_t nope = spec.qk_nope_head_dim, vd = spec.v_head_dim;
      d.joined_kv_b.push_back(
          join_latent_projections(a, spec.num_heads, nope, vd, spec.kv_lora_rank));
      kernels::WeightMatrix joined;
      joined.dtype = kernels::DType::F32;
      joined.data = d.joined_kv_b.back().data();
      joined.rows = spec.num_heads * (nope + vd);
      joined.cols = spec.kv_lora_rank;
      da.kv_b = place(device, joined, "matmul: kv_b");
    } else {
      da.kv_b = place(device, a.kv_b, "matmul: kv_b");
      da.k_b = place(device, a.k_b, "matmul: k_b");
      da.v_b = place(device, a.v_b, "matmul: v_b");
    }
    da.q_a_norm = place_vector(device, a.q_a_norm);
    da.kv_a_norm = place_vector(device, a.kv_a_norm);
    layer.moe = l.moe;
    if (l.moe) {
      layer.router = place(device, l.experts.router, "matmul: router");
      layer.score_bias = place_vector(device, l.experts.score_bias);
      layer.router_bias = place_vector(device, l.experts.router_bias);
      layer.shared_gate =
          place(device, l.experts.shared_gate, "matmul: shared expert's sigmoid gate");
      if (l.experts.shared)
        layer.shared =
            std::make_unique<DeviceFeedForward>(place_ffn(device, *l.experts.shared, true));
    } else {
      layer.dense = place_ffn(device, l.dense, false);
    }
    d.layers.push_back(std::move(layer));
  }
  return d;
}

}  // namespace tandem::forward
