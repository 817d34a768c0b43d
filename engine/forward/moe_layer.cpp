// ModelRunner's mixture-of-experts layer: the router on the device the forward pass runs on,
// then the routed (token, expert) pairs split by where each expert is. The accelerator's
// resident experts run as one grouped product on its queue while the host's threads compute
// the rest, and the partial outputs are summed into the residual. With deferral, each token's
// lowest-weighted CPU experts are computed while the accelerator runs the next layer, and
// added at that layer's end. Prompts at the layerwise threshold run the experts on the
// accelerator, each layer's others staged on the copy queue while the layer before computes.
#include <algorithm>
#include <chrono>

#include "engine/forward/model_runner.h"
#include "engine/forward/runner_workspace.h"
#include "engine/measure/trace.h"

namespace tandem::forward {
namespace {

using backend::DevicePtr;
using backend::Part;
using backend::Queue;

}  // namespace

void ModelRunner::moe_layer(std::int64_t layer, std::int64_t moe_index, std::int64_t n,
                            bool layerwise, bool last_layer) {
  Workspace& w = *work_;
  const DeviceLayer& dl = weights_.layers[static_cast<std::size_t>(layer)];
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t experts = spec_.num_experts;
  const std::int64_t k = spec_.experts_per_token;
  std::int32_t* host_ids = w.layer_ids(layer);
  float* host_weights = w.layer_weights(layer);

  device_->set_part(Part::Dense);
  device_->matmul(cf(w.xn), n, *dl.router, f(w.router_logits), experts);
  if (dl.router_bias) device_->add_bias(f(w.router_logits), cf(dl.router_bias), n, experts);
  device_->route(cf(w.router_logits), n, backend::routing_params(spec_), cf(dl.score_bias),
                 w.route_ids->as<std::int32_t>(), f(w.route_weights));
  // The host's copy of the routing: for the CPU's pairs now, for the live heat map at the end.
  device_->download(Queue::Compute, host_ids, w.route_ids->as<const void>(),
                    static_cast<std::size_t>(n * k) * sizeof(std::int32_t));
  device_->download(Queue::Compute, host_weights, w.route_weights->as<const void>(),
                    static_cast<std::size_t>(n * k) * sizeof(float));
  const auto route_ids = w.route_ids->as<const std::int32_t>();
  const auto route_weights = cf(w.route_weights);

  const auto add_shared = [&](bool branch_used) {
    if (!dl.shared) return branch_used;
    device_->set_part(Part::Dense);
    const DevicePtr<float> out = branch_used ? f(w.ffn_out) : f(w.branch);
    feed_forward(*dl.shared, cf(w.xn), n, out);
    if (dl.shared_gate) {  // Qwen3-Next: scaled by sigmoid(gate · x), one value per token
      device_->matmul(cf(w.xn), n, *dl.shared_gate, f(w.shared_gate), 1);
      device_->sigmoid_gate(out, cf(w.shared_gate), n, h, 1);
    }
    if (branch_used) device_->add_scaled(f(w.branch), cf(w.ffn_out), 1.0f, n * h);
    return true;
  };

  // The experts this layer computes on the device: the resident ones, and with layerwise
  // prefill also the others staged for it. What neither holds (experts in flight, or more
  // than the staging holds) the CPU computes.
  const int stage = static_cast<int>(moe_index % 2);
  std::vector<const backend::DeviceExpert*>& table = w.table;
  if (residency_) {
    table = residency_->table(layer);
  } else {
    table.assign(static_cast<std::size_t>(experts), nullptr);
  }
  if (layerwise) {
    for (std::size_t e = 0; e < table.size(); ++e) {
      if (table[e] == nullptr) table[e] = staged_table_[stage][e];
    }
  }
  const auto on_device = static_cast<std::int64_t>(
      std::count_if(table.begin(), table.end(), [](const auto* e) { return e != nullptr; }));
  const bool cpu_work = on_device < experts;
  const bool defer =
      accelerator_ && !layerwise && hybrid_.max_deferred_per_token > 0 && !last_layer;
  // The CPU reads the normed activations in place where it can (the CPU backend), unless a
  // deferral must keep them past the next layer's norm.
  const int buffer = static_cast<int>(moe_index % 2);
  const float* host_x = nullptr;
  if (cpu_work) {
    host_x = defer ? nullptr : backend::host_address(*device_, cf(w.xn));
    if (host_x == nullptr) {
      float* copy = w.host_x[buffer].data();
      device_->download(Queue::Compute, copy, cf(w.xn),
                        static_cast<std::size_t>(n * h) * sizeof(float));
      host_x = copy;
    }
  }
  const backend::EventPtr routed = device_->record(Queue::Compute);
  bool branch_used = false;
  if (on_device > 0) {
    if (layerwise) device_->wait(Queue::Compute, staged_[stage]);
    device_->set_part(Part::Experts);
    device_->zero(f(w.branch), n * h);
    device_->grouped_experts(cf(w.xn), n, route_ids, route_weights, k, table, f(w.branch));
    branch_used = true;
  }
  if (layerwise) {
    staging_free_[stage] = device_->record(Queue::Compute);
    start_staging(moe_index + 2);
  }
  branch_used = add_shared(branch_used);

  // The previous layer's deferred experts, while the accelerator runs this one.
  const bool deferred_ready = compute_deferred(n);

  if (cpu_work) {
    const auto wait = [&](const backend::EventPtr& event) {
      const std::uint64_t t0 = now_ns();
      event->wait();
      waiting_ns_ += now_ns() - t0;
    };
    // The serial order (for measuring the overlap): the accelerator finishes its experts
    // before the CPU starts on its own.
    wait(hybrid_.overlap || !accelerator_ ? routed : device_->record(Queue::Compute));
    std::vector<backend::ExpertPair>& immediate = w.pairs;
    immediate.clear();
    if (defer) {
      deferred_->pairs.clear();
      deferred_->layer = layer;
      deferred_->buffer = buffer;
    }
    std::vector<backend::ExpertPair>& token_pairs = w.token_pairs;
    token_pairs.resize(static_cast<std::size_t>(k));
    for (std::int64_t t = 0; t < n; ++t) {
      std::int64_t count = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t e = host_ids[t * k + j];
        if (table[static_cast<std::size_t>(e)] != nullptr) continue;
        token_pairs[static_cast<std::size_t>(count++)] = {static_cast<std::int32_t>(t), e,
                                                          host_weights[t * k + j]};
      }
      std::int64_t deferred = 0;
      if (defer && count > 0) {
        // The lowest weights go last; ties keep the router's order.
        std::stable_sort(token_pairs.begin(), token_pairs.begin() + count,
                         [](const backend::ExpertPair& a, const backend::ExpertPair& b) {
                           return a.weight > b.weight;
                         });
        deferred = std::min(count, hybrid_.max_deferred_per_token);
        for (std::int64_t i = count - deferred; i < count; ++i)
          deferred_->pairs.push_back(token_pairs[static_cast<std::size_t>(i)]);
      }
      immediate.insert(immediate.end(), token_pairs.begin(),
                       token_pairs.begin() + (count - deferred));
    }
    float* out = backend::host_address(*device_, f(w.cpu_out));
    const bool in_place = out != nullptr;
    if (!in_place) out = w.host_cpu_out.data();
    std::fill_n(out, n * h, 0.0f);
    cpu_experts(layer, host_x, immediate, out);
    if (!in_place) {
      device_->upload(Queue::Compute, w.cpu_out->as<void>(), out,
                      static_cast<std::size_t>(n * h) * sizeof(float));
    }
    device_->set_part(Part::Dense);
    device_->add_scaled(f(w.x), cf(w.cpu_out), 1.0f, n * h);
  }
  device_->set_part(Part::Dense);
  if (branch_used) device_->add_scaled(f(w.x), cf(w.branch), 1.0f, n * h);
  if (deferred_ready) device_->add_scaled(f(w.x), cf(w.deferred_out), 1.0f, n * h);
}

