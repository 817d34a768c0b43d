#include "engine/backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "engine/backend/cpu/routing.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::backend::cpu_ops {

void embed(const kernels::WeightMatrix& table, const std::int32_t* ids, std::int64_t n,
           float* out) {
  for (std::int64_t t = 0; t < n; ++t) table.row_f32(ids[t], out + t * table.cols);
}

void rms_norm(const float* x, const float* weight, std::int64_t n, double eps, float* y) {
  kernels::rms_norm_f32(x, weight, n, eps, y);
}

void rms_norm_rows(const float* x, std::int64_t x_stride, const float* weight, std::int64_t rows,
                   std::int64_t cols, double eps, float* y, std::int64_t y_stride,
                   const CpuThreads* threads) {
  const auto some = [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      kernels::rms_norm_f32(x + r * x_stride, weight, cols, eps, y + r * y_stride);
  };
  // A prompt's rows on every thread; a decode step's few rows on this one.
  if (threads != nullptr && rows * cols >= kParallelNormValues) {
    threads->parallel_for(rows, 0, some);
  } else {
    some(0, rows);
  }
}

void add_bias(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) kernels::axpy_f32(1.0f, bias, y + r * cols, cols);
}

void sigmoid_gate(float* y, const float* gate, std::int64_t rows, std::int64_t cols,
                  std::int64_t gate_cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float g = gate[r * gate_cols + (gate_cols == 1 ? 0 : c)];
      y[r * cols + c] *= 1.0f / (1.0f + std::exp(-g));
    }
  }
}

void rope(const RotaryEmbedding& rope, float* x, std::int64_t n, std::int64_t token_stride,
          std::int64_t heads, std::int64_t head_stride, std::int64_t pos0) {
  for (std::int64_t t = 0; t < n; ++t)
    rope.apply_heads(x + t * token_stride, heads, head_stride, pos0 + t);
}

std::int64_t prompt_job_tokens(std::int64_t n, std::int64_t jobs_per_token, int threads) {
  const std::int64_t tokens = n * jobs_per_token / (2 * static_cast<std::int64_t>(threads));
  return std::clamp<std::int64_t>(tokens, 1, std::min(n, kernels::kPromptJobTokens));
}

std::int64_t attention_parts(std::int64_t jobs, int threads, std::int64_t longest) {
  if (jobs >= 2 * threads || longest < 2 * kMinAttentionPart) return 1;
  return std::min((2 * threads + jobs - 1) / jobs, longest / kMinAttentionPart);
}

bool prompt_takes_blocks(std::int64_t n, std::int64_t jobs_per_token, int threads,
                         std::int64_t longest) {
  if (n < 2) return false;
  const std::int64_t job_tokens = prompt_job_tokens(n, jobs_per_token, threads);
  const std::int64_t jobs = (n + job_tokens - 1) / job_tokens * jobs_per_token;
  return attention_parts(jobs, threads, longest) == 1;  // its jobs would not want splitting
}

namespace {

// Attention over a BF16 cache: whole (max null), or as a part whose max and sum the caller
// combines with the other parts'.
void attend_bf16(const float* q, std::int64_t nq, const kernels::Bf16Kv& kv, std::int64_t begin,
                 std::int64_t end, float scale, float* scores, float* o, const float* sinks,
                 float* max, float* sum, kernels::AttentionVariant variant) {
  if (max == nullptr) {
    kernels::attend_heads_bf16(q, nq, kv, begin, end, scale, scores, o, sinks, variant);
  } else {
    kernels::attend_heads_part_bf16(q, nq, kv, begin, end, scale, scores, o, max, sum, variant);
  }
}

// The same over an 8-bit cache.
void attend_int8(const float* q, std::int64_t nq, const kernels::Int8Kv& kv, std::int64_t begin,
                 std::int64_t end, float scale, float* scores, float* o, const float* sinks,
                 float* max, float* sum, kernels::AttentionVariant variant) {
  if (max == nullptr) {
    kernels::attend_heads_int8(q, nq, kv, begin, end, scale, scores, o, sinks, variant);
  } else {
    kernels::attend_heads_part_int8(q, nq, kv, begin, end, scale, scores, o, max, sum, variant);
  }
}

}  // namespace

