#include "engine/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/backend/cpu/rope.h"
#include "engine/backend/cuda/device_rows.h"
#include "engine/backend/cuda/pinned_ring.h"
#include "engine/hw/hardware_report.h"
#include "engine/log/log.h"
#include "kernels/cuda/ops.h"

namespace tandem::backend {
namespace {

namespace cu = kernels::cuda;
using cu::check;

constexpr std::size_t kRingBytes = 64ull << 20;
constexpr std::size_t kChunkBytes = 8ull << 20;  // one staged piece of an upload

std::uint64_t aligned(std::uint64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// Frees device memory when the object holding it goes. cudaFree waits for the device, so
// nothing queued still reads it.
struct DeviceAllocation {
  void* data = nullptr;
  DeviceAllocation() = default;
  explicit DeviceAllocation(void* d) : data(d) {}
  DeviceAllocation(const DeviceAllocation&) = delete;
  DeviceAllocation& operator=(const DeviceAllocation&) = delete;
  ~DeviceAllocation() {
    if (data != nullptr) cudaFree(data);
  }
};

class CudaBuffer : public DeviceBuffer {
 public:
  CudaBuffer(void* data, std::size_t bytes, MemoryReservation reservation)
      : DeviceBuffer(data, bytes), memory_(data), reservation_(std::move(reservation)) {}

 private:
  DeviceAllocation memory_;
  MemoryReservation reservation_;
};

class CudaMatrix : public DeviceMatrix {
 public:
  CudaMatrix(void* data, const kernels::WeightMatrix& host, std::uint64_t bytes,
             MemoryReservation reservation)
      : DeviceMatrix(host.rows, host.cols, bytes),
        memory_(data),
        reservation_(std::move(reservation)) {
    weights_.data = data;
    weights_.rows = host.rows;
    weights_.cols = host.cols;
    weights_.type =
        device_row_type(host) == DeviceRowType::F32 ? cu::WeightType::F32 : cu::WeightType::Bf16;
  }
  const cu::DeviceWeights& weights() const { return weights_; }
  static const cu::DeviceWeights& of(const DeviceMatrix& m) {
    return static_cast<const CudaMatrix&>(m).weights();
  }

 private:
  DeviceAllocation memory_;
  MemoryReservation reservation_;
  cu::DeviceWeights weights_;
};

// gate, up and down (BF16) then the biases, in one allocation.
class CudaExpert : public DeviceExpert {
 public:
  CudaExpert(void* data, const model::FeedForwardWeights& host, std::uint64_t bytes,
             MemoryReservation reservation)
      : DeviceExpert(bytes),
        memory_(data),
        reservation_(std::move(reservation)),
        shape_(expert_shape(host)),
        gate_bias_(host.gate_bias.size()),
        up_bias_(host.up_bias.size()),
        down_bias_(host.down_bias.size()) {
    auto* p = static_cast<char*>(data);
    const std::uint64_t matrix =
        aligned(static_cast<std::uint64_t>(shape_.inner * shape_.hidden) * 2);
    for (std::size_t i = 0; i < 3; ++i) parts_[i] = p + i * matrix;
    char* bias = p + 3 * matrix;
    const auto take = [&bias](std::size_t floats) -> float* {
      if (floats == 0) return nullptr;
      auto* at = reinterpret_cast<float*>(bias);
      bias += aligned(floats * sizeof(float));
      return at;
    };
    description_.gate = static_cast<const std::uint16_t*>(parts_[0]);
    description_.up = static_cast<const std::uint16_t*>(parts_[1]);
    description_.down = static_cast<const std::uint16_t*>(parts_[2]);
    description_.gate_bias = take(gate_bias_);
    description_.up_bias = take(up_bias_);
    description_.down_bias = take(down_bias_);
    set_glu(host.glu);
  }

  void set_glu(const kernels::Glu& g) {
    description_.glu.kind = g.kind == kernels::Glu::Kind::ClampedSwiglu ? 1 : 0;
    description_.glu.alpha = g.alpha;
    description_.glu.limit = g.limit;
  }
  // Whether `host` has this expert's shape and biases (a slot takes any expert like that).
  bool fits(const model::FeedForwardWeights& host) const {
    const ExpertShape s = expert_shape(host);
    return s.inner == shape_.inner && s.hidden == shape_.hidden &&
           host.gate_bias.size() == gate_bias_ && host.up_bias.size() == up_bias_ &&
           host.down_bias.size() == down_bias_;
  }
  const ExpertShape& shape() const { return shape_; }
  void* part(ExpertPart p) const { return parts_[static_cast<std::size_t>(p)]; }
  float* bias(int which) const {
    return const_cast<float*>(which == 0   ? description_.gate_bias
                              : which == 1 ? description_.up_bias
                                           : description_.down_bias);
  }
  const cu::ExpertOnDevice& description() const { return description_; }

 private:
  DeviceAllocation memory_;
  MemoryReservation reservation_;
  ExpertShape shape_;
  std::size_t gate_bias_, up_bias_, down_bias_;
  std::array<void*, 3> parts_{};
  cu::ExpertOnDevice description_;
};

bool layer_is_linear(const model::ModelSpec& spec, std::int64_t layer) {
  return static_cast<std::size_t>(layer) < spec.layer_is_linear.size() &&
         spec.layer_is_linear[static_cast<std::size_t>(layer)];
}

std::int64_t position_floats(const model::ModelSpec& spec) {
  return spec.mla ? spec.kv_lora_rank + spec.qk_rope_head_dim : spec.num_kv_heads * spec.head_dim;
}

std::int64_t conv_state_floats(const model::ModelSpec& spec) {
  return (spec.linear_conv_kernel - 1) * spec.linear_conv_channels();
}

std::int64_t recurrent_floats(const model::ModelSpec& spec) {
  return spec.linear_value_heads * spec.linear_key_dim * spec.linear_value_dim;
}

// Per attention layer: keys and values ([capacity x kv heads x head dim] each), or MLA's rows
// ([capacity x (latent | rotary key)]). Per gated DeltaNet layer: its states and a copy.
class CudaKvCache : public DeviceKvCache {
 public:
  CudaKvCache(const model::ModelSpec& spec, std::int64_t capacity, std::uint64_t bytes)
      : DeviceKvCache(capacity, bytes), spec_(spec) {}
  struct Layer {
    float* keys = nullptr;
    float* values = nullptr;  // null for MLA (the latent is in `keys`)
    float* conv = nullptr;
    float* recurrent = nullptr;
    float* saved_conv = nullptr;
    float* saved_recurrent = nullptr;
  };
  std::vector<Layer> layers;
  DeviceAllocation memory;
  MemoryReservation reservation;
  const model::ModelSpec& spec() const { return spec_; }

 private:
  model::ModelSpec spec_;
};

class CudaRope : public DeviceRope {
 public:
  cu::RopeTable table;
  DeviceAllocation memory;
};

class CudaEvent : public Event {
 public:
  explicit CudaEvent(cudaEvent_t e) : event_(e) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }
  bool ready() const override {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(e, "asking whether the GPU has finished");
    return true;
  }
  void wait() const override { check(cudaEventSynchronize(event_), "waiting for the GPU"); }
  cudaEvent_t raw() const { return event_; }

 private:
  cudaEvent_t event_;
};

// A host copy that runs in stream order once a download into the ring has landed.
struct HostCopy {
  void* to;
  const void* from;
  std::size_t bytes;
};
void CUDART_CB run_host_copy(void* data) {
  auto* c = static_cast<HostCopy*>(data);
  std::memcpy(c->to, c->from, c->bytes);
  delete c;
}

template <class T>
T* raw(DevicePtr<T> p) {
  return p.address();
}

}  // namespace

CudaBackend::CudaBackend(const CudaOptions& options, const model::ModelSpec& spec)
    : options_(options), spec_(spec) {
  check(cudaSetDevice(options.device), "selecting the GPU");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, options.device), "reading the GPU's properties");
  name_ = prop.name;
  multiprocessors_ = prop.multiProcessorCount;
  std::size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading the GPU's free memory");
  std::uint64_t budget = options.memory_bytes;
  if (budget == 0) budget = free_bytes > kCudaReserveBytes ? free_bytes - kCudaReserveBytes : 0;
  if (budget > free_bytes) {
    log::logger().warn("{}: {} were asked for but only {} are free; using what is free", name_,
                       hw::format_bytes(budget), hw::format_bytes(free_bytes));
    budget = free_bytes;
  }
  memory_ = std::make_shared<MemoryBudget>("the " + name_, budget);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the compute stream");
  compute_ = s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the copy stream");
  copy_ = s;
  ring_ = std::make_unique<PinnedRing>(kRingBytes);
  if (!ring_->ok()) {
    log::logger().warn(
        "page-locked host memory could not be had for transfers to the {} ({}): they go through "
        "pageable memory, which makes the CPU wait for the GPU at each one. Raise the locked-"
        "memory limit (ulimit -l) to let them overlap.",
        name_, ring_->failure());
    ring_.reset();
  }
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "creating a timing event");
  part_begin_ = e;
  check(cudaEventRecord(e, compute_), "starting the GPU's timing");
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(copy_);
  ring_.reset();
  for (ScratchRegion& r : scratch_)
    if (r.data != nullptr) cudaFree(r.data);
  for (const Segment& s : segments_) {
    cudaEventDestroy(s.begin);
    cudaEventDestroy(s.end);
  }
  for (const auto& [b, e] : copies_) {
    cudaEventDestroy(b);
    cudaEventDestroy(e);
  }
  if (part_begin_ != nullptr) cudaEventDestroy(part_begin_);
  cudaStreamDestroy(compute_);
  cudaStreamDestroy(copy_);
}