// A dense layer after a deferring MoE layer, or the end of the stack: the deferred experts
// are computed now and added at the end of this layer.
void ModelRunner::finish_deferred(std::int64_t n) {
  if (!compute_deferred(n)) return;
  device_->set_part(Part::Dense);
  device_->add_scaled(f(work_->x), cf(work_->deferred_out), 1.0f, n * spec_.hidden_size);
}

// The pending deferred experts on the CPU, their output uploaded into deferred_out; false
// when none were pending.
bool ModelRunner::compute_deferred(std::int64_t n) {
  if (deferred_->pairs.empty()) return false;
  Workspace& w = *work_;
  const std::int64_t h = spec_.hidden_size;
  float* out = w.host_deferred_out.data();
  std::fill_n(out, n * h, 0.0f);
  cpu_experts(deferred_->layer, w.host_x[deferred_->buffer].data(), deferred_->pairs, out);
  deferred_->pairs.clear();
  device_->upload(Queue::Compute, w.deferred_out->as<void>(), out,
                  static_cast<std::size_t>(n * h) * sizeof(float));
  return true;
}

void ModelRunner::cpu_experts(std::int64_t layer, const float* x,
                              std::span<const backend::ExpertPair> pairs, float* out) {
  if (pairs.empty()) return;
  const trace::Operation traced("cpu_experts");
  const std::uint64_t t0 = now_ns();
  const model::MoeWeights& moe = model_.weights().layers[static_cast<std::size_t>(layer)].experts;
  thread_local std::vector<const model::FeedForwardWeights*> table;
  table.resize(moe.experts.size());
  for (std::size_t e = 0; e < moe.experts.size(); ++e) table[e] = &moe.experts[e];
  cpu_expert_compute_.run(cpu_threads_, table, x, pairs, out);
  cpu_expert_ns_ += now_ns() - t0;
}

// Fills staging set (moe_index % 2) with the experts of that MoE layer that are not resident,
// on the copy queue, once the compute queue is done with the set's previous layer.
void ModelRunner::start_staging(std::int64_t moe_index) {
  if (moe_index >= static_cast<std::int64_t>(moe_layers_.size())) return;
  const int b = static_cast<int>(moe_index % 2);
  const std::int64_t layer = moe_layers_[static_cast<std::size_t>(moe_index)];
  const model::MoeWeights& moe = model_.weights().layers[static_cast<std::size_t>(layer)].experts;
  if (staging_free_[b]) device_->wait(Queue::Copy, staging_free_[b]);
  std::size_t slot = 0;
  for (std::int64_t e = 0; e < spec_.num_experts; ++e) {
    auto& entry = staged_table_[b][static_cast<std::size_t>(e)];
    // Moves in flight can leave a layer more experts off the device than were sized for;
    // those few stay with the CPU.
    if (residency_->on_device(layer, e) || slot == staging_[b].size()) {
      entry = nullptr;
      continue;
    }
    backend::DeviceExpert& target = *staging_[b][slot++];
    device_->refill_expert(target, moe.experts[static_cast<std::size_t>(e)], Queue::Copy);
    entry = &target;
  }
  staged_[b] = device_->record(Queue::Copy);
}

}  // namespace tandem::forward