void attention(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
               std::int64_t layer, const float* q, const float* k, const float* v, std::int64_t n,
               std::int64_t pos0, float* out, const float* sinks) {
  const std::int64_t hd = spec.head_dim;
  const std::int64_t nh = spec.num_heads;
  const std::int64_t nkv = spec.num_kv_heads;
  for (std::int64_t t = 0; t < n; ++t) {
    cache.store_key(layer, pos0 + t, k + t * nkv * hd);
    cache.store_value(layer, pos0 + t, v + t * nkv * hd);
  }
  const std::int64_t group = nh / nkv;
  const float scale = static_cast<float>(spec.attention_scale);
  const std::int64_t window =
      spec.layer_window.empty() ? 0 : spec.layer_window[static_cast<std::size_t>(layer)];
  const bool bf16 = cache.format() == KvCacheFormat::Bf16;
  const bool int8 = cache.format() == KvCacheFormat::Int8;
  const kernels::AttentionVariant variant = kernels::active_attention_variant();
  const float* values = bf16 || int8 ? nullptr : cache.value(layer, 0);
  const std::int64_t value_stride = nkv * hd;
  // Query heads [head0, head0 + group) over KV head kvh's positions [begin, end), whole
  // (max null) or as a part.
  const auto attend = [&](std::int64_t head0, std::int64_t kvh, std::int64_t begin,
                          std::int64_t end, float* scores, float* o, float* max, float* sum) {
    const float* qh = q + head0 * hd;
    const float* sk = sinks != nullptr && max == nullptr ? sinks + kvh * group : nullptr;
    if (bf16) {
      attend_bf16(qh, group, cache.bf16_head(layer, kvh), begin, end, scale, scores, o, sk, max,
                  sum, variant);
    } else if (int8) {
      attend_int8(qh, group, cache.int8_head(layer, kvh), begin, end, scale, scores, o, sk, max,
                  sum, variant);
    } else if (max == nullptr) {
      kernels::attend_heads(qh, group, cache.tiled_keys(layer, kvh), values + kvh * hd,
                            value_stride, begin, end, hd, scale, scores, o, sk);
    } else {
      kernels::attend_heads_part(qh, group, cache.tiled_keys(layer, kvh), hd, values + kvh * hd,
                                 value_stride, hd, begin, end, scale, scores, o, max, sum);
    }
  };
  // Causal: token t sees itself and everything before it, or within a sliding window the
  // last `window` positions up to it.
  const auto range = [&](std::int64_t t) {
    const std::int64_t end_pos = pos0 + t + 1;
    const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, end_pos - window) : 0;
    return std::pair{first, end_pos};
  };
  // A prompt: one job per few tokens and key/value head, flash-style (each block of keys and
  // values read once for the job's tokens and query heads). Each token's result does not
  // depend on the job it falls in, so the thread count changes no bit of it.
  const std::int64_t longest = range(n - 1).second - range(n - 1).first;
  if (prompt_takes_blocks(n, nkv, threads.count(), longest)) {
    const std::int64_t job_tokens = prompt_job_tokens(n, nkv, threads.count());
    const std::int64_t blocks = (n + job_tokens - 1) / job_tokens;
    threads.parallel_for(blocks * nkv, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t job = begin; job < end; ++job) {
        // The last tokens first: they see the most, so the threads finish together.
        const std::int64_t t0 = (blocks - 1 - job / nkv) * job_tokens;
        const std::int64_t kvh = job % nkv;
        const std::int64_t tokens = std::min(job_tokens, n - t0);
        const std::int64_t head0 = t0 * nh + kvh * group;
        const float* sk = sinks != nullptr ? sinks + kvh * group : nullptr;
        if (bf16) {
          kernels::attend_prompt_bf16(q + head0 * hd, nh * hd, group, tokens,
                                      cache.bf16_head(layer, kvh), pos0 + t0, window, scale, sk,
                                      out + head0 * hd, nh * hd, variant);
        } else if (int8) {
          kernels::attend_prompt_int8(q + head0 * hd, nh * hd, group, tokens,
                                      cache.int8_head(layer, kvh), pos0 + t0, window, scale, sk,
                                      out + head0 * hd, nh * hd, variant);
        } else {
          kernels::attend_prompt(q + head0 * hd, nh * hd, group, tokens,
                                 cache.tiled_keys(layer, kvh), hd, values + kvh * hd, value_stride,
                                 hd, pos0 + t0, window, scale, sk, out + head0 * hd, nh * hd);
        }
      }
    });
    return;
  }
  // A decoded token, or a few after a long context: one job per token and key/value head,
  // the query heads of a group reading its keys and values once between them. These are
  // fewer than a workstation's threads: then each head's context is split into parts that
  // threads take apart, combined after (flash decoding).
  const std::int64_t jobs = n * nkv;
  const std::int64_t parts = attention_parts(jobs, threads.count(), longest);
  if (parts == 1) {
    threads.parallel_for(jobs, 0, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> scores(static_cast<std::size_t>(group * longest));
      for (std::int64_t job = begin; job < end; ++job) {
        const std::int64_t t = job / nkv;
        const std::int64_t kvh = job % nkv;
        const auto [first, end_pos] = range(t);
        const std::int64_t head0 = t * nh + kvh * group;
        attend(head0, kvh, first, end_pos, scores.data(), out + head0 * hd, nullptr, nullptr);
      }
    });
    return;
  }
  std::vector<float> outs(static_cast<std::size_t>(jobs * parts * group * hd));
  std::vector<float> maxes(static_cast<std::size_t>(jobs * parts * group));
  std::vector<float> sums(maxes.size());
  threads.parallel_for(jobs * parts, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scores(static_cast<std::size_t>(group * (longest / parts + 1)));
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t job = task / parts, part = task % parts;
      const std::int64_t t = job / nkv;
      const std::int64_t kvh = job % nkv;
      const auto [first, end_pos] = range(t);
      const std::int64_t len = end_pos - first;
      const std::int64_t head0 = t * nh + kvh * group;
      attend(head0, kvh, first + len * part / parts, first + len * (part + 1) / parts,
             scores.data(), outs.data() + task * group * hd, maxes.data() + task * group,
             sums.data() + task * group);
    }
  });
  for (std::int64_t job = 0; job < jobs; ++job) {
    const std::int64_t t = job / nkv;
    const std::int64_t kvh = job % nkv;
    kernels::combine_attention_parts(
        parts, group, hd, outs.data() + job * parts * group * hd,
        maxes.data() + job * parts * group, sums.data() + job * parts * group,
        sinks != nullptr ? sinks + kvh * group : nullptr, out + (t * nh + kvh * group) * hd);
  }
}

