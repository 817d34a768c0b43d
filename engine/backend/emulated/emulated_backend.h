// An accelerator emulated on the CPU: a real backend, not a mock. It computes with the CPU's
// kernels on threads of its own (a compute queue and a copy queue, as a GPU's streams), holds
// copies of what is placed on it in memory it counts against a budget (an allocation beyond
// it fails as a GPU's would), and charges every transfer to a modelled bus. Its memory is not
// the host's: data crosses only through uploads and downloads. It is how the hybrid engine is
// tested and measured on machines without a GPU.
#pragma once

#include <array>
#include <atomic>
#include <memory>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/expert_compute.h"
#include "engine/backend/cpu/host_memory.h"
#include "engine/backend/cpu/thread_pool.h"
#include "engine/backend/emulated/bus_model.h"
#include "engine/backend/emulated/command_queue.h"

namespace tandem::backend {

struct EmulatedOptions {
  std::uint64_t memory_bytes = 4ull << 30;
  // PCIe 4.0 x16 as measured in practice (the planner's figure), and a transfer's latency.
  double bus_bytes_per_s = 25e9;
  double bus_latency_s = 10e-6;
  int threads = 1;  // computing on the device
};

class EmulatedBackend : public Backend {
 public:
  EmulatedBackend(const EmulatedOptions& options, const model::ModelSpec& spec);
  // Runs everything queued first.
  ~EmulatedBackend() override;

  const EmulatedOptions& options() const { return options_; }

  BackendKind kind() const override { return BackendKind::Emulated; }
  std::string description() const override;

  std::uint64_t memory_budget() const override { return memory_->budget(); }
  std::uint64_t memory_used() const override { return memory_->used(); }
  std::unique_ptr<DeviceBuffer> allocate(std::size_t bytes) override;
  std::unique_ptr<DeviceMatrix> place_matrix(const kernels::WeightMatrix& host,
                                             Queue queue) override;
  std::uint64_t matrix_bytes(const kernels::WeightMatrix& host) const override;
  std::unique_ptr<DeviceExpert> allocate_expert(const model::FeedForwardWeights& host) override;
  std::uint64_t expert_bytes(const model::FeedForwardWeights& host) const override;
  void refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host,
                     Queue queue) override;
  std::unique_ptr<DeviceKvCache> allocate_kv_cache(const model::ModelSpec& spec,
                                                   std::int64_t capacity) override;
  std::uint64_t kv_cache_bytes(const model::ModelSpec& spec, std::int64_t capacity) const override;
  std::unique_ptr<DeviceRope> make_rope(const model::RopeSpec& spec, std::int64_t dim) override;
  void* host_address(DevicePtr<const void>) const override { return nullptr; }

  void upload(Queue queue, DevicePtr<void> device, const void* host, std::size_t bytes) override;
  void download(Queue queue, void* host, DevicePtr<const void> device, std::size_t bytes) override;
  EventPtr record(Queue queue) override;
  void wait(Queue queue, const EventPtr& event) override;
  void synchronize() override;

  void set_part(Part part) override;
  void embed(const DeviceMatrix& table, DevicePtr<const std::int32_t> ids, std::int64_t n,
             DevicePtr<float> out) override;
  void rms_norm(DevicePtr<const float> x, std::int64_t x_stride, DevicePtr<const float> weight,
                std::int64_t rows, std::int64_t cols, double eps, DevicePtr<float> y,
                std::int64_t y_stride) override;
  void matmul(DevicePtr<const float> x, std::int64_t n, const DeviceMatrix& w, DevicePtr<float> y,
              std::int64_t y_stride) override;
  void rope(const DeviceRope& rope, DevicePtr<float> x, std::int64_t n, std::int64_t token_stride,
            std::int64_t heads, std::int64_t head_stride, std::int64_t pos0) override;
  void add_scaled(DevicePtr<float> y, DevicePtr<const float> x, float a, std::int64_t n) override;
  void zero(DevicePtr<float> x, std::int64_t n) override;
  void add_bias(DevicePtr<float> y, DevicePtr<const float> bias, std::int64_t rows,
                std::int64_t cols) override;
  void silu_mul(DevicePtr<float> gate, DevicePtr<const float> up, std::int64_t n) override;
  void sigmoid_gate(DevicePtr<float> y, DevicePtr<const float> gate, std::int64_t rows,
                    std::int64_t cols, std::int64_t gate_cols) override;
  void gated_delta_net(std::int64_t layer, DevicePtr<const float> qkvz, DevicePtr<const float> ba,
                       std::int64_t n, std::int64_t pos0, const GatedDeltaNetWeights& w,
                       DeviceKvCache& cache, DevicePtr<float> out) override;
  void save_recurrent_state(DeviceKvCache& cache) override;
  void restore_recurrent_state(DeviceKvCache& cache) override;
  void attention(std::int64_t layer, DevicePtr<const float> q, DevicePtr<const float> k,
                 DevicePtr<const float> v, std::int64_t n, std::int64_t pos0, DeviceKvCache& cache,
                 DevicePtr<float> out, DevicePtr<const float> sinks) override;
  bool reads_split_latent_projections() const override { return true; }
  void latent_attention(std::int64_t layer, DevicePtr<const float> q, DevicePtr<const float> kv,
                        const LatentProjections& up, std::int64_t n, std::int64_t pos0,
                        DeviceKvCache& cache, DevicePtr<float> out) override;
  void route(DevicePtr<const float> logits, std::int64_t n, const RoutingParams& params,
             DevicePtr<const float> bias, DevicePtr<std::int32_t> ids,
             DevicePtr<float> weights) override;
  void grouped_experts(DevicePtr<const float> x, std::int64_t n, DevicePtr<const std::int32_t> ids,
                       DevicePtr<const float> weights, std::int64_t k,
                       const std::vector<const DeviceExpert*>& table,
                       DevicePtr<float> out) override;

  DeviceTimes times() const override;

 private:
  CommandQueue& queue(Queue q) { return q == Queue::Compute ? compute_ : copy_; }
  // Enqueues `op` on the compute queue, its time counted to the part current when it runs.
  void compute(std::function<void()> op);
  // Enqueues a transfer of `bytes` on `q`, charged to the bus.
  void transfer(Queue q, BusModel::Direction direction, std::size_t bytes,
                std::function<void()> copy);

  EmulatedOptions options_;
  std::shared_ptr<MemoryBudget> memory_;
  BusModel bus_;
  // Used by the compute queue's thread only.
  ThreadPool pool_;
  CpuThreads threads_;
  ExpertCompute experts_;
  Part part_ = Part::Dense;
  std::array<std::atomic<std::uint64_t>, kPartCount> busy_ns_{};
  std::atomic<std::uint64_t> copy_ns_{0};
  std::atomic<std::uint64_t> bus_bytes_{0};
  // Declared last: their threads stop (running what is queued) before the rest goes.
  CommandQueue copy_;
  CommandQueue compute_;
};

}  // namespace tandem::backend