std::string CudaBackend::description() const {
  return fmt::format("{} (CUDA, {} of memory for Tandem)", name_,
                     hw::format_bytes(memory_->budget()));
}

void* CudaBackend::device_alloc(std::size_t bytes, MemoryReservation& reservation) {
  reservation = MemoryReservation(memory_, bytes);  // throws beyond the budget
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    reservation = MemoryReservation();
    throw DeviceOutOfMemory::allocation("the " + name_, bytes, free_bytes, memory_->budget());
  }
  if (e != cudaSuccess) reservation = MemoryReservation();
  check(e, "allocating GPU memory");
  return p;
}

void* CudaBackend::scratch(Scratch use, std::size_t bytes) {
  ScratchRegion& r = scratch_[static_cast<std::size_t>(use)];
  if (r.bytes >= bytes) return r.data;
  // Growing: what is queued may still read the old region.
  check(cudaStreamSynchronize(compute_), "waiting for the GPU before growing its scratch");
  if (r.data != nullptr) cudaFree(r.data);
  r = {};
  const std::size_t grown = std::max<std::size_t>(aligned(bytes), 1 << 20);
  const cudaError_t e = cudaMalloc(&r.data, grown);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw DeviceOutOfMemory::allocation("the " + name_, grown, free_bytes, memory_->budget());
  }
  check(e, "allocating GPU scratch memory");
  r.bytes = grown;
  return r.data;
}

