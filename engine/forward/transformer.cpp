#include "engine/forward/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/cpu/attention.h"

namespace tandem::forward {
namespace {

// DeepSeek-V3's low-rank norms use the library default, not config.rms_norm_eps.
constexpr double kLatentNormEps = 1e-6;

// Indices of the k largest values, largest first; ties go to the lower index.
std::vector<std::int32_t> top_k(const float* v, std::int64_t n, std::int64_t k) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [v](std::int32_t a, std::int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

}  // namespace

void rms_norm(const float* x, const float* weight, std::int64_t n, double eps, float* y) {
  double ss = 0.0;
  for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

Routing route_softmax(const float* logits, std::int64_t tokens, std::int64_t experts,
                      std::int64_t k, bool normalize) {
  Routing r;
  r.experts.resize(static_cast<std::size_t>(tokens * k));
  r.weights.resize(static_cast<std::size_t>(tokens * k));
  std::vector<float> p(static_cast<std::size_t>(experts));
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::copy(logits + t * experts, logits + (t + 1) * experts, p.begin());
    kernels::softmax_inplace(p.data(), experts);
    const auto chosen = top_k(p.data(), experts, k);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) sum += p[static_cast<std::size_t>(chosen[j])];
    for (std::int64_t j = 0; j < k; ++j) {
      const float w = p[static_cast<std::size_t>(chosen[j])];
      r.experts[static_cast<std::size_t>(t * k + j)] = chosen[static_cast<std::size_t>(j)];
      r.weights[static_cast<std::size_t>(t * k + j)] = normalize ? w / sum : w;
    }
  }
  return r;
}

Routing route_grouped_sigmoid(const float* logits, const float* bias, std::int64_t tokens,
                              std::int64_t experts, std::int64_t k, std::int64_t groups,
                              std::int64_t top_groups, bool normalize, float scaling) {
  Routing r;
  r.experts.resize(static_cast<std::size_t>(tokens * k));
  r.weights.resize(static_cast<std::size_t>(tokens * k));
  const std::int64_t per_group = experts / groups;
  std::vector<float> scores(static_cast<std::size_t>(experts));
  std::vector<float> choice(static_cast<std::size_t>(experts));
  std::vector<float> group_score(static_cast<std::size_t>(groups));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t e = 0; e < experts; ++e) {
      scores[static_cast<std::size_t>(e)] = 1.0f / (1.0f + std::exp(-logits[t * experts + e]));
      choice[static_cast<std::size_t>(e)] =
          scores[static_cast<std::size_t>(e)] + (bias ? bias[e] : 0.0f);
    }
    // A group's score is the sum of its two best experts; only the best groups stay eligible.
    for (std::int64_t g = 0; g < groups; ++g) {
      const float* gs = choice.data() + g * per_group;
      const auto best = top_k(gs, per_group, std::min<std::int64_t>(2, per_group));
      float s = 0.0f;
      for (std::int32_t b : best) s += gs[b];
      group_score[static_cast<std::size_t>(g)] = s;
    }
    const auto kept = top_k(group_score.data(), groups, top_groups);
    std::vector<bool> eligible(static_cast<std::size_t>(groups), false);
    for (std::int32_t g : kept) eligible[static_cast<std::size_t>(g)] = true;
    for (std::int64_t e = 0; e < experts; ++e) {
      if (!eligible[static_cast<std::size_t>(e / per_group)])
        choice[static_cast<std::size_t>(e)] = 0.0f;
    }
    const auto chosen = top_k(choice.data(), experts, k);
    float sum = 0.0f;
    for (std::int32_t e : chosen) sum += scores[static_cast<std::size_t>(e)];
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t e = chosen[static_cast<std::size_t>(j)];
      float w = scores[static_cast<std::size_t>(e)];
      if (normalize) w /= (sum + 1e-20f);
      r.experts[static_cast<std::size_t>(t * k + j)] = e;
      r.weights[static_cast<std::size_t>(t * k + j)] = w * scaling;
    }
  }
  return r;
}

