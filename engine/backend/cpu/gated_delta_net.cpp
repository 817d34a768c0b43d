// Qwen3-Next's gated DeltaNet layer on the CPU: the causal convolution, then the gated delta
// rule per value head, token by token (decode) or a chunk of tokens at a time (prompts),
// then the RMSNorm gated by SiLU(z).
//
// The rule, per head, with the state S (key dim x value dim), a decay e^g (g <= 0) and a
// step beta in (0, 1) per token:
//   S' = e^g S;   u = beta (v - S'^T k);   S = S' + k u^T;   o = S^T q.
// Over a chunk of L tokens starting from S0, with G_t = g_1 + ... + g_t, unrolling gives
//   S_t = e^{G_t} S0 + sum_{j<=t} e^{G_t - G_j} k_j u_j^T,
//   u_t = beta_t (v_t - e^{G_t} S0^T k_t) - beta_t sum_{j<t} e^{G_t - G_j} (k_t . k_j) u_j,
//   o_t = e^{G_t} S0^T q_t + sum_{j<=t} e^{G_t - G_j} (q_t . k_j) u_j,
// so the state is read and written once per chunk instead of four times per token, and the
// rest is products of the chunk's own rows (L x L, L x dim), which stay in cache. Only
// e^{negative} is ever taken, so nothing overflows however strong the decay.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/onednn_matmul.h"

