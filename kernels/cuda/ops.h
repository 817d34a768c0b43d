// The operations of one decoder layer as CUDA kernels, launched on a stream the caller owns.
// Activations are fp32, row-major; weights are BF16 or fp32 rows ([rows x cols], row-major),
// as the CUDA backend places them (engine/backend/cuda). Every function only enqueues work and
// returns; launch failures throw CudaError with a sentence. Pointers are device addresses.
//
// The numbers follow the CPU kernels' definitions (kernels/cpu, engine/backend/cpu/cpu_ops):
// the same RMSNorm, rotary angles, routing with its tie rules, attention with sinks and
// sliding windows, and gated DeltaNet. Products multiply BF16 weights with fp32 activations
// and sum in fp32 for a few tokens; from kGemvMaxTokens tokens on, activations are rounded to
// BF16 for the tensor cores. Weights kept in fp32 (routers) are multiplied in fp32 throughout.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem::kernels::cuda {

// A CUDA runtime error, its sentence naming what was being done.
class CudaError : public std::runtime_error {
 public:
  CudaError(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Throws CudaError ("CUDA failed while WHAT: <the runtime's words>") unless `e` is success.
void check(cudaError_t e, const char* what);

enum class WeightType : std::int32_t { Bf16 = 0, F32 = 1 };

// A weight matrix in device memory.
struct DeviceWeights {
  const void* data = nullptr;
  WeightType type = WeightType::Bf16;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

// Rounds fp32 to BF16 as the host does (nearest even; NaN stays NaN).
void f32_to_bf16(const float* x, std::uint16_t* y, std::int64_t n, cudaStream_t stream);

// ---- Element-wise steps.
// out[t] = table row ids[t] as fp32, for n tokens.
void embed(const DeviceWeights& table, const std::int32_t* ids, std::int64_t n, float* out,
           cudaStream_t stream);
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight (the squares summed in double).
void rms_norm(const float* x, std::int64_t x_stride, const float* weight, std::int64_t rows,
              std::int64_t cols, double eps, float* y, std::int64_t y_stride, cudaStream_t stream);
// Rotary embedding: `inv_freq` holds dim / 2 doubles; token t is at position pos0 + t.
struct RopeTable {
  const double* inv_freq = nullptr;
  std::int64_t dim = 0;
  bool interleaved = false;
  double attention_factor = 1.0;
};
void rope(const RopeTable& table, float* x, std::int64_t n, std::int64_t token_stride,
          std::int64_t heads, std::int64_t head_stride, std::int64_t pos0, cudaStream_t stream);
void add_scaled(float* y, const float* x, float a, std::int64_t n, cudaStream_t stream);
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols,
              cudaStream_t stream);
// A gated FFN's activation, as kernels::Glu: kind 0 SiLU(gate) * up; kind 1 gpt-oss's clamped
// SwiGLU (gate clamped from above, up both sides at `limit`; gate * sigmoid(alpha gate) *
// (up + 1)).
struct GluParams {
  std::int32_t kind = 0;
  float alpha = 0.0f;
  float limit = 0.0f;
};
void glu(const GluParams& g, float* gate, const float* up, std::int64_t n, cudaStream_t stream);
void sigmoid_gate(float* y, const float* gate, std::int64_t rows, std::int64_t cols,
                  std::int64_t gate_cols, cudaStream_t stream);

// ---- Products. y[t * y_stride + r] = sum_c x[t * w.cols + c] * W[r, c], for n tokens.
inline constexpr std::int64_t kGemvMaxTokens = 8;
void matmul(const float* x, std::int64_t n, const DeviceWeights& w, float* y, std::int64_t y_stride,
            cudaStream_t stream);

// ---- Attention. q[t * q_token_stride + h * q_head_stride + d]; keys of KV head g at
// position p: keys[p * k_pos_stride + g * k_head_stride + d] (values likewise); query head h
// reads KV head h / group. Token t (0 <= t < n) is at position pos0 + t and sees positions
// [first, pos0 + t], first = max(0, pos0 + t + 1 - window) for a sliding window, else 0.
struct AttentionArgs {
  const float* q = nullptr;
  std::int64_t q_token_stride = 0, q_head_stride = 0;
  const float* keys = nullptr;
  std::int64_t k_pos_stride = 0, k_head_stride = 0;
  const float* values = nullptr;
  std::int64_t v_pos_stride = 0, v_head_stride = 0;
  std::int64_t key_dim = 0, value_dim = 0;
  std::int64_t heads = 0, group = 1;
  std::int64_t n = 0, pos0 = 0, window = 0;
  float scale = 1.0f;
  const float* sinks = nullptr;  // one logit per query head, or null
  float* out = nullptr;
  std::int64_t out_token_stride = 0, out_head_stride = 0;
};
// Floats of scratch `attention` needs for args on a device with `multiprocessors` SMs.
std::int64_t attention_scratch_floats(const AttentionArgs& args, int multiprocessors);
// The largest key and value widths the kernels take.
inline constexpr std::int64_t kMaxAttentionKeyDim = 576;
inline constexpr std::int64_t kMaxAttentionValueDim = 512;
void attention(const AttentionArgs& args, float* scratch, int multiprocessors, cudaStream_t stream);
// Latent attention's query absorption: q_keys[t, h] = [q_nope[t, h] . W_UK[h] | q_rope[t, h]],
// W_UK[h] the rows [h * (nope + vd), + nope) of kv_b ([heads * (nope + vd)] x lora).
void absorb_latent_queries(const float* q, std::int64_t n, std::int64_t heads, std::int64_t nope,
                           std::int64_t rope, std::int64_t vd, const DeviceWeights& kv_b,
                           float* q_keys, cudaStream_t stream);
// out[t, h, j] = o_latent[t, h] . kv_b row h * (nope + vd) + nope + j, for j < vd.
void expand_latent_values(const float* o_latent, std::int64_t n, std::int64_t heads,
                          std::int64_t nope, std::int64_t vd, const DeviceWeights& kv_b, float* out,
                          cudaStream_t stream);

// ---- Routing: ids and weights [n x k] from logits [n x experts] (engine's RoutingParams).
struct RoutingArgs {
  std::int64_t experts = 0, k = 0;
  bool sigmoid = false;  // grouped sigmoid (DeepSeek-V3) instead of softmax
  std::int64_t groups = 1, top_groups = 1;
  bool normalize = true;
  float scaling = 1.0f;
  const float* bias = nullptr;  // e_score_correction_bias, or null
};
inline constexpr std::int64_t kMaxRoutedExperts = 1024;
void route(const float* logits, std::int64_t n, const RoutingArgs& args, std::int32_t* ids,
           float* weights, cudaStream_t stream);

// ---- Routed experts resident on the device, one grouped product.
struct ExpertOnDevice {
  const std::uint16_t* gate = nullptr;  // BF16 [inner x hidden]
  const std::uint16_t* up = nullptr;    // BF16 [inner x hidden]
  const std::uint16_t* down = nullptr;  // BF16 [hidden x inner]
  const float* gate_bias = nullptr;     // [inner] or null (gpt-oss)
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;  // [hidden] or null
  GluParams glu;
};
struct GroupedExpertsArgs {
  const float* x = nullptr;  // [n x hidden]
  std::int64_t n = 0, k = 0, hidden = 0, inner = 0;
  const std::int32_t* ids = nullptr;  // [n x k]
  const float* weights = nullptr;     // [n x k]
  // slot_of_expert[e]: the expert's index in `experts`, or -1 where it is not resident.
  const std::int32_t* slot_of_expert = nullptr;
  std::int64_t expert_count = 0;
  const ExpertOnDevice* experts = nullptr;  // device array of `slots` descriptions
  std::int64_t slots = 0;
  float* out = nullptr;  // [n x hidden], added to
};
// Tokens per pass of the grouped product (bounds its scratch).
inline constexpr std::int64_t kExpertTokensPerPass = 256;
std::int64_t grouped_experts_scratch_bytes(std::int64_t n, std::int64_t k, std::int64_t hidden,
                                           std::int64_t inner, std::int64_t slots);
void grouped_experts(const GroupedExpertsArgs& args, void* scratch, cudaStream_t stream);

// ---- Qwen3-Next's gated DeltaNet over n tokens (Backend::gated_delta_net). The state
// (conv_state [(kernel - 1) x channels], recurrent [value heads][key dim][value dim]) is
// cleared first when pos0 == 0.
struct DeltaNetArgs {
  const float* qkvz = nullptr;  // [n x (channels + value heads * value dim)]
  const float* ba = nullptr;    // [n x 2 value heads]
  std::int64_t n = 0, pos0 = 0;
  std::int64_t key_heads = 0, value_heads = 0, key_dim = 0, value_dim = 0, conv_kernel = 0;
  const float* conv = nullptr;  // [channels x kernel]
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* norm = nullptr;  // [value dim]
  double eps = 1e-6;
  float* conv_state = nullptr;
  float* recurrent = nullptr;
  float* mixed = nullptr;  // scratch [n x channels]
  float* out = nullptr;    // [n x value heads x value dim]
};
inline constexpr std::int64_t kMaxDeltaKeyDim = 128;
void gated_delta_net(const DeltaNetArgs& args, cudaStream_t stream);

}  // namespace tandem::kernels::cuda