Transformer::Transformer(const model::ModelSpec& spec, const model::ModelWeights& weights,
                         backend::NumaPools& pools)
    : spec_(spec),
      weights_(weights),
      pool_(pools),
      parallel_(pools.as_parallel_for()),
      rope_(spec.rope, spec.rope_dim()) {
  for (const model::LayerWeights& l : weights.layers) {
    if (!l.moe || l.experts.experts.empty()) continue;
    const auto slices = static_cast<int>(l.experts.experts[0].slices.size());
    if (slices > 1 && slices != pools.pools()) {
      throw std::invalid_argument("the experts are split for " + std::to_string(slices) +
                                  " pools but the threads are in " + std::to_string(pools.pools()) +
                                  "; make the backend::NumaPools with the model's pool count");
    }
  }
}

void Transformer::matmul(const float* x, std::int64_t n, const kernels::WeightMatrix& w, float* y) {
  kernels::matmul_xwt(x, n, w, y, w.rows, parallel_);
}

void Transformer::forward(std::span<const std::int32_t> tokens, backend::KvCache& cache,
                          std::vector<float>& logits, bool all_logits) {
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t pos0 = cache.size();
  if (n == 0) return;
  if (pos0 + n > cache.capacity()) {
    throw std::length_error("the context is full: " + std::to_string(pos0 + n) +
                            " tokens do not fit in " + std::to_string(cache.capacity()));
  }
  std::vector<float> x(static_cast<std::size_t>(n * h));
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int32_t id = tokens[static_cast<std::size_t>(t)];
    if (id < 0 || id >= spec_.vocab_size) {
      throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary of " +
                              std::to_string(spec_.vocab_size));
    }
    weights_.embedding.row_f32(id, x.data() + t * h);
  }

  std::vector<float> normed(x.size());
  std::vector<float> branch(x.size());
  using Clock = std::chrono::steady_clock;
  const auto ns_since = [](Clock::time_point t) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count());
  };
  const auto forward_start = Clock::now();
  std::uint64_t attention_ns = 0, expert_ns = 0;
  current_layer_ = 0;
  for (std::int64_t l = 0; l < spec_.num_layers; ++l) {
    current_layer_ = l;
    const model::LayerWeights& lw = weights_.layers[static_cast<std::size_t>(l)];
    for (std::int64_t t = 0; t < n; ++t) {
      rms_norm(x.data() + t * h, lw.attention_norm.data(), h, spec_.rms_norm_eps,
               normed.data() + t * h);
    }
    const auto attention_start = Clock::now();
    if (spec_.mla) {
      latent_attention(l, normed.data(), n, pos0, cache, branch.data());
    } else {
      attention(l, normed.data(), n, pos0, cache, branch.data());
    }
    attention_ns += ns_since(attention_start);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += branch[i];

    for (std::int64_t t = 0; t < n; ++t) {
      rms_norm(x.data() + t * h, lw.ffn_norm.data(), h, spec_.rms_norm_eps, normed.data() + t * h);
    }
    const auto ffn_start = Clock::now();
    if (lw.moe) {
      mixture_of_experts(lw.experts, normed.data(), n, branch.data());
      expert_ns += ns_since(ffn_start);
    } else {
      feed_forward(lw.dense, normed.data(), n, branch.data());
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += branch[i];
  }
  cache.set_size(pos0 + n);

  const std::int64_t first = all_logits ? 0 : n - 1;
  const std::int64_t rows = n - first;
  for (std::int64_t t = first; t < n; ++t) {
    rms_norm(x.data() + t * h, weights_.final_norm.data(), h, spec_.rms_norm_eps,
             normed.data() + (t - first) * h);
  }
  logits.resize(static_cast<std::size_t>(rows * spec_.vocab_size));
  matmul(normed.data(), rows, weights_.output, logits.data());
  if (metrics_ != nullptr) {
    const std::uint64_t total = ns_since(forward_start);
    metrics_->add_tokens(static_cast<std::uint64_t>(n));
    metrics_->add_attention_ns(attention_ns);
    metrics_->add_cpu_expert_ns(expert_ns);
    metrics_->add_other_ns(total > attention_ns + expert_ns ? total - attention_ns - expert_ns : 0);
  }
}