namespace tandem::backend::cpu_ops {
namespace {

float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

// One value head's inputs for tokens [t0, t0 + len): normalised q (scaled) and k, v, the
// step and the log decay.
struct HeadRows {
  std::int64_t dk = 0, dv = 0, len = 0;
  std::vector<float> q, k, v, beta, g;
  void resize(std::int64_t n) {
    len = n;
    q.resize(static_cast<std::size_t>(n * dk));
    k.resize(q.size());
    v.resize(static_cast<std::size_t>(n * dv));
    beta.resize(static_cast<std::size_t>(n));
    g.resize(beta.size());
  }
};

struct Layout {
  std::int64_t nk, nv, dk, dv, ratio, channels, row;
  float q_scale;
};

void l2_normalise(const float* x, float* y, std::int64_t n, float scale) {
  const float sum = kernels::dot_f32(x, x, n);
  const float inv = scale / std::sqrt(sum + 1e-6f);
  for (std::int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
}

void gather(const Layout& l, std::int64_t h, const float* mixed, const float* ba,
            const float* a_log, const float* dt_bias, std::int64_t t0, std::int64_t len,
            HeadRows& r) {
  r.resize(len);
  const std::int64_t kh = h / l.ratio;
  const float rate = -std::exp(a_log[h]);
  for (std::int64_t t = 0; t < len; ++t) {
    const float* m = mixed + (t0 + t) * l.channels;
    l2_normalise(m + kh * l.dk, r.q.data() + t * l.dk, l.dk, l.q_scale);
    l2_normalise(m + l.nk * l.dk + kh * l.dk, r.k.data() + t * l.dk, l.dk, 1.0f);
    std::copy_n(m + 2 * l.nk * l.dk + h * l.dv, l.dv, r.v.data() + t * l.dv);
    const float* bat = ba + (t0 + t) * 2 * l.nv;
    r.beta[static_cast<std::size_t>(t)] = sigmoid(bat[h]);
    const float a = bat[l.nv + h] + dt_bias[h];
    const float softplus = a > 20.0f ? a : std::log1p(std::exp(a));
    r.g[static_cast<std::size_t>(t)] = rate * softplus;
  }
}

// Token by token, the state read twice per token: once for S^T k (the decay applied to the
// product instead), once to update it and accumulate o = S^T q. o [len x dv].
void recurrent(const HeadRows& r, float* s, float* o) {
  const std::int64_t dk = r.dk, dv = r.dv;
  std::vector<float> u(static_cast<std::size_t>(dv));
  for (std::int64_t t = 0; t < r.len; ++t) {
    const float* q = r.q.data() + t * dk;
    const float* k = r.k.data() + t * dk;
    const float decay = std::exp(r.g[static_cast<std::size_t>(t)]);
    std::fill(u.begin(), u.end(), 0.0f);
    for (std::int64_t i = 0; i < dk; ++i) kernels::axpy_f32(k[i], s + i * dv, u.data(), dv);
    const float beta = r.beta[static_cast<std::size_t>(t)];
    const float* v = r.v.data() + t * dv;
    for (std::int64_t j = 0; j < dv; ++j)
      u[static_cast<std::size_t>(j)] = beta * (v[j] - decay * u[static_cast<std::size_t>(j)]);
    float* ot = o + t * dv;
    std::fill(ot, ot + dv, 0.0f);
    for (std::int64_t i = 0; i < dk; ++i)
      kernels::decay_update_row(s + i * dv, decay, k[i], u.data(), q[i], ot, dv);
  }
}

// A chunk at a time (the file comment's equations), its products through oneDNN's sgemm on
// this thread: o [len x dv].
void chunked(const HeadRows& r, std::int64_t chunk, float* s, float* o) {
  const std::int64_t dk = r.dk, dv = r.dv;
  const auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
  std::vector<float> G(sz(chunk)), w(sz(chunk)), u(sz(chunk * dv)), p(u.size()),
      kk(sz(chunk * chunk)), qk(kk.size()), kw(sz(chunk * dk));
  for (std::int64_t c0 = 0; c0 < r.len; c0 += chunk) {
    const std::int64_t L = std::min(chunk, r.len - c0);
    const float* Q = r.q.data() + c0 * dk;
    const float* K = r.k.data() + c0 * dk;
    const float* V = r.v.data() + c0 * dv;
    float cumulative = 0.0f;
    for (std::int64_t t = 0; t < L; ++t) G[sz(t)] = cumulative += r.g[sz(c0 + t)];
    // S0^T k_t into u, S0^T q_t into p; k_t . k_j and q_t . k_j.
    kernels::gemm_f32(false, false, L, dv, dk, 1.0f, K, dk, s, dv, 0.0f, u.data(), dv);
    kernels::gemm_f32(false, false, L, dv, dk, 1.0f, Q, dk, s, dv, 0.0f, p.data(), dv);
    kernels::gemm_f32(false, true, L, L, dk, 1.0f, K, dk, K, dk, 0.0f, kk.data(), chunk);
    kernels::gemm_f32(false, true, L, L, dk, 1.0f, Q, dk, K, dk, 0.0f, qk.data(), chunk);
    // Decayed and made causal: kk[t][j] for j < t, qk[t][j] for j <= t, zero above.
    for (std::int64_t t = 0; t < L; ++t) {
      for (std::int64_t j = 0; j < L; ++j) {
        const float decay = j <= t ? std::exp(G[sz(t)] - G[sz(j)]) : 0.0f;
        kk[sz(t * chunk + j)] *= j < t ? decay : 0.0f;
        qk[sz(t * chunk + j)] *= decay;
      }
    }
    // u_t by forward substitution (one row after another), p_t scaled by e^{G_t}.
    for (std::int64_t t = 0; t < L; ++t) {
      float* ut = u.data() + t * dv;
      const float beta = r.beta[sz(c0 + t)];
      const float e = std::exp(G[sz(t)]);
      for (std::int64_t j = 0; j < dv; ++j) ut[j] = beta * (V[t * dv + j] - e * ut[j]);
      for (std::int64_t j = 0; j < t; ++j)
        kernels::axpy_f32(-beta * kk[sz(t * chunk + j)], u.data() + j * dv, ut, dv);
      float* pt = p.data() + t * dv;
      for (std::int64_t j = 0; j < dv; ++j) pt[j] *= e;
    }
    // o = p + qk u.
    kernels::gemm_f32(false, false, L, dv, L, 1.0f, qk.data(), chunk, u.data(), dv, 1.0f, p.data(),
                      dv);
    std::copy_n(p.data(), L * dv, o + c0 * dv);
    // S = e^{G_L} S0 + (w K)^T u, with w_j = e^{G_L - G_j}.
    const float last = G[sz(L - 1)];
    for (std::int64_t t = 0; t < L; ++t) {
      const float wt = std::exp(last - G[sz(t)]);
      for (std::int64_t i = 0; i < dk; ++i) kw[sz(t * dk + i)] = wt * K[t * dk + i];
    }
    kernels::gemm_f32(true, false, dk, dv, L, 1.0f, kw.data(), dk, u.data(), dv, std::exp(last), s,
                      dv);
  }
}

}  // namespace

void gated_delta_net(const CpuThreads& threads, const model::ModelSpec& spec, KvCache& cache,
                     std::int64_t layer, const float* qkvz, const float* ba, std::int64_t n,
                     std::int64_t pos0, const float* conv, const float* a_log, const float* dt_bias,
                     const float* norm, float* out, std::int64_t chunk) {
  Layout l{};
  l.nk = spec.linear_key_heads;
  l.nv = spec.linear_value_heads;
  l.dk = spec.linear_key_dim;
  l.dv = spec.linear_value_dim;
  l.ratio = l.nv / l.nk;
  l.channels = spec.linear_conv_channels();
  l.row = 2 * l.nk * l.dk + 2 * l.nv * l.dv;  // [q | k | v | z] per token
  l.q_scale = 1.0f / std::sqrt(static_cast<float>(l.dk));
  const std::int64_t kernel = spec.linear_conv_kernel;
  if (pos0 == 0) cache.clear_recurrent(layer);

  // The causal depthwise convolution and SiLU, continuing the state: a block of channels
  // per task, token after token within it, so each token's inputs are read in rows.
  std::vector<float> mixed(static_cast<std::size_t>(n * l.channels));
  float* state = cache.conv_state(layer);
  const std::int64_t history = kernel - 1;
  constexpr std::int64_t kBlock = 256;
  threads.parallel_for(
      (l.channels + kBlock - 1) / kBlock, 1, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t c0 = b0 * kBlock; c0 < std::min(b1 * kBlock, l.channels); c0 += kBlock) {
          const std::int64_t width = std::min(kBlock, l.channels - c0);
          // The weights by tap, and the input at position t + j - history (the state before 0).
          std::vector<float> taps(static_cast<std::size_t>(kernel * width));
          for (std::int64_t c = 0; c < width; ++c)
            for (std::int64_t j = 0; j < kernel; ++j)
              taps[static_cast<std::size_t>(j * width + c)] = conv[(c0 + c) * kernel + j];
          const auto input = [&](std::int64_t p) {
            return p >= 0 ? qkvz + p * l.row + c0 : state + (p + history) * l.channels + c0;
          };
          for (std::int64_t t = 0; t < n; ++t) {
            float* y = mixed.data() + t * l.channels + c0;
            std::fill(y, y + width, 0.0f);
            for (std::int64_t j = 0; j < kernel; ++j)
              for (std::int64_t c = 0; c < width; ++c)
                y[c] += taps[static_cast<std::size_t>(j * width + c)] * input(t + j - history)[c];
            kernels::silu(y, width);
          }
          // The last `history` inputs become the state (older state rows where n is shorter).
          std::vector<float> last(static_cast<std::size_t>(history * width));
          for (std::int64_t j = 0; j < history; ++j)
            std::copy_n(input(n - history + j), width, last.data() + j * width);
          for (std::int64_t j = 0; j < history; ++j)
            std::copy_n(last.data() + j * width, width, state + j * l.channels + c0);
        }
      });

