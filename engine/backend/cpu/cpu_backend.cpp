#include "engine/backend/cpu/cpu_backend.h"

#include <chrono>
#include <cstring>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/numa_pools.h"

namespace tandem::backend {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ReadyEvent : public Event {
 public:
  bool ready() const override { return true; }
  void wait() const override {}
};

template <class T>
T* raw(DevicePtr<T> p) {
  return p.address();
}

}  // namespace

CpuBackend::Timed::Timed(CpuBackend& backend, const char* name)
    : backend_(backend), operation_(name), start_ns_(now_ns()) {}

CpuBackend::Timed::~Timed() {
  backend_.busy_ns_[static_cast<std::size_t>(backend_.part_)].fetch_add(
      static_cast<std::uint64_t>(now_ns() - start_ns_), std::memory_order_relaxed);
}

CpuBackend::CpuBackend(NumaPools& pools, const model::ModelSpec& spec)
    : threads_(pools),
      thread_count_(pools.threads()),
      memory_(std::make_shared<MemoryBudget>("the CPU", 0)),
      experts_(spec) {}

std::string CpuBackend::description() const {
  return "CPU (" + std::to_string(thread_count_) + (thread_count_ == 1 ? " thread)" : " threads)");
}

std::unique_ptr<DeviceBuffer> CpuBackend::allocate(std::size_t bytes) {
  auto b = std::make_unique<HostBuffer>(bytes);
  b->reservation = MemoryReservation(memory_, bytes);
  return b;
}

std::unique_ptr<DeviceMatrix> CpuBackend::place_matrix(const kernels::WeightMatrix& host, Queue) {
  return HostMatrix::view(host);
}

std::unique_ptr<DeviceExpert> CpuBackend::allocate_expert(const model::FeedForwardWeights& host) {
  return HostExpert::view(host);
}

void CpuBackend::refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host, Queue) {
  static_cast<HostExpert&>(expert).copy_from(host);
}

std::unique_ptr<DeviceKvCache> CpuBackend::allocate_kv_cache(const model::ModelSpec& spec,
                                                             std::int64_t capacity) {
  return std::make_unique<HostKvCache>(spec, capacity, kv_format_);
}

std::uint64_t CpuBackend::kv_cache_bytes(const model::ModelSpec& spec,
                                         std::int64_t capacity) const {
  return KvCache::bytes_for(spec, capacity, kv_format_);
}

std::unique_ptr<DeviceRope> CpuBackend::make_rope(const model::RopeSpec& spec, std::int64_t dim) {
  return std::make_unique<HostRope>(spec, dim);
}

void* CpuBackend::host_address(DevicePtr<const void> device) const {
  return const_cast<void*>(device.address());
}

void CpuBackend::upload(Queue, DevicePtr<void> device, const void* host, std::size_t bytes) {
  if (device.address() != host) std::memcpy(device.address(), host, bytes);
}

void CpuBackend::download(Queue, void* host, DevicePtr<const void> device, std::size_t bytes) {
  if (device.address() != host) std::memcpy(host, device.address(), bytes);
}

EventPtr CpuBackend::record(Queue) {
  static const EventPtr ready = std::make_shared<ReadyEvent>();
  return ready;
}

void CpuBackend::embed(const DeviceMatrix& table, DevicePtr<const std::int32_t> ids, std::int64_t n,
                       DevicePtr<float> out) {
  Timed timed(*this, __func__);
  const kernels::WeightMatrix& t = HostMatrix::of(table);
  const std::int32_t* token = raw(ids);
  float* rows = raw(out);
  // A prompt's rows (each converted from the table's format) on every thread.
  if (n * t.cols >= kParallelElementwise) {
    threads_.parallel_for(n, 0, [&](std::int64_t t0, std::int64_t t1) {
      cpu_ops::embed(t, token + t0, t1 - t0, rows + t0 * t.cols);
    });
  } else {
    cpu_ops::embed(t, token, n, rows);
  }
}

void CpuBackend::rms_norm(DevicePtr<const float> x, std::int64_t x_stride,
                          DevicePtr<const float> weight, std::int64_t rows, std::int64_t cols,
                          double eps, DevicePtr<float> y, std::int64_t y_stride) {
  Timed timed(*this, __func__);
  cpu_ops::rms_norm_rows(raw(x), x_stride, raw(weight), rows, cols, eps, raw(y), y_stride,
                         &threads_);
}

void CpuBackend::matmul(DevicePtr<const float> x, std::int64_t n, const DeviceMatrix& w,
                        DevicePtr<float> y, std::int64_t y_stride) {
  Timed timed(*this, w.name());
  kernels::matmul_xwt(raw(x), n, HostMatrix::of(w), raw(y), y_stride, threads_.kernels_for());
}

void CpuBackend::rope(const DeviceRope& rope, DevicePtr<float> x, std::int64_t n,
                      std::int64_t token_stride, std::int64_t heads, std::int64_t head_stride,
                      std::int64_t pos0) {
  Timed timed(*this, __func__);
  const RotaryEmbedding& r = static_cast<const HostRope&>(rope).rope();
  float* base = raw(x);
  // A prompt's tokens on every thread; a decode step's one on this thread.
  if (n * heads >= kParallelRopeHeads) {
    threads_.parallel_for(n, 0, [&](std::int64_t t0, std::int64_t t1) {
      cpu_ops::rope(r, base + t0 * token_stride, t1 - t0, token_stride, heads, head_stride,
                    pos0 + t0);
    });
  } else {
    cpu_ops::rope(r, base, n, token_stride, heads, head_stride, pos0);
  }
}