void Transformer::attention(std::int64_t layer, const float* x, std::int64_t n, std::int64_t pos0,
                            backend::KvCache& cache, float* out) {
  const model::AttentionWeights& w = weights_.layers[static_cast<std::size_t>(layer)].attention;
  const std::int64_t hd = spec_.head_dim;
  const std::int64_t nh = spec_.num_heads;
  const std::int64_t nkv = spec_.num_kv_heads;
  std::vector<float> q(static_cast<std::size_t>(n * nh * hd));
  std::vector<float> k(static_cast<std::size_t>(n * nkv * hd));
  std::vector<float> v(static_cast<std::size_t>(n * nkv * hd));
  matmul(x, n, w.q, q.data());
  matmul(x, n, w.k, k.data());
  matmul(x, n, w.v, v.data());
  for (std::int64_t t = 0; t < n; ++t) {
    if (spec_.qk_norm) {
      for (std::int64_t head = 0; head < nh; ++head) {
        float* qh = q.data() + (t * nh + head) * hd;
        rms_norm(qh, w.q_norm.data(), hd, spec_.rms_norm_eps, qh);
      }
      for (std::int64_t head = 0; head < nkv; ++head) {
        float* kh = k.data() + (t * nkv + head) * hd;
        rms_norm(kh, w.k_norm.data(), hd, spec_.rms_norm_eps, kh);
      }
    }
    rope_.apply_heads(q.data() + t * nh * hd, nh, hd, pos0 + t);
    rope_.apply_heads(k.data() + t * nkv * hd, nkv, hd, pos0 + t);
    cache.store_key(layer, pos0 + t, k.data() + t * nkv * hd);
    std::copy_n(v.data() + t * nkv * hd, nkv * hd, cache.value(layer, pos0 + t));
  }

  const std::int64_t group = nh / nkv;
  const float scale = static_cast<float>(spec_.attention_scale);
  std::vector<float> attended(static_cast<std::size_t>(n * nh * hd));
  // One job per (token, key/value head): the query heads of a group read its keys and values
  // once between them.
  pool_.parallel_for(n * nkv, [&](std::int64_t begin, std::int64_t end) {
    std::vector<float> scores(static_cast<std::size_t>(group * (pos0 + n)));
    for (std::int64_t job = begin; job < end; ++job) {
      const std::int64_t t = job / nkv;
      const std::int64_t kvh = job % nkv;
      const std::int64_t len = pos0 + t + 1;  // causal: this token and everything before it
      const std::int64_t head0 = t * nh + kvh * group;
      kernels::attend_heads(q.data() + head0 * hd, group, cache.keys_transposed(layer, kvh),
                            cache.capacity(), cache.value(layer, 0) + kvh * hd, nkv * hd, len, hd,
                            scale, scores.data(), attended.data() + head0 * hd);
    }
  });
  matmul(attended.data(), n, w.o, out);
}