template <class Fill>
void CudaBackend::upload_chunks(Stream s, char* device, std::size_t bytes, std::size_t chunk_align,
                                const Fill& fill) {
  const std::size_t chunk = std::max<std::size_t>(kChunkBytes / chunk_align, 1) * chunk_align;
  std::vector<char> pageable;
  for (std::size_t done = 0; done < bytes; done += chunk) {
    const std::size_t n = std::min(chunk, bytes - done);
    if (ring_) {
      void* staged = ring_->acquire(n);
      try {
        fill(done, n, staged);
        check(cudaMemcpyAsync(device + done, staged, n, cudaMemcpyHostToDevice, s),
              "copying to the GPU");
      } catch (...) {
        ring_->release(s);
        throw;
      }
      ring_->release(s);
    } else {
      pageable.resize(n);
      fill(done, n, pageable.data());
      check(cudaMemcpyAsync(device + done, pageable.data(), n, cudaMemcpyHostToDevice, s),
            "copying to the GPU");
      check(cudaStreamSynchronize(s), "copying to the GPU");
    }
  }
  bus_bytes_.fetch_add(bytes, std::memory_order_relaxed);
}

std::unique_ptr<DeviceBuffer> CudaBackend::allocate(std::size_t bytes) {
  MemoryReservation reservation;
  void* p = device_alloc(bytes, reservation);
  return std::make_unique<CudaBuffer>(p, bytes, std::move(reservation));
}

std::uint64_t CudaBackend::matrix_bytes(const kernels::WeightMatrix& host) const {
  return device_matrix_bytes(host);
}

std::unique_ptr<DeviceMatrix> CudaBackend::place_matrix(const kernels::WeightMatrix& host,
                                                        Queue queue) {
  const std::uint64_t bytes = device_matrix_bytes(host);
  MemoryReservation reservation;
  void* p = device_alloc(bytes, reservation);
  auto m = std::make_unique<CudaMatrix>(p, host, bytes, std::move(reservation));
  const std::size_t row_bytes =
      bytes / static_cast<std::uint64_t>(std::max<std::int64_t>(1, host.rows));
  if (row_bytes > 0 && row_bytes <= kChunkBytes) {
    RawEvent begin = nullptr, end = nullptr;
    if (queue == Queue::Copy) {
      check(cudaEventCreate(&begin), "timing a copy");
      check(cudaEventRecord(begin, copy_), "timing a copy");
    }
    upload_chunks(stream(queue), static_cast<char*>(p), bytes, row_bytes,
                  [&](std::size_t offset, std::size_t n, void* to) {
                    const auto r0 = static_cast<std::int64_t>(offset / row_bytes);
                    device_rows(host, r0, r0 + static_cast<std::int64_t>(n / row_bytes), to);
                  });
    if (queue == Queue::Copy) {
      check(cudaEventCreate(&end), "timing a copy");
      check(cudaEventRecord(end, copy_), "timing a copy");
      std::lock_guard lock(times_mutex_);
      copies_.emplace_back(begin, end);
    }
    return m;
  }
  // A row wider than a chunk (not seen in real models): one row at a time.
  std::vector<char> row(row_bytes);
  for (std::int64_t r = 0; r < host.rows; ++r) {
    device_rows(host, r, r + 1, row.data());
    upload(queue, DevicePtr<void>(static_cast<char*>(p) + r * row_bytes), row.data(), row_bytes);
  }
  check(cudaStreamSynchronize(stream(queue)), "copying a wide matrix to the GPU");
  return m;
}

std::uint64_t CudaBackend::expert_bytes(const model::FeedForwardWeights& host) const {
  return device_expert_bytes(host);
}