void CpuBackend::add_scaled(DevicePtr<float> y, DevicePtr<const float> x, float a, std::int64_t n) {
  Timed timed(*this, __func__);
  float* yy = raw(y);
  const float* xx = raw(x);
  const auto some = [&](std::int64_t i0, std::int64_t i1) {
    kernels::axpy_f32(a, xx + i0, yy + i0, i1 - i0);
  };
  if (n >= kParallelElementwise) {
    threads_.parallel_for(n, 0, some);
  } else {
    some(0, n);
  }
}

void CpuBackend::zero(DevicePtr<float> x, std::int64_t n) {
  std::memset(raw(x), 0, static_cast<std::size_t>(n) * sizeof(float));
}

void CpuBackend::add_bias(DevicePtr<float> y, DevicePtr<const float> bias, std::int64_t rows,
                          std::int64_t cols) {
  Timed timed(*this, __func__);
  cpu_ops::add_bias(raw(y), raw(bias), rows, cols);
}

void CpuBackend::silu_mul(DevicePtr<float> gate, DevicePtr<const float> up, std::int64_t n) {
  Timed timed(*this, __func__);
  kernels::silu_mul(raw(gate), raw(up), n);
}

void CpuBackend::sigmoid_gate(DevicePtr<float> y, DevicePtr<const float> gate, std::int64_t rows,
                              std::int64_t cols, std::int64_t gate_cols) {
  Timed timed(*this, __func__);
  cpu_ops::sigmoid_gate(raw(y), raw(gate), rows, cols, gate_cols);
}

void CpuBackend::gated_delta_net(std::int64_t layer, DevicePtr<const float> qkvz,
                                 DevicePtr<const float> ba, std::int64_t n, std::int64_t pos0,
                                 const GatedDeltaNetWeights& w, DeviceKvCache& cache,
                                 DevicePtr<float> out) {
  Timed timed(*this, __func__);
  auto& c = static_cast<HostKvCache&>(cache);
  cpu_ops::gated_delta_net(threads_, c.spec(), c.cache(), layer, raw(qkvz), raw(ba), n, pos0,
                           raw(w.conv), raw(w.a_log), raw(w.dt_bias), raw(w.norm), raw(out));
}

void CpuBackend::save_recurrent_state(DeviceKvCache& cache) {
  static_cast<HostKvCache&>(cache).cache().save_recurrent();
}

void CpuBackend::restore_recurrent_state(DeviceKvCache& cache) {
  static_cast<HostKvCache&>(cache).cache().restore_recurrent();
}

void CpuBackend::attention(std::int64_t layer, DevicePtr<const float> q, DevicePtr<const float> k,
                           DevicePtr<const float> v, std::int64_t n, std::int64_t pos0,
                           DeviceKvCache& cache, DevicePtr<float> out,
                           DevicePtr<const float> sinks) {
  Timed timed(*this, __func__);
  auto& c = static_cast<HostKvCache&>(cache);
  cpu_ops::attention(threads_, c.spec(), c.cache(), layer, raw(q), raw(k), raw(v), n, pos0,
                     raw(out), raw(sinks));
}

void CpuBackend::latent_attention(std::int64_t layer, DevicePtr<const float> q,
                                  DevicePtr<const float> kv, const LatentProjections& up,
                                  std::int64_t n, std::int64_t pos0, DeviceKvCache& cache,
                                  DevicePtr<float> out) {
  Timed timed(*this, __func__);
  auto& c = static_cast<HostKvCache&>(cache);
  cpu_ops::latent_attention(threads_, c.spec(), c.cache(), layer, raw(q), raw(kv),
                            host_latent_matrices(up), n, pos0, raw(out));
}

void CpuBackend::route(DevicePtr<const float> logits, std::int64_t n, const RoutingParams& params,
                       DevicePtr<const float> bias, DevicePtr<std::int32_t> ids,
                       DevicePtr<float> weights) {
  Timed timed(*this, __func__);
  const float* l = raw(logits);
  std::int32_t* chosen = raw(ids);
  float* w = raw(weights);
  // Each token is routed on its own: a prompt's tokens on every thread.
  if (n * params.experts >= kParallelElementwise) {
    threads_.parallel_for(n, 0, [&](std::int64_t t0, std::int64_t t1) {
      cpu_ops::route(l + t0 * params.experts, t1 - t0, params, raw(bias), chosen + t0 * params.k,
                     w + t0 * params.k);
    });
  } else {
    cpu_ops::route(l, n, params, raw(bias), chosen, w);
  }
}

void CpuBackend::grouped_experts(DevicePtr<const float> x, std::int64_t n,
                                 DevicePtr<const std::int32_t> ids, DevicePtr<const float> weights,
                                 std::int64_t k, const std::vector<const DeviceExpert*>& table,
                                 DevicePtr<float> out) {
  Timed timed(*this, __func__);
  pairs_.clear();
  expert_weights_.assign(table.size(), nullptr);
  for (std::size_t e = 0; e < table.size(); ++e) {
    if (table[e] != nullptr)
      expert_weights_[e] = &static_cast<const HostExpert*>(table[e])->weights();
  }
  const std::int32_t* id = raw(ids);
  const float* w = raw(weights);
  for (std::int64_t i = 0; i < n * k; ++i) {
    if (expert_weights_[static_cast<std::size_t>(id[i])] != nullptr)
      pairs_.push_back({static_cast<std::int32_t>(i / k), id[i], w[i]});
  }
  experts_.run(threads_, expert_weights_, raw(x), pairs_, raw(out));
}

DeviceTimes CpuBackend::times() const {
  DeviceTimes t;
  for (std::size_t i = 0; i < t.busy_ns.size(); ++i)
    t.busy_ns[i] = busy_ns_[i].load(std::memory_order_relaxed);
  return t;
}

}  // namespace tandem::backend
