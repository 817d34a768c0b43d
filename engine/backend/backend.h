// The interface every place the forward pass can compute on implements: the CPU, the emulated
// accelerator, a CUDA GPU. A backend owns device memory (activations, weights, the KV cache),
// two in-order queues (compute, and copy for transfers that overlap compute) with events
// between them and the host, and the operations one decoder layer needs. Operations are
// enqueued on the compute queue in call order; on the CPU they run at once, elsewhere they
// run later on the device, so the host must not touch memory a pending operation uses until
// an event recorded after it has completed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend {

enum class BackendKind { Cpu, Emulated, Cuda };
std::string_view backend_kind_name(BackendKind kind);  // "cpu", "emulated", "cuda"

// An address in a backend's device memory. Only that backend's operations and transfers
// read or write through it; the host never dereferences it (on a GPU it is not host memory),
// which the type enforces.
template <class T>
class DevicePtr {
 public:
  DevicePtr() = default;
  explicit DevicePtr(T* address) : address_(address) {}
  template <class U>
  requires std::is_convertible_v<U*, T*> DevicePtr(DevicePtr<U> other)
      : address_(other.address()) {}  // NOLINT: like T* from U*

  DevicePtr operator+(std::int64_t elements) const { return DevicePtr(address_ + elements); }
  explicit operator bool() const { return address_ != nullptr; }
  // For backends only: the raw device address.
  T* address() const { return address_; }

 private:
  T* address_ = nullptr;
};

// An allocation beyond what the device holds. The message says how much was asked for and
// how much is free, like a GPU's out-of-memory error.
class DeviceOutOfMemory : public std::runtime_error {
 public:
  DeviceOutOfMemory(const std::string& message, std::uint64_t requested_bytes,
                    std::uint64_t free_bytes);
  // "DEVICE is out of memory: X more were asked for, but only Y of its Z are free".
  static DeviceOutOfMemory allocation(const std::string& device, std::uint64_t requested_bytes,
                                      std::uint64_t free_bytes, std::uint64_t budget_bytes);
  std::uint64_t requested_bytes() const { return requested_; }
  std::uint64_t free_bytes() const { return free_; }

 private:
  std::uint64_t requested_, free_;
};

// Device memory for activations and scratch. Freed when destroyed; the caller makes sure no
// pending operation still uses it.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  std::size_t bytes() const { return bytes_; }
  template <class T>
  DevicePtr<T> as() const {
    return DevicePtr<T>(static_cast<T*>(address_));
  }

 protected:
  DeviceBuffer(void* address, std::size_t bytes) : address_(address), bytes_(bytes) {}

 private:
  void* address_;
  std::size_t bytes_;
};

// A weight matrix on the device, in the backend's layout for the host matrix it was placed
// from (any dtype Tandem reads, FP8 with its block scales, or packed INT8, INT4 or BF16).
class DeviceMatrix {
 public:
  virtual ~DeviceMatrix() = default;
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  // Device memory it holds (0 for a view of host memory on the CPU backend).
  std::uint64_t bytes() const { return bytes_; }
  // What a trace calls its products ("matmul: o"; measure/trace.h): a literal, or text that
  // outlives every recording.
  const char* name() const { return name_; }
  void set_name(const char* name) { name_ = name; }

 protected:
  DeviceMatrix(std::int64_t rows, std::int64_t cols, std::uint64_t bytes)
      : rows_(rows), cols_(cols), bytes_(bytes) {}

 private:
  std::int64_t rows_, cols_;
  std::uint64_t bytes_;
  const char* name_ = "matmul";
};

// One routed expert on the device (gate, up and down), as split as its CPU copy is.
class DeviceExpert {
 public:
  virtual ~DeviceExpert() = default;
  std::uint64_t bytes() const { return bytes_; }

 protected:
  explicit DeviceExpert(std::uint64_t bytes) : bytes_(bytes) {}

 private:
  std::uint64_t bytes_;
};

