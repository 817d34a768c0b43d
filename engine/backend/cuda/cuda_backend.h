// An NVIDIA GPU as a backend, through the CUDA runtime alone (the driver library is loaded by
// the static runtime where a driver is installed, never linked): weights in device memory as
// engine/backend/cuda/device_rows.h lays them out, the KV cache in fp32, one compute stream
// and one copy stream, events between them and the host, and the kernels of kernels/cuda.
// Every transfer goes through page-locked memory (PinnedRing) so the host never waits for the
// GPU unless it asks to.
//
// The memory budget is the VRAM free when the backend is made, less a reserve for the CUDA
// context, the kernels' scratch and other programs (or the budget the user gives); an
// allocation beyond it, or one the GPU refuses, throws DeviceOutOfMemory.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/host_memory.h"

struct CUstream_st;
namespace tandem::kernels::cuda {
struct AttentionArgs;
}
struct CUevent_st;

namespace tandem::backend {

class PinnedRing;

struct CudaOptions {
  int device = 0;
  // 0: the free VRAM at start less kCudaReserveBytes.
  std::uint64_t memory_bytes = 0;
};
// Left free for the CUDA context, the kernels' scratch and the rest of the desktop.
inline constexpr std::uint64_t kCudaReserveBytes = 1ull << 30;

class CudaBackend : public Backend {
 public:
  // Throws std::runtime_error with a sentence when the GPU cannot be used.
  CudaBackend(const CudaOptions& options, const model::ModelSpec& spec);
  // Runs everything queued first.
  ~CudaBackend() override;

  BackendKind kind() const override { return BackendKind::Cuda; }
  std::string description() const override;
  int multiprocessors() const { return multiprocessors_; }

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
  using Stream = CUstream_st*;
  using RawEvent = CUevent_st*;
  Stream stream(Queue q) const { return q == Queue::Compute ? compute_ : copy_; }
  // Device memory counted against the budget.
  void* device_alloc(std::size_t bytes, MemoryReservation& reservation);
  // Device scratch of at least `bytes` for operations on the compute stream (one region per
  // use, so that two scratch buffers of one operation do not alias).
  enum class Scratch { Attention, Latent, Experts, ExpertTable, DeltaNet, Count };
  void* scratch(Scratch use, std::size_t bytes);
  // Host -> device through the ring (or pageable memory), `fill` writing each chunk.
  template <class Fill>
  void upload_chunks(Stream s, char* device, std::size_t bytes, std::size_t chunk_align,
                     const Fill& fill);
  void close_part_segment();
  // The attention kernels, with the scratch split decoding needs.
  void run_attention(const kernels::cuda::AttentionArgs& args);
  // Adds the finished segments' and copies' times; times_mutex_ held.
  void harvest_times() const;

  CudaOptions options_;
  model::ModelSpec spec_;
  std::string name_;
  int multiprocessors_ = 0;
  std::shared_ptr<MemoryBudget> memory_;
  Stream compute_ = nullptr;
  Stream copy_ = nullptr;
  std::unique_ptr<PinnedRing> ring_;

  struct ScratchRegion {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  std::array<ScratchRegion, static_cast<std::size_t>(Scratch::Count)> scratch_{};

  // The compute stream's busy time per part: an event where each part's run of operations
  // begins, read back once the next begins and both have passed.
  mutable std::mutex times_mutex_;
  struct Segment {
    Part part;
    RawEvent begin, end;
  };
  mutable std::vector<Segment> segments_;
  Part part_ = Part::Dense;
  RawEvent part_begin_ = nullptr;
  mutable std::array<std::uint64_t, kPartCount> busy_ns_{};
  mutable std::vector<std::pair<RawEvent, RawEvent>> copies_;
  mutable std::uint64_t copy_ns_ = 0;
  std::atomic<std::uint64_t> bus_bytes_{0};
};

}  // namespace tandem::backend