namespace {

// A prompt's latent attention with each head's keys and values expanded from the cache's
// latents (the BF16 or 8-bit cache, into BF16), as the model was trained: a head's key is its nope
// dimensions from the latent beside the shared rotary key, its value its own v_head_dim, so a query
// and position cost qk + v products (320 at DeepSeek-V3) where the absorbed form scores the whole
// latent and rotary key and weighs the whole latent (1088). Expanding costs lora x (nope + v)
// multiply-adds a head and position of the context, once a pass: worth it for a pass of many tokens
// (latent_attention_expands).
constexpr std::int64_t kExpandHeads = 8;  // heads expanded at a time
// The longest context expanded: 8 heads' BF16 keys and values of 320 are 84 MB at 16384
// positions (within the plan's allowance for kernels' buffers); longer ones stay absorbed.
constexpr std::int64_t kExpandPositions = 16384;
constexpr std::int64_t kExpandChunk = 64;  // positions expanded per product

bool latent_attention_expands(const model::ModelSpec& spec, std::int64_t n, std::int64_t pos0) {
  const std::int64_t positions = pos0 + n;
  // The BF16 kernels take keys in pairs of dimensions.
  if (n < 2 || positions > kExpandPositions || spec.qk_head_dim() % 2 != 0) return false;
  const double lora = static_cast<double>(spec.kv_lora_rank);
  const double rope = static_cast<double>(spec.qk_rope_head_dim);
  const double qk = static_cast<double>(spec.qk_head_dim());
  const double v = static_cast<double>(spec.v_head_dim);
  const double nope = static_cast<double>(spec.qk_nope_head_dim);
  // A head's multiply-adds: expanding every position against the queries' saving.
  const double expand = lora * (nope + v) * static_cast<double>(positions);
  const double saved = (2 * lora + rope - qk - v) * static_cast<double>(n) *
                       (static_cast<double>(pos0) + static_cast<double>(n + 1) / 2);
  return saved > expand;
}

void latent_attention_expanded(const CpuThreads& threads, const model::ModelSpec& spec,
                               const KvCache& cache, std::int64_t layer, const float* q,
                               const LatentMatrices& up, std::int64_t n, std::int64_t pos0,
                               float* out) {
  const std::int64_t nh = spec.num_heads, nope = spec.qk_nope_head_dim;
  const std::int64_t rope = spec.qk_rope_head_dim, vd = spec.v_head_dim;
  const std::int64_t lora = spec.kv_lora_rank, qk = nope + rope;
  const std::int64_t positions = pos0 + n;
  // The cache's latents and rotary keys: BF16, or the 8-bit cache's bytes times their scales
  // (rounded to BF16 on the way into the products, finer than their 8 bits).
  const bool int8 = cache.format() == KvCacheFormat::Int8;
  const kernels::Bf16Kv latent16 = int8 ? kernels::Bf16Kv{} : cache.bf16_latent(layer);
  const kernels::Int8Kv latent8 = int8 ? cache.int8_latent(layer) : kernels::Int8Kv{};
  const std::size_t head_keys = kernels::tiled_key_floats(positions, qk);
  const std::size_t head_values = kernels::bf16_value_elements(positions, vd);
  // Keys past the last position and the last pair's other value are never written: 0.
  std::vector<std::uint16_t> keys(static_cast<std::size_t>(kExpandHeads) * head_keys);
  std::vector<std::uint16_t> values(static_cast<std::size_t>(kExpandHeads) * head_values);
  const kernels::AttentionVariant variant = kernels::active_attention_variant();
  const float scale = static_cast<float>(spec.attention_scale);
  const std::int64_t chunks = (positions + kExpandChunk - 1) / kExpandChunk;
  for (std::int64_t h0 = 0; h0 < nh; h0 += kExpandHeads) {
    const std::int64_t heads = std::min(kExpandHeads, nh - h0);
    // HF's kv_b: the heads' [nope | v] rows. Stored in BF16 they are packed for the BF16
    // kernels once a pass: the BF16 cache's latents are BF16 too, so the products stay exact (read
    // as stored, BF16 rows took the generic dot products, a tenth of a 2048-token prompt's time at
    // DeepSeek-V3's shape). Other formats are multiplied as stored: packing them would round
    // the weights to BF16.
    std::optional<kernels::PackedMatrix> packed;
    kernels::WeightMatrix group;
    if (up.kv_b != nullptr) {
      group = up.kv_b->slice_rows(h0 * (nope + vd), heads * (nope + vd));
      if (group.dtype == kernels::DType::BF16 && group.block_scale == nullptr) {
        packed = kernels::pack_bf16(group);
        group.packed = &*packed;
        group.packed_variant =
            kernels::packed_variant_for(kernels::PackedFormat::Bf16, kernels::active_variant());
      }
    }
    const std::int64_t width = nope + vd;  // a head's row of the expansion
    threads.parallel_for(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
      thread_local std::vector<float> x, kv_rows, k_part, key_row;
      thread_local std::vector<std::uint16_t> rope_keys;  // BF16, a position's rope at a time
      x.resize(static_cast<std::size_t>(kExpandChunk * lora));
      kv_rows.resize(static_cast<std::size_t>(kExpandChunk * heads * width));
      rope_keys.resize(static_cast<std::size_t>(kExpandChunk * rope));
      key_row.resize(static_cast<std::size_t>(lora + rope));
      for (std::int64_t c = begin; c < end; ++c) {
        const std::int64_t p0 = c * kExpandChunk;
        const std::int64_t rows = std::min(kExpandChunk, positions - p0);
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int64_t pos = p0 + r;
          std::uint16_t* rk = rope_keys.data() + r * rope;
          if (int8) {
            kernels::int8_load_value(latent8, pos, x.data() + r * lora);
            kernels::int8_load_key(latent8, pos, key_row.data());
            for (std::int64_t d = 0; d < rope; ++d) rk[d] = kernels::f32_to_bf16(key_row[lora + d]);
          } else {
            for (std::int64_t i = 0; i < lora; ++i)
              x[static_cast<std::size_t>(r * lora + i)] =
                  kernels::bf16_to_f32(latent16.values[kernels::bf16_value_index(pos, i, lora)]);
            for (std::int64_t d = 0; d < rope; ++d)
              rk[d] = latent16.keys[kernels::bf16_key_index(pos, lora + d, lora + rope)];
          }
        }
        // Row r's head j: [nope | v] at kv_rows + (r * heads + j) * width. GGUF's k_b (lora x
        // nope a head, applied transposed) and v_b come apart.
        if (up.kv_b != nullptr) {
          kernels::matmul_xwt(x.data(), rows, group, kv_rows.data(), heads * width,
                              kernels::serial_for);
        } else {
          k_part.resize(static_cast<std::size_t>(kExpandChunk * nope));
          for (std::int64_t j = 0; j < heads; ++j) {
            const std::int64_t head = h0 + j;
            kernels::matmul_xw(x.data(), rows, up.k_b->slice_rows(head * lora, lora), k_part.data(),
                               kernels::serial_for);
            for (std::int64_t r = 0; r < rows; ++r)
              std::copy_n(k_part.data() + r * nope, nope, kv_rows.data() + (r * heads + j) * width);
            kernels::matmul_xwt(x.data(), rows, up.v_b->slice_rows(head * vd, vd),
                                kv_rows.data() + j * width + nope, heads * width,
                                kernels::serial_for);
          }
        }
        for (std::int64_t j = 0; j < heads; ++j) {
          std::uint16_t* k = keys.data() + static_cast<std::size_t>(j) * head_keys;
          std::uint16_t* v = values.data() + static_cast<std::size_t>(j) * head_values;
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t pos = p0 + r;
            const float* row = kv_rows.data() + (r * heads + j) * width;
            for (std::int64_t d = 0; d < nope; ++d)
              k[kernels::bf16_key_index(pos, d, qk)] = kernels::f32_to_bf16(row[d]);
            for (std::int64_t d = 0; d < rope; ++d)
              k[kernels::bf16_key_index(pos, nope + d, qk)] = rope_keys[r * rope + d];
            for (std::int64_t d = 0; d < vd; ++d)
              v[kernels::bf16_value_index(pos, d, vd)] = kernels::f32_to_bf16(row[nope + d]);
          }
        }
      }
    });
    // Each head is a key/value head of its own (one query each), its rows the pass's tokens.
    const std::int64_t job_tokens =
        std::max<std::int64_t>(1, std::min(n, n * heads / (2 * threads.count())));
    const std::int64_t blocks = (n + job_tokens - 1) / job_tokens;
    threads.parallel_for(blocks * heads, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t job = begin; job < end; ++job) {
        const std::int64_t t0 = (blocks - 1 - job / heads) * job_tokens;  // the last first
        const std::int64_t j = job % heads, head = h0 + j;
        const kernels::Bf16Kv kv{keys.data() + static_cast<std::size_t>(j) * head_keys, qk,
                                 values.data() + static_cast<std::size_t>(j) * head_values, vd, vd};
        kernels::attend_prompt_bf16(q + (t0 * nh + head) * qk, nh * qk, 1,
                                    std::min(job_tokens, n - t0), kv, pos0 + t0, 0, scale, nullptr,
                                    out + (t0 * nh + head) * vd, nh * vd, variant);
      }
    });
  }
}

}  // namespace

