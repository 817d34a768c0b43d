// The operations of the Backend interface on host memory, on the threads they are given:
// the CPU backend runs them on the model's NumaPools, the emulated accelerator on its own
// worker threads. fp32 activations; the weights as the kernels read them.
#pragma once

#include <cstdint>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/rope.h"
#include "kernels/cpu/dense_matmul.h"

namespace tandem::backend::cpu_ops {

void embed(const kernels::WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out);

// y = x / rms(x) * weight over `n` values (in place when y == x).
void rms_norm(const float* x, const float* weight, std::int64_t n, double eps, float* y);
// Every row; on `threads` (when given) from kParallelNormValues values on.
inline constexpr std::int64_t kParallelNormValues = 16384;
void rms_norm_rows(const float* x, std::int64_t x_stride, const float* weight, std::int64_t rows,
                   std::int64_t cols, double eps, float* y, std::int64_t y_stride,
                   const CpuThreads* threads = nullptr);

// y[r * cols + c] += bias[c] for `rows` rows.
void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols);

void rope(const RotaryEmbedding& rope, float* x, std::int64_t n, std::int64_t token_stride,
          std::int64_t heads, std::int64_t head_stride, std::int64_t pos0);

// Grouped-query attention as Backend::attention, over `cache` made for `spec`.
// `sinks`: null, or one logit per head (gpt-oss). With fewer (token, KV head) jobs than
// twice the threads (decoding), each head's context of at least 2 * kMinAttentionPart
// positions is split into parts of at least that many, computed apart and combined.
inline constexpr std::int64_t kMinAttentionPart = 256;
// Tokens per job of a prompt's attention (kernels::attend_prompt), for `jobs_per_token` jobs
// of one token (KV heads, or groups of latent heads): up to kernels::kPromptJobTokens and n,
// fewer where that would leave fewer than two jobs per thread, at least 1.
std::int64_t prompt_job_tokens(std::int64_t n, std::int64_t jobs_per_token, int threads);
// Whether n > 1 tokens whose longest context is `longest` positions take the prompt kernel:
// always, unless its jobs would leave threads idle on a context long enough to split (a
// short turn after a long conversation on many cores), where the per-token kernel with each
// context split into parts keeps them busy. The choice, and so the result, depends on the
// thread count only where a decoded token's does.
bool prompt_takes_blocks(std::int64_t n, std::int64_t jobs_per_token, int threads,
                         std::int64_t longest);
// The parts each (token, KV head) job's context of `longest` positions is split into.
std::int64_t attention_parts(std::int64_t jobs, int threads, std::int64_t longest);
void attention(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
               std::int64_t layer, const float* q, const float* k, const float* v, std::int64_t n,
               std::int64_t pos0, float* out, const float* sinks = nullptr);

// Latent attention's up-projections: kv_b, or k_b and v_b (the other null), as
// backend::LatentProjections.
struct LatentMatrices {
  const kernels::WeightMatrix* kv_b = nullptr;
  const kernels::WeightMatrix* k_b = nullptr;
  const kernels::WeightMatrix* v_b = nullptr;
};

// Multi-head latent attention as Backend::latent_attention: absorbed, or expanded per head for
// a long pass over the BF16 or 8-bit cache.
void latent_attention(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
                      std::int64_t layer, const float* q, const float* kv, const LatentMatrices& up,
                      std::int64_t n, std::int64_t pos0, float* out);

// y[r, c] *= sigmoid(gate[r, gate_cols == 1 ? 0 : c]) for `rows` rows of `cols`.
void sigmoid_gate(float* y, const float* gate, std::int64_t rows, std::int64_t cols,
                  std::int64_t gate_cols);

// Qwen3-Next's gated DeltaNet as Backend::gated_delta_net, over `cache` made for `spec`
// (engine/backend/cpu/gated_delta_net.cpp). From chunk / 2 tokens on (a prompt) the delta
// rule runs `chunk` tokens at a time; fewer (decode), or chunk <= 1, token by token.
inline constexpr std::int64_t kDeltaRuleChunk = 32;
void gated_delta_net(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
                     std::int64_t layer, const float* qkvz, const float* ba, std::int64_t n,
                     std::int64_t pos0, const float* conv, const float* a_log, const float* dt_bias,
                     const float* norm, float* out, std::int64_t chunk = kDeltaRuleChunk);

void route(const float* logits, std::int64_t n, const RoutingParams& params, const float* bias,
           std::int32_t* ids, float* weights);

}  // namespace tandem::backend::cpu_ops