// How the CPU keeps the keys and values it attends over: fp32; BF16 (half the bytes, so a
// long context's decode reads half as much, and prompts take BF16 dot products where the CPU
// has them); or 8 bits with a scale per 32 (a little over a quarter of fp32's bytes, integer
// dot products; kernels/cpu/attention/attention.h). An accelerator keeps its own cache as it
// does.
enum class KvCacheFormat { F32, Bf16, Int8 };
std::string_view kv_cache_format_name(KvCacheFormat format);  // "f32", "bf16", "int8"
kernels::CacheElements cache_elements(KvCacheFormat format);
// False for a name that is not one of those.
bool parse_kv_cache_format(std::string_view name, KvCacheFormat& out);

// Keys and values of every layer for `capacity` positions, in device memory. Which positions
// are filled is the caller's bookkeeping.
class DeviceKvCache {
 public:
  virtual ~DeviceKvCache() = default;
  std::int64_t capacity() const { return capacity_; }
  std::uint64_t bytes() const { return bytes_; }

 protected:
  DeviceKvCache(std::int64_t capacity, std::uint64_t bytes) : capacity_(capacity), bytes_(bytes) {}

 private:
  std::int64_t capacity_;
  std::uint64_t bytes_;
};

// The rotary embedding's frequencies for one model, on the device.
class DeviceRope {
 public:
  virtual ~DeviceRope() = default;
};

// A point in a queue: ready once everything enqueued before it has run.
class Event {
 public:
  virtual ~Event() = default;
  virtual bool ready() const = 0;
  // Blocks the calling thread until ready.
  virtual void wait() const = 0;
};
using EventPtr = std::shared_ptr<const Event>;

enum class Queue { Compute, Copy };

// What a device's compute time is spent on, for the live time split.
enum class Part { Attention, Experts, Dense, Bus };
inline constexpr int kPartCount = 4;

// The compute queue's busy time per part since the backend was made (transfers on it count
// as Bus); the copy queue's busy time, which overlaps compute; the bytes that crossed the bus.
struct DeviceTimes {
  std::array<std::uint64_t, kPartCount> busy_ns{};
  std::uint64_t copy_ns = 0;
  std::uint64_t bus_bytes = 0;
  std::uint64_t part_ns(Part p) const { return busy_ns[static_cast<std::size_t>(p)]; }
};

struct RoutingParams {
  std::int64_t experts = 0;
  std::int64_t k = 0;
  model::RouterScoring scoring = model::RouterScoring::Softmax;
  std::int64_t groups = 1;
  std::int64_t top_groups = 1;
  bool normalize = true;
  float scaling = 1.0f;
};
RoutingParams routing_params(const model::ModelSpec& spec);

// Latent attention's up-projections as placed: kv_b [heads * (nope + v), kv_lora_rank], or
// k_b [heads * kv_lora_rank, nope] and v_b [heads * v, kv_lora_rank] split per head (see
// model::AttentionWeights); what is not there is null.
struct LatentProjections {
  const DeviceMatrix* kv_b = nullptr;
  const DeviceMatrix* k_b = nullptr;
  const DeviceMatrix* v_b = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  // For the user: "CPU (2 threads)", "emulated accelerator (4.0 GiB, bus 25 GB/s)".
  virtual std::string description() const = 0;

  // ---- Memory. Every allocation throws DeviceOutOfMemory beyond the budget.
  // 0: bounded only by the host's memory (the CPU).
  virtual std::uint64_t memory_budget() const = 0;
  virtual std::uint64_t memory_used() const = 0;
  virtual std::unique_ptr<DeviceBuffer> allocate(std::size_t bytes) = 0;
  // The matrix on the device, its data copied on `queue`; the host matrix must stay valid
  // until then (the model's weights stay for its lifetime).
  virtual std::unique_ptr<DeviceMatrix> place_matrix(const kernels::WeightMatrix& host,
                                                     Queue queue) = 0;
  // Bytes place_matrix would take for `host`.
  virtual std::uint64_t matrix_bytes(const kernels::WeightMatrix& host) const = 0;
  // Device memory for an expert shaped and stored like `host`, not yet filled.
  virtual std::unique_ptr<DeviceExpert> allocate_expert(const model::FeedForwardWeights& host) = 0;
  virtual std::uint64_t expert_bytes(const model::FeedForwardWeights& host) const = 0;
  // Copies `host` into `expert` (of the same shape and format) on `queue`: an expert placed,
  // staged, or moved into a slot another expert left. Operations enqueued before on other
  // queues that read `expert` must be waited for on `queue` first.
  virtual void refill_expert(DeviceExpert& expert, const model::FeedForwardWeights& host,
                             Queue queue) = 0;
  std::unique_ptr<DeviceExpert> place_expert(const model::FeedForwardWeights& host, Queue queue) {
    auto expert = allocate_expert(host);
    refill_expert(*expert, host, queue);
    return expert;
  }
  virtual std::unique_ptr<DeviceKvCache> allocate_kv_cache(const model::ModelSpec& spec,
                                                           std::int64_t capacity) = 0;
  virtual std::uint64_t kv_cache_bytes(const model::ModelSpec& spec,
                                       std::int64_t capacity) const = 0;
  virtual std::unique_ptr<DeviceRope> make_rope(const model::RopeSpec& spec, std::int64_t dim) = 0;