// The cache holds only the normalised latent and the shared rotary key, and each head's query
// is mapped into the latent space (q_nope · W_UK) instead of expanding every cached key; a
// long pass expands them (latent_attention_expanded).
void latent_attention(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
                      std::int64_t layer, const float* q, const float* kv, const LatentMatrices& up,
                      std::int64_t n, std::int64_t pos0, float* out) {
  const std::int64_t nh = spec.num_heads;
  const std::int64_t nope = spec.qk_nope_head_dim;
  const std::int64_t rope = spec.qk_rope_head_dim;
  const std::int64_t vd = spec.v_head_dim;
  const std::int64_t lora = spec.kv_lora_rank;
  const std::int64_t qk = nope + rope;
  const std::int64_t key_dim = lora + rope;
  for (std::int64_t t = 0; t < n; ++t) {
    const float* row = kv + t * key_dim;
    cache.store_latent(layer, pos0 + t, row, row + lora);
  }
  if (cache.format() != KvCacheFormat::F32 && latent_attention_expands(spec, n, pos0)) {
    latent_attention_expanded(threads, spec, cache, layer, q, up, n, pos0, out);
    return;
  }

  // Every head scores against the same keys (the latent and the rotary key) and weighs the
  // same latent, so the heads of a token go through the attention kernel together, each key
  // and latent row read once for eight heads. Queries are [latent | rotary] per head.
  const float scale = static_cast<float>(spec.attention_scale);
  // Heads per pass: all of them for a few tokens (decode: enough jobs for the threads), a
  // block of 16 for a prompt (bounded buffers).
  const std::int64_t block = n >= 64 ? std::min<std::int64_t>(16, nh) : nh;
  constexpr std::int64_t kHeadsPerJob = 8;
  std::vector<float> q_keys(static_cast<std::size_t>(n * block * key_dim));
  std::vector<float> o_latent(static_cast<std::size_t>(n * block * lora));
  const bool bf16 = cache.format() == KvCacheFormat::Bf16;
  const bool int8 = cache.format() == KvCacheFormat::Int8;
  const kernels::AttentionVariant variant = kernels::active_attention_variant();
  const float* keys_t = bf16 || int8 ? nullptr : cache.latent_tiled_keys(layer);
  const float* values = bf16 || int8 ? nullptr : cache.latent(layer, 0);
  // `nq` heads' queries (latent | rotary) over positions [begin, end), whole (max null) or
  // as a part.
  const auto attend = [&](const float* qk, std::int64_t nq, std::int64_t begin, std::int64_t end,
                          float* scores, float* o, float* max, float* sum) {
    if (bf16) {
      attend_bf16(qk, nq, cache.bf16_latent(layer), begin, end, scale, scores, o, nullptr, max, sum,
                  variant);
    } else if (int8) {
      attend_int8(qk, nq, cache.int8_latent(layer), begin, end, scale, scores, o, nullptr, max, sum,
                  variant);
    } else if (max == nullptr) {
      kernels::attend_heads_split(qk, nq, keys_t, key_dim, values, lora, lora, begin, end, scale,
                                  scores, o);
    } else {
      kernels::attend_heads_part(qk, nq, keys_t, key_dim, values, lora, lora, begin, end, scale,
                                 scores, o, max, sum);
    }
  };
  for (std::int64_t h0 = 0; h0 < nh; h0 += block) {
    const std::int64_t heads = std::min(block, nh - h0);
    // One task per head: a decode step's 128 small products would otherwise each be a
    // parallel loop of its own.
    threads.parallel_for(heads, 1, [&](std::int64_t j0, std::int64_t j1) {
      thread_local std::vector<float> q_nope, q_latent;
      q_nope.resize(static_cast<std::size_t>(n * nope));
      q_latent.resize(static_cast<std::size_t>(n * lora));
      for (std::int64_t j = j0; j < j1; ++j) {
        const std::int64_t head = h0 + j;
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(q + (t * nh + head) * qk, nope, q_nope.data() + t * nope);
        if (up.k_b != nullptr) {
          // Split per head as stored: this head's [latent x nope] rows, in their own format.
          kernels::matmul_xwt(q_nope.data(), n, up.k_b->slice_rows(head * lora, lora),
                              q_latent.data(), lora, kernels::serial_for);
        } else {
          const kernels::WeightMatrix w_uk = up.kv_b->slice_rows(head * (nope + vd), nope);
          kernels::matmul_xw(q_nope.data(), n, w_uk, q_latent.data(), kernels::serial_for);
        }
        for (std::int64_t t = 0; t < n; ++t) {
          float* qk_row = q_keys.data() + (t * block + j) * key_dim;
          std::copy_n(q_latent.data() + t * lora, lora, qk_row);
          std::copy_n(q + (t * nh + head) * qk + nope, rope, qk_row + lora);
        }
      }
    });
    const std::int64_t groups = (heads + kHeadsPerJob - 1) / kHeadsPerJob;
    // As for grouped-query attention: a prompt in jobs of a few tokens, flash-style; a
    // decoded token's few jobs split its long context into parts that spare threads take,
    // combined after.
    if (prompt_takes_blocks(n, groups, threads.count(), pos0 + n)) {
      const std::int64_t job_tokens = prompt_job_tokens(n, groups, threads.count());
      const std::int64_t blocks = (n + job_tokens - 1) / job_tokens;
      threads.parallel_for(blocks * groups, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t job = begin; job < end; ++job) {
          const std::int64_t t0 = (blocks - 1 - job / groups) * job_tokens;  // the last first
          const std::int64_t j0 = (job % groups) * kHeadsPerJob;
          const std::int64_t tokens = std::min(job_tokens, n - t0);
          const std::int64_t nq = std::min(kHeadsPerJob, heads - j0);
          const float* qk = q_keys.data() + (t0 * block + j0) * key_dim;
          float* o = o_latent.data() + (t0 * block + j0) * lora;
          if (bf16) {
            kernels::attend_prompt_bf16(qk, block * key_dim, nq, tokens, cache.bf16_latent(layer),
                                        pos0 + t0, 0, scale, nullptr, o, block * lora, variant);
          } else if (int8) {
            kernels::attend_prompt_int8(qk, block * key_dim, nq, tokens, cache.int8_latent(layer),
                                        pos0 + t0, 0, scale, nullptr, o, block * lora, variant);
          } else {
            kernels::attend_prompt(qk, block * key_dim, nq, tokens, keys_t, key_dim, values, lora,
                                   lora, pos0 + t0, 0, scale, nullptr, o, block * lora);
          }
        }
      });
    } else {
      const std::int64_t jobs = n * groups;
      const std::int64_t parts = attention_parts(jobs, threads.count(), pos0 + n);
      if (parts == 1) {
        threads.parallel_for(jobs, 0, [&](std::int64_t begin, std::int64_t end) {
          std::vector<float> scores(static_cast<std::size_t>(kHeadsPerJob * (pos0 + n)));
          for (std::int64_t job = begin; job < end; ++job) {
            const std::int64_t t = job / groups;
            const std::int64_t j0 = (job % groups) * kHeadsPerJob;
            const std::int64_t len = pos0 + t + 1;  // causal
            attend(q_keys.data() + (t * block + j0) * key_dim, std::min(kHeadsPerJob, heads - j0),
                   0, len, scores.data(), o_latent.data() + (t * block + j0) * lora, nullptr,
                   nullptr);
          }
        });
      } else {
        const std::int64_t per_task = kHeadsPerJob * lora;
        std::vector<float> outs(static_cast<std::size_t>(jobs * parts * per_task));
        std::vector<float> maxes(static_cast<std::size_t>(jobs * parts * kHeadsPerJob));
        std::vector<float> sums(maxes.size());
        threads.parallel_for(jobs * parts, 1, [&](std::int64_t begin, std::int64_t end) {
          std::vector<float> scores(
              static_cast<std::size_t>(kHeadsPerJob * ((pos0 + n) / parts + 1)));
          for (std::int64_t task = begin; task < end; ++task) {
            const std::int64_t job = task / parts, part = task % parts;
            const std::int64_t t = job / groups;
            const std::int64_t j0 = (job % groups) * kHeadsPerJob;
            const std::int64_t len = pos0 + t + 1;
            attend(q_keys.data() + (t * block + j0) * key_dim, std::min(kHeadsPerJob, heads - j0),
                   len * part / parts, len * (part + 1) / parts, scores.data(),
                   outs.data() + task * per_task, maxes.data() + task * kHeadsPerJob,
                   sums.data() + task * kHeadsPerJob);
          }
        });
        for (std::int64_t job = 0; job < jobs; ++job) {
          const std::int64_t t = job / groups;
          const std::int64_t j0 = (job % groups) * kHeadsPerJob;
          const std::int64_t nq = std::min(kHeadsPerJob, heads - j0);
          // Each part's results are laid out for kHeadsPerJob queries; gather the first nq.
          thread_local std::vector<float> part_outs, part_maxes, part_sums;
          part_outs.resize(static_cast<std::size_t>(parts * nq * lora));
          part_maxes.resize(static_cast<std::size_t>(parts * nq));
          part_sums.resize(part_maxes.size());
          for (std::int64_t p = 0; p < parts; ++p) {
            const std::int64_t task = job * parts + p;
            std::copy_n(outs.data() + task * per_task, nq * lora, part_outs.data() + p * nq * lora);
            std::copy_n(maxes.data() + task * kHeadsPerJob, nq, part_maxes.data() + p * nq);
            std::copy_n(sums.data() + task * kHeadsPerJob, nq, part_sums.data() + p * nq);
          }
          kernels::combine_attention_parts(parts, nq, lora, part_outs.data(), part_maxes.data(),
                                           part_sums.data(), nullptr,
                                           o_latent.data() + (t * block + j0) * lora);
        }
      }
    }
    threads.parallel_for(heads, 1, [&](std::int64_t j0, std::int64_t j1) {
      thread_local std::vector<float> gathered, v_head;
      gathered.resize(static_cast<std::size_t>(n * lora));
      v_head.resize(static_cast<std::size_t>(n * vd));
      for (std::int64_t j = j0; j < j1; ++j) {
        const std::int64_t head = h0 + j;
        const kernels::WeightMatrix w_uv = up.v_b != nullptr
                                               ? up.v_b->slice_rows(head * vd, vd)
                                               : up.kv_b->slice_rows(head * (nope + vd) + nope, vd);
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(o_latent.data() + (t * block + j) * lora, lora, gathered.data() + t * lora);
        kernels::matmul_xwt(gathered.data(), n, w_uv, v_head.data(), vd, kernels::serial_for);
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(v_head.data() + t * vd, vd, out + (t * nh + head) * vd);
      }
    });
  }
}

void route(const float* logits, std::int64_t n, const RoutingParams& p, const float* bias,
           std::int32_t* ids, float* weights) {
  const Routing r = p.scoring == model::RouterScoring::Sigmoid
                        ? route_grouped_sigmoid(logits, bias, n, p.experts, p.k, p.groups,
                                                p.top_groups, p.normalize, p.scaling)
                        : route_softmax(logits, n, p.experts, p.k, p.normalize, p.groups,
                                        p.top_groups, p.scaling);
  std::copy(r.experts.begin(), r.experts.end(), ids);
  std::copy(r.weights.begin(), r.weights.end(), weights);
}

}  // namespace tandem::backend::cpu_ops