// Multi-head latent attention with the up-projections absorbed: the cache holds only the
// normalised latent and the shared rotary key, and each head's query is mapped into the
// latent space (q_nope · W_UK) instead of expanding every cached key.
void Transformer::latent_attention(std::int64_t layer, const float* x, std::int64_t n,
                                   std::int64_t pos0, backend::KvCache& cache, float* out) {
  const model::AttentionWeights& w = weights_.layers[static_cast<std::size_t>(layer)].attention;
  const std::int64_t nh = spec_.num_heads;
  const std::int64_t nope = spec_.qk_nope_head_dim;
  const std::int64_t rope = spec_.qk_rope_head_dim;
  const std::int64_t vd = spec_.v_head_dim;
  const std::int64_t lora = spec_.kv_lora_rank;
  const std::int64_t qk = nope + rope;

  std::vector<float> q(static_cast<std::size_t>(n * nh * qk));
  if (spec_.q_lora_rank > 0) {
    std::vector<float> qa(static_cast<std::size_t>(n * spec_.q_lora_rank));
    matmul(x, n, w.q_a, qa.data());
    for (std::int64_t t = 0; t < n; ++t) {
      float* row = qa.data() + t * spec_.q_lora_rank;
      rms_norm(row, w.q_a_norm.data(), spec_.q_lora_rank, kLatentNormEps, row);
    }
    matmul(qa.data(), n, w.q_b, q.data());
  } else {
    matmul(x, n, w.q, q.data());
  }
  std::vector<float> kv(static_cast<std::size_t>(n * (lora + rope)));
  matmul(x, n, w.kv_a, kv.data());
  std::vector<float> latent(static_cast<std::size_t>(lora)),
      rope_key(static_cast<std::size_t>(rope));
  for (std::int64_t t = 0; t < n; ++t) {
    const float* row = kv.data() + t * (lora + rope);
    rms_norm(row, w.kv_a_norm.data(), lora, kLatentNormEps, latent.data());
    std::copy_n(row + lora, rope, rope_key.data());
    rope_.apply(rope_key.data(), pos0 + t);
    cache.store_latent(layer, pos0 + t, latent.data(), rope_key.data());
    rope_.apply_heads(q.data() + t * nh * qk + nope, nh, qk, pos0 + t);
  }

  // Every head scores against the same keys (the latent and the rotary key) and weighs the
  // same latent, so the heads of a token go through the attention kernel together, each key
  // and latent row read once for eight heads. Queries are [latent | rotary] per head.
  const float scale = static_cast<float>(spec_.attention_scale);
  const std::int64_t key_dim = lora + rope;
  // Heads per pass: all of them for a few tokens (decode: enough jobs for the threads), a
  // block of 16 for a prompt (bounded buffers).
  const std::int64_t block = n >= 64 ? std::min<std::int64_t>(16, nh) : nh;
  constexpr std::int64_t kHeadsPerJob = 8;
  std::vector<float> attended(static_cast<std::size_t>(n * nh * vd));
  std::vector<float> q_keys(static_cast<std::size_t>(n * block * key_dim));
  std::vector<float> o_latent(static_cast<std::size_t>(n * block * lora));
  const kernels::ParallelFor serial =
      [](std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body) {
        body(0, count);
      };
  const float* keys_t = cache.latent_keys_transposed(layer);
  const float* values = cache.latent(layer, 0);
  for (std::int64_t h0 = 0; h0 < nh; h0 += block) {
    const std::int64_t heads = std::min(block, nh - h0);
    // One task per head: a decode step's 128 small products would otherwise each be a
    // parallel loop of its own.
    pool_.parallel_for(heads, 1, [&](std::int64_t j0, std::int64_t j1) {
      thread_local std::vector<float> q_nope, q_latent;
      q_nope.resize(static_cast<std::size_t>(n * nope));
      q_latent.resize(static_cast<std::size_t>(n * lora));
      for (std::int64_t j = j0; j < j1; ++j) {
        const std::int64_t head = h0 + j;
        const kernels::WeightMatrix w_uk = w.kv_b.slice_rows(head * (nope + vd), nope);
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(q.data() + (t * nh + head) * qk, nope, q_nope.data() + t * nope);
        kernels::matmul_xw(q_nope.data(), n, w_uk, q_latent.data(), serial);
        for (std::int64_t t = 0; t < n; ++t) {
          float* qk_row = q_keys.data() + (t * block + j) * key_dim;
          std::copy_n(q_latent.data() + t * lora, lora, qk_row);
          std::copy_n(q.data() + (t * nh + head) * qk + nope, rope, qk_row + lora);
        }
      }
    });
    const std::int64_t groups = (heads + kHeadsPerJob - 1) / kHeadsPerJob;
    pool_.parallel_for(n * groups, [&](std::int64_t begin, std::int64_t end) {
      std::vector<float> scores(static_cast<std::size_t>(kHeadsPerJob * (pos0 + n)));
      for (std::int64_t job = begin; job < end; ++job) {
        const std::int64_t t = job / groups;
        const std::int64_t j0 = (job % groups) * kHeadsPerJob;
        const std::int64_t len = pos0 + t + 1;  // causal
        kernels::attend_heads_split(q_keys.data() + (t * block + j0) * key_dim,
                                    std::min(kHeadsPerJob, heads - j0), keys_t, cache.capacity(),
                                    key_dim, values, lora, lora, len, scale, scores.data(),
                                    o_latent.data() + (t * block + j0) * lora);
      }
    });
    pool_.parallel_for(heads, 1, [&](std::int64_t j0, std::int64_t j1) {
      thread_local std::vector<float> gathered, v_head;
      gathered.resize(static_cast<std::size_t>(n * lora));
      v_head.resize(static_cast<std::size_t>(n * vd));
      for (std::int64_t j = j0; j < j1; ++j) {
        const std::int64_t head = h0 + j;
        const kernels::WeightMatrix w_uv = w.kv_b.slice_rows(head * (nope + vd) + nope, vd);
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(o_latent.data() + (t * block + j) * lora, lora, gathered.data() + t * lora);
        kernels::matmul_xwt(gathered.data(), n, w_uv, v_head.data(), vd, serial);
        for (std::int64_t t = 0; t < n; ++t)
          std::copy_n(v_head.data() + t * vd, vd, attended.data() + (t * nh + head) * vd);
      }
    });
  }
  matmul(attended.data(), n, w.o, out);
}