  // Where the host can read and write device memory in place (the CPU's memory is the
  // host's), the host address; otherwise null, and data must cross with upload/download.
  virtual void* host_address(DevicePtr<const void> device) const = 0;

  // ---- Transfers and ordering. `host` memory must stay untouched until an event recorded
  // after the transfer is ready.
  virtual void upload(Queue queue, DevicePtr<void> device, const void* host, std::size_t bytes) = 0;
  virtual void download(Queue queue, void* host, DevicePtr<const void> device,
                        std::size_t bytes) = 0;
  virtual EventPtr record(Queue queue) = 0;
  // Work enqueued on `queue` after this call waits until `event` is ready.
  virtual void wait(Queue queue, const EventPtr& event) = 0;
  // Returns when both queues have run everything enqueued.
  virtual void synchronize() = 0;

  // ---- Operations, on the compute queue. Activations are fp32, row-major.
  // Attributes the time of the operations that follow to `part`.
  virtual void set_part(Part part) = 0;
  // out[t] = table row ids[t], for n tokens.
  virtual void embed(const DeviceMatrix& table, DevicePtr<const std::int32_t> ids, std::int64_t n,
                     DevicePtr<float> out) = 0;
  // y[r] = x[r] / rms(x[r]) * weight over `cols` values, for `rows` rows `x_stride` and
  // `y_stride` floats apart (in place when y == x).
  virtual void rms_norm(DevicePtr<const float> x, std::int64_t x_stride,
                        DevicePtr<const float> weight, std::int64_t rows, std::int64_t cols,
                        double eps, DevicePtr<float> y, std::int64_t y_stride) = 0;
  // y[t * y_stride + r] = sum_c x[t * w.cols + c] * W[r, c], for n tokens.
  virtual void matmul(DevicePtr<const float> x, std::int64_t n, const DeviceMatrix& w,
                      DevicePtr<float> y, std::int64_t y_stride) = 0;
  // Rotates `heads` vectors of the rope's dimension per token, `head_stride` floats apart,
  // tokens `token_stride` apart, token t at position pos0 + t.
  virtual void rope(const DeviceRope& rope, DevicePtr<float> x, std::int64_t n,
                    std::int64_t token_stride, std::int64_t heads, std::int64_t head_stride,
                    std::int64_t pos0) = 0;
  // y += a * x over n values.
  virtual void add_scaled(DevicePtr<float> y, DevicePtr<const float> x, float a,
                          std::int64_t n) = 0;
  virtual void zero(DevicePtr<float> x, std::int64_t n) = 0;
  // y[r * cols + c] += bias[c] for `rows` rows (a projection's bias).
  virtual void add_bias(DevicePtr<float> y, DevicePtr<const float> bias, std::int64_t rows,
                        std::int64_t cols) = 0;
  // gate = SiLU(gate) * up over n values.
  virtual void silu_mul(DevicePtr<float> gate, DevicePtr<const float> up, std::int64_t n) = 0;
  // y[r, c] *= sigmoid(gate[r, gate_cols == 1 ? 0 : c]) for `rows` rows of `cols` values:
  // Qwen3-Next's attention output gate (gate_cols == cols) and shared-expert gate (1).
  virtual void sigmoid_gate(DevicePtr<float> y, DevicePtr<const float> gate, std::int64_t rows,
                            std::int64_t cols, std::int64_t gate_cols) = 0;
  // Grouped-query attention of layer `layer` for n tokens at positions pos0...: stores the
  // keys (normed and rotated) and values into the cache, then attends causally, within the
  // layer's sliding window where the spec gives one (ModelSpec::layer_window).
  // q: [n x heads x head_dim], k and v: [n x kv_heads x head_dim], out: like q. `sinks`
  // (may be null): one logit per head that joins each softmax's denominator (gpt-oss).
  virtual void attention(std::int64_t layer, DevicePtr<const float> q, DevicePtr<const float> k,
                         DevicePtr<const float> v, std::int64_t n, std::int64_t pos0,
                         DeviceKvCache& cache, DevicePtr<float> out,
                         DevicePtr<const float> sinks) = 0;
  // Multi-head latent attention with the up-projections absorbed (DeepSeek-V3): stores each
  // token's kv row [normalised latent (kv_lora_rank) | rotated key (rope dim)] of `kv`
  // ([n x (kv_lora_rank + rope dim)]), then attends with q [n x heads x (nope + rope)] (its
  // rope part rotated) through the up-projections; out: [n x heads x v_head_dim].
  virtual void latent_attention(std::int64_t layer, DevicePtr<const float> q,
                                DevicePtr<const float> kv, const LatentProjections& up,
                                std::int64_t n, std::int64_t pos0, DeviceKvCache& cache,
                                DevicePtr<float> out) = 0;
  // Whether latent_attention takes k_b and v_b as a GGUF file stores them; otherwise they
  // are joined into kv_b before they are placed.
  virtual bool reads_split_latent_projections() const { return false; }
  // Qwen3-Next's gated DeltaNet layer `layer` for n tokens at positions pos0... (from a
  // fresh state at 0), its state in `cache`. qkvz: [n x (2 key dim + 2 value dim)] as
  // [q | k | v | z], all heads; ba: [n x 2 value heads] as [b | a]. The causal convolution
  // over q, k and v and SiLU, L2-normalised q and k, the gated delta rule, then the RMSNorm
  // gated by SiLU(z); out: [n x value heads x value dim].
  struct GatedDeltaNetWeights {
    DevicePtr<const float> conv, a_log, dt_bias, norm;
  };
  virtual void gated_delta_net(std::int64_t layer, DevicePtr<const float> qkvz,
                               DevicePtr<const float> ba, std::int64_t n, std::int64_t pos0,
                               const GatedDeltaNetWeights& w, DeviceKvCache& cache,
                               DevicePtr<float> out) = 0;
  // The gated DeltaNet states of `cache` copied aside, and back: the one position a cache
  // of such layers can return to (KvCache's class comment).
  virtual void save_recurrent_state(DeviceKvCache& cache) = 0;
  virtual void restore_recurrent_state(DeviceKvCache& cache) = 0;