std::unique_ptr<DeviceExpert> CudaBackend::allocate_expert(const model::FeedForwardWeights& host) {
  const std::uint64_t bytes = device_expert_bytes(host);
  MemoryReservation reservation;
  void* p = device_alloc(bytes, reservation);
  return std::make_unique<CudaExpert>(p, host, bytes, std::move(reservation));
}

void CudaBackend::refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host,
                                Queue queue) {
  auto& target = static_cast<CudaExpert&>(expert);
  if (!target.fits(host)) {
    throw std::invalid_argument(
        "an expert of another shape cannot take this GPU expert slot (a layer with experts of "
        "its own width)");
  }
  target.set_glu(host.glu);
  RawEvent begin = nullptr, end = nullptr;
  if (queue == Queue::Copy) {
    check(cudaEventCreate(&begin), "timing a copy");
    check(cudaEventRecord(begin, copy_), "timing a copy");
  }
  const ExpertShape& shape = target.shape();
  for (ExpertPart part : {ExpertPart::Gate, ExpertPart::Up, ExpertPart::Down}) {
    const std::int64_t cols = expert_part_cols(shape, part);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * 2;
    const std::size_t bytes = row_bytes * static_cast<std::size_t>(expert_part_rows(shape, part));
    upload_chunks(stream(queue), static_cast<char*>(target.part(part)), bytes, row_bytes,
                  [&](std::size_t offset, std::size_t n, void* to) {
                    const auto r0 = static_cast<std::int64_t>(offset / row_bytes);
                    expert_rows_bf16(host, part, r0, r0 + static_cast<std::int64_t>(n / row_bytes),
                                     static_cast<std::uint16_t*>(to));
                  });
  }
  const std::vector<float>* biases[3] = {&host.gate_bias, &host.up_bias, &host.down_bias};
  for (int i = 0; i < 3; ++i) {
    if (biases[i]->empty()) continue;
    const std::size_t bytes = biases[i]->size() * sizeof(float);
    upload_chunks(stream(queue), reinterpret_cast<char*>(target.bias(i)), bytes, sizeof(float),
                  [&](std::size_t offset, std::size_t n, void* to) {
                    std::memcpy(to, reinterpret_cast<const char*>(biases[i]->data()) + offset, n);
                  });
  }
  if (queue == Queue::Copy) {
    check(cudaEventCreate(&end), "timing a copy");
    check(cudaEventRecord(end, copy_), "timing a copy");
    std::lock_guard lock(times_mutex_);
    copies_.emplace_back(begin, end);
  }
}

std::uint64_t CudaBackend::kv_cache_bytes(const model::ModelSpec& spec,
                                          std::int64_t capacity) const {
  std::uint64_t bytes = 0;
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    if (layer_is_linear(spec, l)) {
      bytes += 2 * aligned(static_cast<std::uint64_t>(conv_state_floats(spec)) * 4) +
               2 * aligned(static_cast<std::uint64_t>(recurrent_floats(spec)) * 4);
    } else {
      const std::uint64_t per = static_cast<std::uint64_t>(capacity * position_floats(spec)) * 4;
      bytes += spec.mla ? aligned(per) : 2 * aligned(per);
    }
  }
  return bytes;
}

std::unique_ptr<DeviceKvCache> CudaBackend::allocate_kv_cache(const model::ModelSpec& spec,
                                                              std::int64_t capacity) {
  const std::uint64_t bytes = kv_cache_bytes(spec, capacity);
  auto cache = std::make_unique<CudaKvCache>(spec, capacity, bytes);
  cache->memory.data = device_alloc(bytes, cache->reservation);
  check(cudaMemsetAsync(cache->memory.data, 0, bytes, compute_), "clearing the KV cache");
  char* p = static_cast<char*>(cache->memory.data);
  const auto take = [&p](std::uint64_t floats) {
    auto* at = reinterpret_cast<float*>(p);
    p += aligned(floats * 4);
    return at;
  };
  cache->layers.resize(static_cast<std::size_t>(spec.num_layers));
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    CudaKvCache::Layer& layer = cache->layers[static_cast<std::size_t>(l)];
    if (layer_is_linear(spec, l)) {
      layer.conv = take(static_cast<std::uint64_t>(conv_state_floats(spec)));
      layer.saved_conv = take(static_cast<std::uint64_t>(conv_state_floats(spec)));
      layer.recurrent = take(static_cast<std::uint64_t>(recurrent_floats(spec)));
      layer.saved_recurrent = take(static_cast<std::uint64_t>(recurrent_floats(spec)));
    } else {
      const auto per = static_cast<std::uint64_t>(capacity * position_floats(spec));
      layer.keys = take(per);
      if (!spec.mla) layer.values = take(per);
    }
  }
  return cache;
}