void Transformer::feed_forward(const model::FeedForwardWeights& w, const float* x, std::int64_t n,
                               float* out) {
  const std::int64_t inner = w.gate.rows;
  std::vector<float> gate(static_cast<std::size_t>(n * inner));
  std::vector<float> up(static_cast<std::size_t>(n * inner));
  matmul(x, n, w.gate, gate.data());
  matmul(x, n, w.up, up.data());
  kernels::silu_mul(gate.data(), up.data(), static_cast<std::int64_t>(gate.size()));
  matmul(gate.data(), n, w.down, out);
}

void Transformer::mixture_of_experts(const model::MoeWeights& w, const float* x, std::int64_t n,
                                     float* out) {
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t experts = spec_.num_experts;
  const std::int64_t k = spec_.experts_per_token;
  std::vector<float> logits(static_cast<std::size_t>(n * experts));
  matmul(x, n, w.router, logits.data());
  const Routing routing =
      spec_.scoring == model::RouterScoring::Sigmoid
          ? route_grouped_sigmoid(logits.data(),
                                  w.score_bias.empty() ? nullptr : w.score_bias.data(), n, experts,
                                  k, spec_.n_group, spec_.topk_group, spec_.norm_topk_prob,
                                  static_cast<float>(spec_.routed_scaling_factor))
          : route_softmax(logits.data(), n, experts, k, spec_.norm_topk_prob);

  if (metrics_ != nullptr) {
    for (std::int32_t e : routing.experts) metrics_->add_hit(current_layer_, e);
  }
  // Bucket the (token, weight) pairs per expert: O(tokens x k + experts).
  std::vector<std::int64_t> count(static_cast<std::size_t>(experts + 1), 0);
  for (std::int32_t e : routing.experts) ++count[static_cast<std::size_t>(e) + 1];
  for (std::int64_t e = 0; e < experts; ++e)
    count[static_cast<std::size_t>(e + 1)] += count[static_cast<std::size_t>(e)];
  std::vector<std::int64_t> slot_token(routing.experts.size());
  std::vector<float> slot_weight(routing.experts.size());
  std::vector<std::int64_t> fill(count.begin(), count.end() - 1);
  for (std::size_t i = 0; i < routing.experts.size(); ++i) {
    const auto e = static_cast<std::size_t>(routing.experts[i]);
    const std::int64_t s = fill[e]++;
    slot_token[static_cast<std::size_t>(s)] = static_cast<std::int64_t>(i) / k;
    slot_weight[static_cast<std::size_t>(s)] = routing.weights[i];
  }

  std::fill(out, out + n * h, 0.0f);
  if (!w.experts.empty() && (w.experts[0].gate.packed != nullptr || !w.experts[0].slices.empty())) {
    packed_experts(w, x, count, slot_token, slot_weight, out);
  } else {
    std::vector<float> gathered;
    std::vector<float> result;
    for (std::int64_t e = 0; e < experts; ++e) {
      const std::int64_t begin = count[static_cast<std::size_t>(e)];
      const std::int64_t rows = count[static_cast<std::size_t>(e + 1)] - begin;
      if (rows == 0) continue;
      gathered.resize(static_cast<std::size_t>(rows * h));
      result.resize(static_cast<std::size_t>(rows * h));
      for (std::int64_t r = 0; r < rows; ++r) {
        std::copy_n(x + slot_token[static_cast<std::size_t>(begin + r)] * h, h,
                    gathered.data() + r * h);
      }
      feed_forward(w.experts[static_cast<std::size_t>(e)], gathered.data(), rows, result.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const float wgt = slot_weight[static_cast<std::size_t>(begin + r)];
        float* o = out + slot_token[static_cast<std::size_t>(begin + r)] * h;
        const float* y = result.data() + r * h;
        for (std::int64_t d = 0; d < h; ++d) o[d] += wgt * y[d];
      }
    }
  }
  std::vector<float> result;
  if (w.shared) {
    result.resize(static_cast<std::size_t>(n * h));
    feed_forward(*w.shared, x, n, result.data());
    for (std::int64_t i = 0; i < n * h; ++i) out[i] += result[static_cast<std::size_t>(i)];
  }
}