  float* states = cache.recurrent_state(layer);
  const double eps = spec.rms_norm_eps;
  threads.parallel_for(l.nv, 1, [&](std::int64_t h0, std::int64_t h1) {
    HeadRows rows;
    rows.dk = l.dk;
    rows.dv = l.dv;
    std::vector<float> o(static_cast<std::size_t>(n * l.dv)), gate(static_cast<std::size_t>(l.dv));
    for (std::int64_t h = h0; h < h1; ++h) {
      gather(l, h, mixed.data(), ba, a_log, dt_bias, 0, n, rows);
      float* s = states + h * l.dk * l.dv;
      if (chunk > 1 && n >= chunk / 2)
        chunked(rows, chunk, s, o.data());
      else
        recurrent(rows, s, o.data());
      // The gated RMSNorm: normalised, scaled by the norm's weight, times SiLU(z).
      for (std::int64_t t = 0; t < n; ++t) {
        const float* ot = o.data() + t * l.dv;
        double sq = 0.0;
        for (std::int64_t j = 0; j < l.dv; ++j) sq += static_cast<double>(ot[j]) * ot[j];
        const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(l.dv) + eps));
        float* y = out + t * l.nv * l.dv + h * l.dv;
        std::copy_n(qkvz + t * l.row + l.channels + h * l.dv, l.dv, y);
        for (std::int64_t j = 0; j < l.dv; ++j)
          gate[static_cast<std::size_t>(j)] = ot[j] * inv * norm[j];
        kernels::silu_mul(y, gate.data(), l.dv);
      }
    }
  });
}

}  // namespace tandem::backend::cpu_ops