std::unique_ptr<DeviceRope> CudaBackend::make_rope(const model::RopeSpec& spec, std::int64_t dim) {
  const RotaryEmbedding host(spec, dim);
  const std::vector<double>& inv = host.inverse_frequencies();
  auto r = std::make_unique<CudaRope>();
  const std::size_t bytes = std::max<std::size_t>(inv.size(), 1) * sizeof(double);
  check(cudaMalloc(&r->memory.data, bytes), "allocating the rotary table");
  upload(Queue::Compute, DevicePtr<void>(r->memory.data), inv.data(), inv.size() * sizeof(double));
  // The upload goes through the ring (or is done) before `inv` goes out of scope.
  check(cudaStreamSynchronize(compute_), "copying the rotary table");
  r->table.inv_freq = static_cast<const double*>(r->memory.data);
  r->table.dim = dim;
  r->table.interleaved = spec.interleaved;
  r->table.attention_factor = spec.type == model::RopeType::Yarn ? spec.attention_factor : 1.0;
  return r;
}

void CudaBackend::upload(Queue queue, DevicePtr<void> device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  upload_chunks(stream(queue), static_cast<char*>(device.address()), bytes, 1,
                [host](std::size_t offset, std::size_t n, void* to) {
                  std::memcpy(to, static_cast<const char*>(host) + offset, n);
                });
}

void CudaBackend::download(Queue queue, void* host, DevicePtr<const void> device,
                           std::size_t bytes) {
  if (bytes == 0) return;
  const Stream s = stream(queue);
  bus_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (!ring_) {
    check(cudaMemcpyAsync(host, device.address(), bytes, cudaMemcpyDeviceToHost, s),
          "copying from the GPU");
    return;
  }
  for (std::size_t done = 0; done < bytes; done += kChunkBytes) {
    const std::size_t n = std::min(kChunkBytes, bytes - done);
    void* staged = ring_->acquire(n);
    try {
      check(cudaMemcpyAsync(staged, static_cast<const char*>(device.address()) + done, n,
                            cudaMemcpyDeviceToHost, s),
            "copying from the GPU");
      // Into the caller's memory once the bytes have landed, still in stream order.
      auto* copy = new HostCopy{static_cast<char*>(host) + done, staged, n};
      const cudaError_t e = cudaLaunchHostFunc(s, run_host_copy, copy);
      if (e != cudaSuccess) delete copy;
      check(e, "copying from the GPU");
    } catch (...) {
      ring_->release(s);
      throw;
    }
    ring_->release(s);
  }
}

EventPtr CudaBackend::record(Queue queue) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event");
  auto event = std::make_shared<CudaEvent>(e);
  check(cudaEventRecord(e, stream(queue)), "recording an event");
  return event;
}

void CudaBackend::wait(Queue queue, const EventPtr& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(event.get());
  if (e == nullptr) {
    event->wait();  // another backend's event: the host waits for it
    return;
  }
  check(cudaStreamWaitEvent(stream(queue), e->raw(), 0), "ordering the GPU's queues");
}

void CudaBackend::synchronize() {
  check(cudaStreamSynchronize(compute_), "waiting for the GPU");
  check(cudaStreamSynchronize(copy_), "waiting for the GPU");
}

void CudaBackend::close_part_segment() {
  cudaEvent_t end = nullptr;
  check(cudaEventCreate(&end), "timing the GPU");
  check(cudaEventRecord(end, compute_), "timing the GPU");
  std::lock_guard lock(times_mutex_);
  segments_.push_back({part_, part_begin_, end});
  // Counted now and then even when nobody asks, so the events do not pile up.
  if (segments_.size() >= 1024) harvest_times();
  cudaEvent_t begin = nullptr;
  check(cudaEventCreate(&begin), "timing the GPU");
  check(cudaEventRecord(begin, compute_), "timing the GPU");
  part_begin_ = begin;
}

void CudaBackend::set_part(Part part) {
  if (part == part_) return;
  close_part_segment();
  part_ = part;
}

void CudaBackend::embed(const DeviceMatrix& table, DevicePtr<const std::int32_t> ids,
                        std::int64_t n, DevicePtr<float> out) {
  cu::embed(CudaMatrix::of(table), raw(ids), n, raw(out), compute_);
}

void CudaBackend::rms_norm(DevicePtr<const float> x, std::int64_t x_stride,
                           DevicePtr<const float> weight, std::int64_t rows, std::int64_t cols,
                           double eps, DevicePtr<float> y, std::int64_t y_stride) {
  cu::rms_norm(raw(x), x_stride, raw(weight), rows, cols, eps, raw(y), y_stride, compute_);
}

void CudaBackend::matmul(DevicePtr<const float> x, std::int64_t n, const DeviceMatrix& w,
                         DevicePtr<float> y, std::int64_t y_stride) {
  cu::matmul(raw(x), n, CudaMatrix::of(w), raw(y), y_stride, compute_);
}

void CudaBackend::rope(const DeviceRope& rope, DevicePtr<float> x, std::int64_t n,
                       std::int64_t token_stride, std::int64_t heads, std::int64_t head_stride,
                       std::int64_t pos0) {
  cu::rope(static_cast<const CudaRope&>(rope).table, raw(x), n, token_stride, heads, head_stride,
           pos0, compute_);
}