// The experts with packed weights, as two parallel jobs over (expert x row block) tasks:
// gate and up with SiLU(gate)*up fused, then down; the weighted sum is added per token.
// Two jobs instead of three per active expert keep a decode step's synchronisation low.
// Experts split into slices (one per pool) run both jobs on every pool at once, each pool
// on its own slice; the pools' partial down outputs are summed in pool order, so the result
// does not depend on timing. Unsplit experts are one slice run on all threads.
void Transformer::packed_experts(const model::MoeWeights& w, const float* x,
                                 const std::vector<std::int64_t>& count,
                                 const std::vector<std::int64_t>& slot_token,
                                 const std::vector<float>& slot_weight, float* out) {
  const std::int64_t h = spec_.hidden_size;
  const std::int64_t inner = spec_.moe_intermediate_size;
  const auto slices =
      static_cast<std::int64_t>(std::max<std::size_t>(1, w.experts[0].slices.size()));
  const auto slice_of = [inner](const model::FeedForwardWeights& f, std::int64_t s) {
    return f.slices.empty() ? model::ExpertSlice{0,           inner,         f.gate.packed,
                                                 f.up.packed, f.down.packed, f.gate.packed_variant}
                            : f.slices[static_cast<std::size_t>(s)];
  };
  // Runs body(slice, begin, end) over [0, tasks) for every slice.
  const auto for_each_slice = [&](std::int64_t tasks, const backend::NumaPools::PoolBody& body) {
    if (slices == 1) {
      pool_.parallel_for(tasks, 1, [&](std::int64_t t0, std::int64_t t1) { body(0, t0, t1); });
    } else {
      pool_.parallel_for_each_pool(tasks, 1, body);
    }
  };
  struct Active {
    std::int64_t expert, begin, rows;
  };
  std::vector<Active> active;
  for (std::int64_t e = 0; e < spec_.num_experts; ++e) {
    const std::int64_t rows =
        count[static_cast<std::size_t>(e + 1)] - count[static_cast<std::size_t>(e)];
    if (rows > 0) active.push_back({e, count[static_cast<std::size_t>(e)], rows});
  }
  const auto actives = static_cast<std::int64_t>(active.size());
  const std::int64_t slots = count.back();
  // All slices of all experts have the shapes of the first.
  const model::ExpertSlice shape = slice_of(w.experts[0], 0);
  const std::int64_t width = shape.width;
  moe_inputs_.resize(active.size());
  moe_hidden_.resize(static_cast<std::size_t>(slices * actives));
  // Quantising the activations is a tenth of a prompt's expert time: spread it over the
  // threads when there is enough of it (a decode step's few rows are quicker alone).
  const auto each_active = [&](std::int64_t n, const std::function<void(std::int64_t)>& body) {
    if (slots < 32) {
      for (std::int64_t i = 0; i < n; ++i) body(i);
    } else {
      pool_.parallel_for(n, 1, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) body(i);
      });
    }
  };
  each_active(actives, [&](std::int64_t a) {
    thread_local std::vector<float> gathered;
    const Active& act = active[static_cast<std::size_t>(a)];
    gathered.resize(static_cast<std::size_t>(act.rows * h));
    for (std::int64_t r = 0; r < act.rows; ++r) {
      std::copy_n(x + slot_token[static_cast<std::size_t>(act.begin + r)] * h, h,
                  gathered.data() + r * h);
    }
    kernels::pack_activations_for(*shape.gate, gathered.data(), act.rows,
                                  moe_inputs_[static_cast<std::size_t>(a)]);
  });
  const kernels::CpuVariant variant = shape.variant;
  // Row blocks per task: long runs of one matrix let the prefetchers stream it (a decode
  // step reads each expert once), yet at least about eight tasks per thread keep the threads
  // evenly loaded. Even, so the kernels' two- and four-block tiles apply.
  const std::int64_t threads = pool_.threads();
  const auto blocks_per_task = [&](std::int64_t blocks) {
    const std::int64_t fair = actives * blocks / (8 * threads);
    return std::clamp<std::int64_t>(fair / 2 * 2, 2, 8);
  };
  const std::int64_t blocks_gate = blocks_per_task(shape.gate->blocks);
  // moe_gate_ and moe_up_: per slice, [slots x width].
  const std::int64_t inner_tasks = (shape.gate->blocks + blocks_gate - 1) / blocks_gate;
  moe_gate_.resize(static_cast<std::size_t>(slices * slots * width));
  moe_up_.resize(static_cast<std::size_t>(slices * slots * width));
  for_each_slice(actives * inner_tasks, [&](int s, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const Active& a = active[static_cast<std::size_t>(t / inner_tasks)];
      const model::ExpertSlice f = slice_of(w.experts[static_cast<std::size_t>(a.expert)], s);
      const std::int64_t b0 = (t % inner_tasks) * blocks_gate;
      const std::int64_t b1 = std::min(f.gate->blocks, b0 + blocks_gate);
      float* g = moe_gate_.data() + (s * slots + a.begin) * width;
      float* u = moe_up_.data() + (s * slots + a.begin) * width;
      const auto& in = moe_inputs_[static_cast<std::size_t>(t / inner_tasks)];
      kernels::packed_matmul(*f.gate, in, g, width, b0, b1, variant);
      kernels::packed_matmul(*f.up, in, u, width, b0, b1, variant);
      const std::int64_t c0 = b0 * kernels::kPackRows;
      const std::int64_t c1 = std::min(width, b1 * kernels::kPackRows);
      for (std::int64_t r = 0; r < a.rows; ++r)
        kernels::silu_mul(g + r * width + c0, u + r * width + c0, c1 - c0);
    }
  });
  each_active(slices * actives, [&](std::int64_t i) {
    const std::int64_t s = i / actives;
    const Active& act = active[static_cast<std::size_t>(i % actives)];
    kernels::pack_activations_for(*slice_of(w.experts[0], s).down,
                                  moe_gate_.data() + (s * slots + act.begin) * width, act.rows,
                                  moe_hidden_[static_cast<std::size_t>(i)]);
  });
  // moe_out_: per slice, the partial down outputs [slots x h].
  const std::int64_t blocks_down = blocks_per_task(shape.down->blocks);
  const std::int64_t hidden_tasks = (shape.down->blocks + blocks_down - 1) / blocks_down;
  moe_out_.resize(static_cast<std::size_t>(slices * slots * h));
  for_each_slice(actives * hidden_tasks, [&](int s, std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t a = t / hidden_tasks;
      const Active& act = active[static_cast<std::size_t>(a)];
      const model::ExpertSlice f = slice_of(w.experts[static_cast<std::size_t>(act.expert)], s);
      const std::int64_t b0 = (t % hidden_tasks) * blocks_down;
      const std::int64_t b1 = std::min(f.down->blocks, b0 + blocks_down);
      kernels::packed_matmul(*f.down, moe_hidden_[static_cast<std::size_t>(s * actives + a)],
                             moe_out_.data() + (s * slots + act.begin) * h, h, b0, b1, variant);
    }
  });
  if (slices > 1) {
    const auto sum_partials = [&](std::int64_t s0, std::int64_t s1) {
      for (std::int64_t s = s0; s < s1; ++s) {
        float* sum = moe_out_.data() + s * h;
        for (std::int64_t p = 1; p < slices; ++p) {
          const float* part = moe_out_.data() + (p * slots + s) * h;
          for (std::int64_t d = 0; d < h; ++d) sum[d] += part[d];
        }
      }
    };
    // A decode step's few slots add up faster here than the pools wake up for them.
    constexpr std::int64_t kParallelSumSlots = 64;
    if (slots < kParallelSumSlots)
      sum_partials(0, slots);
    else
      pool_.parallel_for(slots, sum_partials);
  }
  for (std::int64_t s = 0; s < slots; ++s) {
    kernels::axpy_f32(slot_weight[static_cast<std::size_t>(s)], moe_out_.data() + s * h,
                      out + slot_token[static_cast<std::size_t>(s)] * h, h);
  }
}

}  // namespace tandem::forward
