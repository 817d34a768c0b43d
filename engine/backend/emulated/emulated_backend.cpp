#include "engine/backend/emulated/emulated_backend.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/hw/hardware_report.h"

namespace tandem::backend {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

EmulatedBackend::EmulatedBackend(const EmulatedOptions& options, const model::ModelSpec& spec)
    : options_(options),
      memory_(std::make_shared<MemoryBudget>("the emulated accelerator", options.memory_bytes)),
      bus_(options.bus_bytes_per_s, options.bus_latency_s),
      pool_(std::max(1, options.threads)),
      threads_(pool_),
      experts_(spec),
      copy_("tandem-emu-copy"),
      compute_("tandem-emu") {}

EmulatedBackend::~EmulatedBackend() {
  try {
    synchronize();
  } catch (const std::exception&) {
    // Already reported by the queue; nothing is waiting for the results any more.
  }
}

std::string EmulatedBackend::description() const {
  return fmt::format("emulated accelerator ({}, bus {:.3g} GB/s and {:.3g} µs, {} thread{})",
                     hw::format_bytes(options_.memory_bytes), options_.bus_bytes_per_s / 1e9,
                     options_.bus_latency_s * 1e6, options_.threads,
                     options_.threads == 1 ? "" : "s");
}

void EmulatedBackend::compute(std::function<void()> op) {
  compute_.enqueue([this, op = std::move(op)] {
    const std::int64_t start = now_ns();
    op();
    busy_ns_[static_cast<std::size_t>(part_)].fetch_add(
        static_cast<std::uint64_t>(now_ns() - start), std::memory_order_relaxed);
  });
}

void EmulatedBackend::transfer(Queue q, BusModel::Direction direction, std::size_t bytes,
                               std::function<void()> copy) {
  queue(q).enqueue([this, q, direction, bytes, copy = std::move(copy)] {
    const std::int64_t start = now_ns();
    bus_.transfer(direction, bytes, copy);
    const auto spent = static_cast<std::uint64_t>(now_ns() - start);
    if (q == Queue::Compute)
      busy_ns_[static_cast<std::size_t>(Part::Bus)].fetch_add(spent, std::memory_order_relaxed);
    else
      copy_ns_.fetch_add(spent, std::memory_order_relaxed);
    bus_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  });
}

std::unique_ptr<DeviceBuffer> EmulatedBackend::allocate(std::size_t bytes) {
  MemoryReservation reservation(memory_, bytes);
  auto b = std::make_unique<HostBuffer>(bytes);
  b->reservation = std::move(reservation);
  return b;
}

std::uint64_t EmulatedBackend::matrix_bytes(const kernels::WeightMatrix& host) const {
  return host_matrix_bytes(host);
}

std::unique_ptr<DeviceMatrix> EmulatedBackend::place_matrix(const kernels::WeightMatrix& host,
                                                            Queue q) {
  MemoryReservation reservation(memory_, host_matrix_bytes(host));
  auto m = HostMatrix::storage_for(host);
  m->reservation = std::move(reservation);
  HostMatrix* target = m.get();
  transfer(q, BusModel::Direction::ToDevice, m->bytes(),
           [target, host] { target->copy_from(host); });
  return m;
}

std::uint64_t EmulatedBackend::expert_bytes(const model::FeedForwardWeights& host) const {
  return host_expert_bytes(host);
}

std::unique_ptr<DeviceExpert> EmulatedBackend::allocate_expert(
    const model::FeedForwardWeights& host) {
  MemoryReservation reservation(memory_, host_expert_bytes(host));
  auto e = HostExpert::storage_for(host);
  e->reservation = std::move(reservation);
  return e;
}

void EmulatedBackend::refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host,
                                    Queue q) {
  auto* target = &static_cast<HostExpert&>(expert);
  transfer(q, BusModel::Direction::ToDevice, expert.bytes(),
           [target, host] { target->copy_from(host); });
}

std::uint64_t EmulatedBackend::kv_cache_bytes(const model::ModelSpec& spec,
                                              std::int64_t capacity) const {
  return KvCache::bytes_for(spec, capacity);
}

std::unique_ptr<DeviceKvCache> EmulatedBackend::allocate_kv_cache(const model::ModelSpec& spec,
                                                                  std::int64_t capacity) {
  MemoryReservation reservation(memory_, KvCache::bytes_for(spec, capacity));
  auto c = std::make_unique<HostKvCache>(spec, capacity);
  c->reservation = std::move(reservation);
  return c;
}