void CudaBackend::add_scaled(DevicePtr<float> y, DevicePtr<const float> x, float a,
                             std::int64_t n) {
  cu::add_scaled(raw(y), raw(x), a, n, compute_);
}

void CudaBackend::zero(DevicePtr<float> x, std::int64_t n) {
  if (n <= 0) return;
  check(cudaMemsetAsync(raw(x), 0, static_cast<std::size_t>(n) * sizeof(float), compute_),
        "clearing GPU memory");
}

void CudaBackend::add_bias(DevicePtr<float> y, DevicePtr<const float> bias, std::int64_t rows,
                           std::int64_t cols) {
  cu::add_bias(raw(y), raw(bias), rows, cols, compute_);
}

void CudaBackend::silu_mul(DevicePtr<float> gate, DevicePtr<const float> up, std::int64_t n) {
  cu::glu(cu::GluParams{}, raw(gate), raw(up), n, compute_);
}

void CudaBackend::sigmoid_gate(DevicePtr<float> y, DevicePtr<const float> gate, std::int64_t rows,
                               std::int64_t cols, std::int64_t gate_cols) {
  cu::sigmoid_gate(raw(y), raw(gate), rows, cols, gate_cols, compute_);
}

void CudaBackend::gated_delta_net(std::int64_t layer, DevicePtr<const float> qkvz,
                                  DevicePtr<const float> ba, std::int64_t n, std::int64_t pos0,
                                  const GatedDeltaNetWeights& w, DeviceKvCache& cache,
                                  DevicePtr<float> out) {
  auto& c = static_cast<CudaKvCache&>(cache);
  const CudaKvCache::Layer& l = c.layers.at(static_cast<std::size_t>(layer));
  const model::ModelSpec& spec = c.spec();
  cu::DeltaNetArgs a;
  a.qkvz = raw(qkvz);
  a.ba = raw(ba);
  a.n = n;
  a.pos0 = pos0;
  a.key_heads = spec.linear_key_heads;
  a.value_heads = spec.linear_value_heads;
  a.key_dim = spec.linear_key_dim;
  a.value_dim = spec.linear_value_dim;
  a.conv_kernel = spec.linear_conv_kernel;
  a.conv = raw(w.conv);
  a.a_log = raw(w.a_log);
  a.dt_bias = raw(w.dt_bias);
  a.norm = raw(w.norm);
  a.eps = spec.rms_norm_eps;
  a.conv_state = l.conv;
  a.recurrent = l.recurrent;
  a.mixed = static_cast<float*>(
      scratch(Scratch::DeltaNet,
              static_cast<std::size_t>(n * spec.linear_conv_channels()) * sizeof(float)));
  a.out = raw(out);
  cu::gated_delta_net(a, compute_);
}

namespace {

// Every gated DeltaNet layer's states copied aside (`save`) or back, in stream order.
void copy_recurrent_states(CudaKvCache& c, bool save, cudaStream_t stream) {
  const model::ModelSpec& spec = c.spec();
  const char* what = save ? "saving the recurrent state" : "restoring the recurrent state";
  for (const CudaKvCache::Layer& l : c.layers) {
    if (l.conv == nullptr) continue;
    const std::pair<float*, float*> conv{l.saved_conv, l.conv},
        state{l.saved_recurrent, l.recurrent};
    for (const auto& [pair, floats] :
         {std::pair{conv, conv_state_floats(spec)}, std::pair{state, recurrent_floats(spec)}}) {
      float* to = save ? pair.first : pair.second;
      const float* from = save ? pair.second : pair.first;
      check(cudaMemcpyAsync(to, from, static_cast<std::size_t>(floats) * sizeof(float),
                            cudaMemcpyDeviceToDevice, stream),
            what);
    }
  }
}

}  // namespace

void CudaBackend::save_recurrent_state(DeviceKvCache& cache) {
  copy_recurrent_states(static_cast<CudaKvCache&>(cache), /*save=*/true, compute_);
}

void CudaBackend::restore_recurrent_state(DeviceKvCache& cache) {
  copy_recurrent_states(static_cast<CudaKvCache&>(cache), /*save=*/false, compute_);
}

namespace {

float attention_scale(const model::ModelSpec& spec) {
  return spec.attention_scale != 0.0 ? static_cast<float>(spec.attention_scale)
                                     : 1.0f / std::sqrt(static_cast<float>(spec.qk_head_dim()));
}

void check_room(const DeviceKvCache& cache, std::int64_t pos0, std::int64_t n) {
  if (pos0 < 0 || pos0 + n > cache.capacity()) {
    throw std::out_of_range("positions " + std::to_string(pos0) + " to " +
                            std::to_string(pos0 + n) + " do not fit the GPU's KV cache of " +
                            std::to_string(cache.capacity()) + " positions");
  }
}

}  // namespace