  // The routers' top-k: ids and weights [n x k] from logits [n x experts]; `bias` (may be
  // null) is DeepSeek-V3's e_score_correction_bias.
  virtual void route(DevicePtr<const float> logits, std::int64_t n, const RoutingParams& params,
                     DevicePtr<const float> bias, DevicePtr<std::int32_t> ids,
                     DevicePtr<float> weights) = 0;
  // out[t] += sum_j weights[t, j] * FFN_e(x[t]) for e = ids[t, j] where table[e] is set: the
  // routed experts resident on the device, one grouped product for all of them. `table` is
  // read when the call is made.
  virtual void grouped_experts(DevicePtr<const float> x, std::int64_t n,
                               DevicePtr<const std::int32_t> ids, DevicePtr<const float> weights,
                               std::int64_t k, const std::vector<const DeviceExpert*>& table,
                               DevicePtr<float> out) = 0;

  virtual DeviceTimes times() const = 0;
};

// The buffer's memory as T; null for no buffer (an optional weight such as a missing bias).
template <class T>
DevicePtr<T> device_ptr(const std::unique_ptr<DeviceBuffer>& buffer) {
  return buffer ? buffer->as<T>() : DevicePtr<T>();
}

// Reads `host` back as the host address of device memory when the backend allows it.
template <class T>
T* host_address(const Backend& backend, DevicePtr<T> device) {
  return static_cast<T*>(backend.host_address(DevicePtr<const void>(device.address())));
}

}  // namespace tandem::backend
