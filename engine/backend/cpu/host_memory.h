// Device objects that live in host memory: the CPU backend's, which view the model's own
// weights in place, and the emulated accelerator's, which are copies it owns and counts
// against its memory budget. The kernels read both the same way.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/rope.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::backend {

// The bytes a device may hold, and those it holds; shared by its objects, which give their
// bytes back when destroyed (also after the backend is gone).
class MemoryBudget {
 public:
  MemoryBudget(std::string device, std::uint64_t budget_bytes)
      : device_(std::move(device)), budget_(budget_bytes) {}
  std::uint64_t budget() const { return budget_; }
  std::uint64_t used() const { return used_.load(std::memory_order_relaxed); }
  // Throws DeviceOutOfMemory when `bytes` more do not fit.
  void reserve(std::uint64_t bytes);
  void release(std::uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  std::string device_;
  std::uint64_t budget_;
  std::atomic<std::uint64_t> used_{0};
};

// Bytes reserved in a budget for one object's lifetime.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  MemoryReservation(std::shared_ptr<MemoryBudget> budget, std::uint64_t bytes);
  ~MemoryReservation();
  MemoryReservation(MemoryReservation&& other) noexcept;
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;

 private:
  std::shared_ptr<MemoryBudget> budget_;
  std::uint64_t bytes_ = 0;
};

class HostBuffer : public DeviceBuffer {
 public:
  explicit HostBuffer(std::size_t bytes);
  MemoryReservation reservation;

 private:
  kernels::AlignedBytes storage_;
  HostBuffer(kernels::AlignedBytes storage, std::size_t bytes);
};

// A weight matrix the kernels multiply with: `matrix`, which either views the host's matrix
// or points into copies held here.
class HostMatrix : public DeviceMatrix {
 public:
  // A view of `host` (no memory of its own): the CPU backend.
  static std::unique_ptr<HostMatrix> view(const kernels::WeightMatrix& host);
  // Storage for a copy of `host`, filled by copy_from (the emulated accelerator, which
  // copies on its queue). oneDNN's copy of dense weights stays on the CPU.
  static std::unique_ptr<HostMatrix> storage_for(const kernels::WeightMatrix& host);
  // Copies `host`, which must have the shape and format this storage was made for.
  void copy_from(const kernels::WeightMatrix& host);

  const kernels::WeightMatrix& matrix() const { return matrix_; }
  // What the kernels multiply with, of a matrix a CPU-run backend placed.
  static const kernels::WeightMatrix& of(const DeviceMatrix& m) {
    return static_cast<const HostMatrix&>(m).matrix();
  }
  MemoryReservation reservation;

 private:
  HostMatrix(const kernels::WeightMatrix& matrix, std::uint64_t bytes)
      : DeviceMatrix(matrix.rows, matrix.cols, bytes), matrix_(matrix) {}

  kernels::WeightMatrix matrix_;
  kernels::AlignedBytes data_;      // the stored rows, or the packed blocks
  std::vector<float> block_scale_;  // FP8 block scales covering the rows
  std::unique_ptr<kernels::PackedMatrix> packed_;
};

// The up-projections of latent attention a CPU-run backend placed, as its kernels take them.
inline cpu_ops::LatentMatrices host_latent_matrices(const LatentProjections& up) {
  cpu_ops::LatentMatrices m;
  if (up.kv_b != nullptr) m.kv_b = &HostMatrix::of(*up.kv_b);
  if (up.k_b != nullptr) m.k_b = &HostMatrix::of(*up.k_b);
  if (up.v_b != nullptr) m.v_b = &HostMatrix::of(*up.v_b);
  return m;
}

// The bytes a copy of `host` takes: its stored rows with their block scales, or its packed
// form (the packed form alone when it has one: that is what the kernels read).
std::uint64_t host_matrix_bytes(const kernels::WeightMatrix& host);

// A routed expert the CPU's expert kernels run: `weights` points into the matrices held here.
class HostExpert : public DeviceExpert {
 public:
  static std::unique_ptr<HostExpert> view(const model::FeedForwardWeights& host);
  static std::unique_ptr<HostExpert> storage_for(const model::FeedForwardWeights& host);
  void copy_from(const model::FeedForwardWeights& host);

  const model::FeedForwardWeights& weights() const { return weights_; }
  MemoryReservation reservation;

 private:
  explicit HostExpert(std::uint64_t bytes) : DeviceExpert(bytes) {}
  // Points weights_ at the matrices in parts_.
  void bind();

  model::FeedForwardWeights weights_;
  // gate, up, down; or per slice gate, up, down.
  std::vector<std::unique_ptr<HostMatrix>> parts_;
  std::vector<std::unique_ptr<kernels::PackedMatrix>> slices_;
};

std::uint64_t host_expert_bytes(const model::FeedForwardWeights& host);

class HostKvCache : public DeviceKvCache {
 public:
  HostKvCache(const model::ModelSpec& spec, std::int64_t capacity,
              KvCacheFormat format = KvCacheFormat::F32)
      : DeviceKvCache(capacity, KvCache::bytes_for(spec, capacity, format)),
        spec_(spec),
        cache_(spec, capacity, format) {}
  const model::ModelSpec& spec() const { return spec_; }
  KvCache& cache() { return cache_; }
  MemoryReservation reservation;

 private:
  model::ModelSpec spec_;
  KvCache cache_;
};

class HostRope : public DeviceRope {
 public:
  HostRope(const model::RopeSpec& spec, std::int64_t dim) : rope_(spec, dim) {}
  const RotaryEmbedding& rope() const { return rope_; }

 private:
  RotaryEmbedding rope_;
};

}  // namespace tandem::backend