void CudaBackend::run_attention(const kernels::cuda::AttentionArgs& a) {
  // A decoded token's parts need scratch for their partial sums; a prompt needs none.
  const std::int64_t floats = cu::attention_scratch_floats(a, multiprocessors_);
  float* parts =
      floats > 0
          ? static_cast<float*>(scratch(Scratch::Attention, static_cast<std::size_t>(floats) * 4))
          : nullptr;
  cu::attention(a, parts, multiprocessors_, compute_);
}

void CudaBackend::attention(std::int64_t layer, DevicePtr<const float> q, DevicePtr<const float> k,
                            DevicePtr<const float> v, std::int64_t n, std::int64_t pos0,
                            DeviceKvCache& cache, DevicePtr<float> out,
                            DevicePtr<const float> sinks) {
  auto& c = static_cast<CudaKvCache&>(cache);
  check_room(c, pos0, n);
  const model::ModelSpec& spec = c.spec();
  const CudaKvCache::Layer& l = c.layers.at(static_cast<std::size_t>(layer));
  const std::int64_t row = spec.num_kv_heads * spec.head_dim;
  const std::size_t bytes = static_cast<std::size_t>(n * row) * sizeof(float);
  check(cudaMemcpyAsync(l.keys + pos0 * row, raw(k), bytes, cudaMemcpyDeviceToDevice, compute_),
        "storing keys");
  check(cudaMemcpyAsync(l.values + pos0 * row, raw(v), bytes, cudaMemcpyDeviceToDevice, compute_),
        "storing values");
  cu::AttentionArgs a;
  a.q = raw(q);
  a.q_token_stride = spec.num_heads * spec.head_dim;
  a.q_head_stride = spec.head_dim;
  a.keys = l.keys;
  a.k_pos_stride = row;
  a.k_head_stride = spec.head_dim;
  a.values = l.values;
  a.v_pos_stride = row;
  a.v_head_stride = spec.head_dim;
  a.key_dim = a.value_dim = spec.head_dim;
  a.heads = spec.num_heads;
  a.group = spec.num_heads / spec.num_kv_heads;
  a.n = n;
  a.pos0 = pos0;
  a.window = spec.layer_window.empty() ? 0 : spec.layer_window[static_cast<std::size_t>(layer)];
  a.scale = attention_scale(spec);
  a.sinks = raw(sinks);
  a.out = raw(out);
  a.out_token_stride = a.q_token_stride;
  a.out_head_stride = spec.head_dim;
  run_attention(a);
}

void CudaBackend::latent_attention(std::int64_t layer, DevicePtr<const float> q,
                                   DevicePtr<const float> kv, const LatentProjections& up,
                                   std::int64_t n, std::int64_t pos0, DeviceKvCache& cache,
                                   DevicePtr<float> out) {
  // kv_b joined: place_weights joins a GGUF file's split k_b and v_b for this backend.
  if (up.kv_b == nullptr) throw std::logic_error("the CUDA latent attention needs kv_b joined");
  auto& c = static_cast<CudaKvCache&>(cache);
  check_room(c, pos0, n);
  const model::ModelSpec& spec = c.spec();
  const CudaKvCache::Layer& l = c.layers.at(static_cast<std::size_t>(layer));
  const std::int64_t nh = spec.num_heads, lora = spec.kv_lora_rank, rope = spec.qk_rope_head_dim;
  const std::int64_t nope = spec.qk_nope_head_dim, vd = spec.v_head_dim;
  const std::int64_t key_dim = lora + rope;
  check(cudaMemcpyAsync(l.keys + pos0 * key_dim, raw(kv),
                        static_cast<std::size_t>(n * key_dim) * sizeof(float),
                        cudaMemcpyDeviceToDevice, compute_),
        "storing the latent cache");
  const cu::DeviceWeights& w = CudaMatrix::of(*up.kv_b);
  // A prompt's tokens kLatentTokens at a time, which bounds the scratch:
  // [q_keys: tokens x heads x (lora + rope) | o_latent: tokens x heads x lora].
  constexpr std::int64_t kLatentTokens = 256;
  const std::int64_t chunk = std::min(n, kLatentTokens);
  const auto q_floats = static_cast<std::size_t>(chunk * nh * key_dim);
  const auto o_floats = static_cast<std::size_t>(chunk * nh * lora);
  auto* latent = static_cast<float*>(scratch(Scratch::Latent, (q_floats + o_floats) * 4 + 256));
  float* q_keys = latent;
  float* o_latent = latent + q_floats;
  for (std::int64_t t0 = 0; t0 < n; t0 += chunk) {
    const std::int64_t tokens = std::min(chunk, n - t0);
    cu::absorb_latent_queries(raw(q) + t0 * nh * (nope + rope), tokens, nh, nope, rope, vd, w,
                              q_keys, compute_);
    cu::AttentionArgs a;
    a.q = q_keys;
    a.q_token_stride = nh * key_dim;
    a.q_head_stride = key_dim;
    a.keys = l.keys;
    a.k_pos_stride = key_dim;
    a.k_head_stride = 0;
    a.values = l.keys;  // the latent is the first lora values of each row
    a.v_pos_stride = key_dim;
    a.v_head_stride = 0;
    a.key_dim = key_dim;
    a.value_dim = lora;
    a.heads = nh;
    a.group = nh;
    a.n = tokens;
    a.pos0 = pos0 + t0;
    a.scale = attention_scale(spec);
    a.out = o_latent;
    a.out_token_stride = nh * lora;
    a.out_head_stride = lora;
    run_attention(a);
    cu::expand_latent_values(o_latent, tokens, nh, nope, vd, w, raw(out) + t0 * nh * vd, compute_);
  }
}