std::unique_ptr<DeviceRope> EmulatedBackend::make_rope(const model::RopeSpec& spec,
                                                       std::int64_t dim) {
  return std::make_unique<HostRope>(spec, dim);
}

void EmulatedBackend::upload(Queue q, DevicePtr<void> device, const void* host, std::size_t bytes) {
  void* target = device.address();
  transfer(q, BusModel::Direction::ToDevice, bytes,
           [target, host, bytes] { std::memcpy(target, host, bytes); });
}

void EmulatedBackend::download(Queue q, void* host, DevicePtr<const void> device,
                               std::size_t bytes) {
  const void* source = device.address();
  transfer(q, BusModel::Direction::ToHost, bytes,
           [source, host, bytes] { std::memcpy(host, source, bytes); });
}

EventPtr EmulatedBackend::record(Queue q) {
  return queue(q).record();
}

void EmulatedBackend::wait(Queue q, const EventPtr& event) {
  queue(q).wait_for(event);
}

void EmulatedBackend::synchronize() {
  copy_.drain();
  compute_.drain();
}

void EmulatedBackend::set_part(Part part) {
  compute_.enqueue([this, part] { part_ = part; });
}

void EmulatedBackend::embed(const DeviceMatrix& table, DevicePtr<const std::int32_t> ids,
                            std::int64_t n, DevicePtr<float> out) {
  const kernels::WeightMatrix* t = &HostMatrix::of(table);
  compute([t, ids, n, out] { cpu_ops::embed(*t, ids.address(), n, out.address()); });
}

void EmulatedBackend::rms_norm(DevicePtr<const float> x, std::int64_t x_stride,
                               DevicePtr<const float> weight, std::int64_t rows, std::int64_t cols,
                               double eps, DevicePtr<float> y, std::int64_t y_stride) {
  compute([=] {
    cpu_ops::rms_norm_rows(x.address(), x_stride, weight.address(), rows, cols, eps, y.address(),
                           y_stride);
  });
}

void EmulatedBackend::matmul(DevicePtr<const float> x, std::int64_t n, const DeviceMatrix& w,
                             DevicePtr<float> y, std::int64_t y_stride) {
  const kernels::WeightMatrix* m = &HostMatrix::of(w);
  compute([this, x, n, m, y, y_stride] {
    kernels::matmul_xwt(x.address(), n, *m, y.address(), y_stride, threads_.kernels_for());
  });
}

void EmulatedBackend::rope(const DeviceRope& rope, DevicePtr<float> x, std::int64_t n,
                           std::int64_t token_stride, std::int64_t heads, std::int64_t head_stride,
                           std::int64_t pos0) {
  const RotaryEmbedding* r = &static_cast<const HostRope&>(rope).rope();
  compute([=] { cpu_ops::rope(*r, x.address(), n, token_stride, heads, head_stride, pos0); });
}

void EmulatedBackend::add_scaled(DevicePtr<float> y, DevicePtr<const float> x, float a,
                                 std::int64_t n) {
  compute([=] {
    float* yy = y.address();
    const float* xx = x.address();
    if (a == 1.0f) {
      for (std::int64_t i = 0; i < n; ++i) yy[i] += xx[i];
    } else {
      kernels::axpy_f32(a, xx, yy, n);
    }
  });
}

void EmulatedBackend::zero(DevicePtr<float> x, std::int64_t n) {
  compute([=] { std::memset(x.address(), 0, static_cast<std::size_t>(n) * sizeof(float)); });
}

void EmulatedBackend::add_bias(DevicePtr<float> y, DevicePtr<const float> bias, std::int64_t rows,
                               std::int64_t cols) {
  compute([=] { cpu_ops::add_bias(y.address(), bias.address(), rows, cols); });
}

void EmulatedBackend::silu_mul(DevicePtr<float> gate, DevicePtr<const float> up, std::int64_t n) {
  compute([=] { kernels::silu_mul(gate.address(), up.address(), n); });
}

void EmulatedBackend::sigmoid_gate(DevicePtr<float> y, DevicePtr<const float> gate,
                                   std::int64_t rows, std::int64_t cols, std::int64_t gate_cols) {
  compute([=] { cpu_ops::sigmoid_gate(y.address(), gate.address(), rows, cols, gate_cols); });
}

