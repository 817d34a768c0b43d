// The CPU as a backend: today's CPU engine behind the Backend interface. Device memory is host
// memory, so weights are views of the loaded model's own (nothing is copied), transfers are
// plain copies, and every operation runs at once on the model's NumaPools; its events are
// always ready.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/expert_compute.h"
#include "engine/backend/cpu/host_memory.h"
#include "engine/measure/trace.h"

namespace tandem::backend {

class NumaPools;

// Work from which element-wise steps and the rotary embedding run on every thread: below
// it (a decode step) the calling thread alone is quicker.
inline constexpr std::int64_t kParallelElementwise = 1 << 16;
inline constexpr std::int64_t kParallelRopeHeads = 512;

class CpuBackend : public Backend {
 public:
  CpuBackend(NumaPools& pools, const model::ModelSpec& spec);

  BackendKind kind() const override { return BackendKind::Cpu; }
  std::string description() const override;

  std::uint64_t memory_budget() const override { return 0; }
  std::uint64_t memory_used() const override { return memory_->used(); }
  std::unique_ptr<DeviceBuffer> allocate(std::size_t bytes) override;
  std::unique_ptr<DeviceMatrix> place_matrix(const kernels::WeightMatrix& host,
                                             Queue queue) override;
  std::uint64_t matrix_bytes(const kernels::WeightMatrix&) const override { return 0; }
  std::unique_ptr<DeviceExpert> allocate_expert(const model::FeedForwardWeights& host) override;
  std::uint64_t expert_bytes(const model::FeedForwardWeights&) const override { return 0; }
  void refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host,
                     Queue queue) override;
  std::unique_ptr<DeviceKvCache> allocate_kv_cache(const model::ModelSpec& spec,
                                                   std::int64_t capacity) override;
  std::uint64_t kv_cache_bytes(const model::ModelSpec& spec, std::int64_t capacity) const override;
  // The format of the caches allocated from now on (F32 until set).
  void set_kv_cache_format(KvCacheFormat format) { kv_format_ = format; }
  KvCacheFormat kv_cache_format() const { return kv_format_; }
  std::unique_ptr<DeviceRope> make_rope(const model::RopeSpec& spec, std::int64_t dim) override;
  void* host_address(DevicePtr<const void> device) const override;

  void upload(Queue queue, DevicePtr<void> device, const void* host, std::size_t bytes) override;
  void download(Queue queue, void* host, DevicePtr<const void> device, std::size_t bytes) override;
  EventPtr record(Queue queue) override;
  void wait(Queue, const EventPtr&) override {}
  void synchronize() override {}

  void set_part(Part part) override { part_ = part; }
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
  // Adds the time from construction to destruction to the current part, and shows it as
  // operation `name` in a trace (measure/trace.h).
  class Timed {
   public:
    Timed(CpuBackend& backend, const char* name);
    ~Timed();

   private:
    CpuBackend& backend_;
    trace::Operation operation_;
    std::int64_t start_ns_;
  };

  CpuThreads threads_;
  int thread_count_;
  std::shared_ptr<MemoryBudget> memory_;
  Part part_ = Part::Dense;
  KvCacheFormat kv_format_ = KvCacheFormat::F32;
  std::array<std::atomic<std::uint64_t>, kPartCount> busy_ns_{};
  ExpertCompute experts_;
  std::vector<ExpertPair> pairs_;
  std::vector<const model::FeedForwardWeights*> expert_weights_;
};

}  // namespace tandem::backend