void CudaBackend::route(DevicePtr<const float> logits, std::int64_t n, const RoutingParams& params,
                        DevicePtr<const float> bias, DevicePtr<std::int32_t> ids,
                        DevicePtr<float> weights) {
  cu::RoutingArgs a;
  a.experts = params.experts;
  a.k = params.k;
  a.sigmoid = params.scoring == model::RouterScoring::Sigmoid;
  a.groups = params.groups;
  a.top_groups = params.top_groups;
  a.normalize = params.normalize;
  a.scaling = params.scaling;
  a.bias = raw(bias);
  cu::route(raw(logits), n, a, raw(ids), raw(weights), compute_);
}

void CudaBackend::grouped_experts(DevicePtr<const float> x, std::int64_t n,
                                  DevicePtr<const std::int32_t> ids, DevicePtr<const float> weights,
                                  std::int64_t k, const std::vector<const DeviceExpert*>& table,
                                  DevicePtr<float> out) {
  // The resident experts' descriptions and every expert's slot, uploaded in stream order.
  std::vector<std::int32_t> slot_of_expert(table.size(), -1);
  std::vector<cu::ExpertOnDevice> resident;
  ExpertShape shape;
  for (std::size_t e = 0; e < table.size(); ++e) {
    if (table[e] == nullptr) continue;
    const auto& expert = static_cast<const CudaExpert&>(*table[e]);
    slot_of_expert[e] = static_cast<std::int32_t>(resident.size());
    resident.push_back(expert.description());
    shape = expert.shape();
  }
  if (resident.empty() || n <= 0) return;
  const std::size_t map_bytes = aligned(slot_of_expert.size() * sizeof(std::int32_t));
  const std::size_t desc_bytes = resident.size() * sizeof(cu::ExpertOnDevice);
  auto* tables = static_cast<char*>(scratch(Scratch::ExpertTable, map_bytes + desc_bytes));
  upload(Queue::Compute, DevicePtr<void>(tables), slot_of_expert.data(),
         slot_of_expert.size() * sizeof(std::int32_t));
  upload(Queue::Compute, DevicePtr<void>(tables + map_bytes), resident.data(), desc_bytes);
  cu::GroupedExpertsArgs a;
  a.x = raw(x);
  a.n = n;
  a.k = k;
  a.hidden = shape.hidden;
  a.inner = shape.inner;
  a.ids = raw(ids);
  a.weights = raw(weights);
  a.slot_of_expert = reinterpret_cast<const std::int32_t*>(tables);
  a.expert_count = static_cast<std::int64_t>(table.size());
  a.experts = reinterpret_cast<const cu::ExpertOnDevice*>(tables + map_bytes);
  a.slots = static_cast<std::int64_t>(resident.size());
  a.out = raw(out);
  void* work = scratch(Scratch::Experts, static_cast<std::size_t>(cu::grouped_experts_scratch_bytes(
                                             n, k, shape.hidden, shape.inner, a.slots)));
  cu::grouped_experts(a, work, compute_);
}

void CudaBackend::harvest_times() const {
  // Segments and copies whose end has passed are counted and forgotten.
  const auto finished = [](cudaEvent_t e) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) cudaGetLastError();
    return r == cudaSuccess;
  };
  std::erase_if(segments_, [&](const Segment& s) {
    if (!finished(s.end)) return false;
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, s.begin, s.end) == cudaSuccess)
      busy_ns_[static_cast<std::size_t>(s.part)] += static_cast<std::uint64_t>(ms * 1e6);
    cudaEventDestroy(s.begin);
    cudaEventDestroy(s.end);
    return true;
  });
  std::erase_if(copies_, [&](const std::pair<cudaEvent_t, cudaEvent_t>& c) {
    if (!finished(c.second)) return false;
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, c.first, c.second) == cudaSuccess)
      copy_ns_ += static_cast<std::uint64_t>(ms * 1e6);
    cudaEventDestroy(c.first);
    cudaEventDestroy(c.second);
    return true;
  });
  cudaGetLastError();
}

DeviceTimes CudaBackend::times() const {
  std::lock_guard lock(times_mutex_);
  harvest_times();
  DeviceTimes t;
  t.busy_ns = busy_ns_;
  t.copy_ns = copy_ns_;
  t.bus_bytes = bus_bytes_.load(std::memory_order_relaxed);
  return t;
}

}  // namespace tandem::backend