void EmulatedBackend::gated_delta_net(std::int64_t layer, DevicePtr<const float> qkvz,
                                      DevicePtr<const float> ba, std::int64_t n, std::int64_t pos0,
                                      const GatedDeltaNetWeights& w, DeviceKvCache& cache,
                                      DevicePtr<float> out) {
  auto* c = &static_cast<HostKvCache&>(cache);
  compute([this, c, layer, qkvz, ba, n, pos0, w, out] {
    cpu_ops::gated_delta_net(threads_, c->spec(), c->cache(), layer, qkvz.address(), ba.address(),
                             n, pos0, w.conv.address(), w.a_log.address(), w.dt_bias.address(),
                             w.norm.address(), out.address());
  });
}

void EmulatedBackend::save_recurrent_state(DeviceKvCache& cache) {
  auto* c = &static_cast<HostKvCache&>(cache);
  compute([c] { c->cache().save_recurrent(); });
}

void EmulatedBackend::restore_recurrent_state(DeviceKvCache& cache) {
  auto* c = &static_cast<HostKvCache&>(cache);
  compute([c] { c->cache().restore_recurrent(); });
}

void EmulatedBackend::attention(std::int64_t layer, DevicePtr<const float> q,
                                DevicePtr<const float> k, DevicePtr<const float> v, std::int64_t n,
                                std::int64_t pos0, DeviceKvCache& cache, DevicePtr<float> out,
                                DevicePtr<const float> sinks) {
  auto* c = &static_cast<HostKvCache&>(cache);
  compute([this, c, layer, q, k, v, n, pos0, out, sinks] {
    cpu_ops::attention(threads_, c->spec(), c->cache(), layer, q.address(), k.address(),
                       v.address(), n, pos0, out.address(), sinks.address());
  });
}

void EmulatedBackend::latent_attention(std::int64_t layer, DevicePtr<const float> q,
                                       DevicePtr<const float> kv, const LatentProjections& up,
                                       std::int64_t n, std::int64_t pos0, DeviceKvCache& cache,
                                       DevicePtr<float> out) {
  auto* c = &static_cast<HostKvCache&>(cache);
  const cpu_ops::LatentMatrices m = host_latent_matrices(up);
  compute([this, c, m, layer, q, kv, n, pos0, out] {
    cpu_ops::latent_attention(threads_, c->spec(), c->cache(), layer, q.address(), kv.address(), m,
                              n, pos0, out.address());
  });
}

void EmulatedBackend::route(DevicePtr<const float> logits, std::int64_t n,
                            const RoutingParams& params, DevicePtr<const float> bias,
                            DevicePtr<std::int32_t> ids, DevicePtr<float> weights) {
  compute([=] {
    cpu_ops::route(logits.address(), n, params, bias.address(), ids.address(), weights.address());
  });
}

void EmulatedBackend::grouped_experts(DevicePtr<const float> x, std::int64_t n,
                                      DevicePtr<const std::int32_t> ids,
                                      DevicePtr<const float> weights, std::int64_t k,
                                      const std::vector<const DeviceExpert*>& table,
                                      DevicePtr<float> out) {
  std::vector<const model::FeedForwardWeights*> experts(table.size(), nullptr);
  for (std::size_t e = 0; e < table.size(); ++e) {
    if (table[e] != nullptr) experts[e] = &static_cast<const HostExpert*>(table[e])->weights();
  }
  compute([this, x, n, ids, weights, k, experts = std::move(experts), out] {
    thread_local std::vector<ExpertPair> pairs;
    pairs.clear();
    const std::int32_t* id = ids.address();
    const float* w = weights.address();
    for (std::int64_t i = 0; i < n * k; ++i) {
      if (experts[static_cast<std::size_t>(id[i])] != nullptr)
        pairs.push_back({static_cast<std::int32_t>(i / k), id[i], w[i]});
    }
    experts_.run(threads_, experts, x.address(), pairs, out.address());
  });
}

DeviceTimes EmulatedBackend::times() const {
  DeviceTimes t;
  for (std::size_t i = 0; i < t.busy_ns.size(); ++i)
    t.busy_ns[i] = busy_ns_[i].load(std::memory_order_relaxed);
  t.copy_ns = copy_ns_.load(std::memory_order_relaxed);
  t.bus_bytes = bus_bytes_.load(std::memory_order_relaxed);
  return t;
}

}  // namespace tandem::backend
