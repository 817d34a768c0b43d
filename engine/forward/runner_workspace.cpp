#include "engine/forward/runner_workspace.h"

#include <algorithm>
#include <functional>

namespace tandem::forward {
void ModelRunner::Workspace::for_each_buffer(const model::ModelSpec& spec,
                                             const model::ModelWeights& w, std::int64_t tokens,
                                             std::int64_t logit_rows,
                                             const std::function<void(Member, std::int64_t)>& add) {
  using W = Workspace;
  const std::int64_t h = spec.hidden_size;
  const std::int64_t n = tokens;
  std::int64_t inner = 0;  // the widest dense FFN (dense layers, shared experts)
  for (const model::LayerWeights& l : w.layers) {
    if (!l.moe) inner = std::max(inner, l.dense.gate.rows);
    if (l.moe && l.experts.shared) inner = std::max(inner, l.experts.shared->gate.rows);
  }
  const std::int64_t heads = spec.num_heads;
  const std::int64_t head_width =
      std::max(spec.qk_head_dim(), spec.mla ? spec.v_head_dim : spec.head_dim);
  add(&W::ids, n);  // int32, as wide as a float
  for (auto m : {&W::x, &W::xn, &W::branch, &W::ffn_out}) add(m, n * h);
  add(&W::q, n * heads * spec.qk_head_dim());
  add(&W::attended,
      n * std::max(heads * head_width, spec.linear_value_heads * spec.linear_value_dim));
  if (spec.mla) {
    add(&W::qa, n * spec.q_lora_rank);
    add(&W::kv, n * (spec.kv_lora_rank + spec.qk_rope_head_dim));
  } else {
    add(&W::k_buf, n * spec.num_kv_heads * spec.head_dim);
    add(&W::v, n * spec.num_kv_heads * spec.head_dim);
  }
  add(&W::gate, n * inner);
  add(&W::up, n * inner);
  if (spec.attention_output_gate) add(&W::q_gate, n * heads * spec.head_dim);
  if (spec.has_linear_layers()) {
    const std::int64_t value_width = spec.linear_value_heads * spec.linear_value_dim;
    add(&W::qkvz, n * (spec.linear_conv_channels() + value_width));
    add(&W::ba, n * 2 * spec.linear_value_heads);
    // The DeltaNet's output goes into `attended`, as wide as the widest.
  }
  if (spec.shared_expert_gate) add(&W::shared_gate, n);
  if (spec.num_experts > 0) {
    add(&W::router_logits, n * spec.num_experts);
    add(&W::route_ids, n * spec.experts_per_token);
    add(&W::route_weights, n * spec.experts_per_token);
    add(&W::cpu_out, n * h);
    add(&W::deferred_out, n * h);
  }
  add(&W::head_in, logit_rows * h);
  add(&W::head_out, logit_rows * spec.vocab_size);
}

std::uint64_t ModelRunner::Workspace::device_bytes(const model::ModelSpec& spec,
                                                   const model::ModelWeights& w,
                                                   std::int64_t tokens, std::int64_t logit_rows) {
  std::uint64_t total = 0;
  for_each_buffer(spec, w, tokens, logit_rows, [&](auto, std::int64_t floats) {
    total += static_cast<std::uint64_t>(std::max<std::int64_t>(0, floats)) * 4;
  });
  return total;
}

void ModelRunner::Workspace::allocate(backend::Backend& device, const model::ModelSpec& spec,
                                      const model::ModelWeights& w, std::int64_t n,
                                      std::int64_t rows) {
  for_each_buffer(spec, w, tokens, logit_rows, [&](auto member, std::int64_t) {
    (this->*member).reset();  // the old buffers go first, so the budget has room for the new
  });
  for_each_buffer(spec, w, n, rows, [&](auto member, std::int64_t floats) {
    if (floats > 0) this->*member = device.allocate(static_cast<std::size_t>(floats) * 4);
  });
  tokens = n;
  logit_rows = rows;
  k = spec.experts_per_token;
  const auto layers = static_cast<std::size_t>(spec.num_layers);
  host_ids.assign(layers * static_cast<std::size_t>(n * k), 0);
  host_weights.assign(host_ids.size(), 0.0f);
  const auto hidden = static_cast<std::size_t>(n * spec.hidden_size);
  for (auto& b : host_x) b.assign(spec.num_experts > 0 ? hidden : 0, 0.0f);
  host_cpu_out.assign(spec.num_experts > 0 ? hidden : 0, 0.0f);
  host_deferred_out.assign(host_cpu_out.size(), 0.0f);
}

}  // namespace tandem::forward
