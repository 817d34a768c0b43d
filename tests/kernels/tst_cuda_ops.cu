// The CUDA kernels (kernels/cuda/ops.h) against double-precision references written here, on
// random inputs of odd sizes, one token and many. It needs nothing but the CUDA toolkit and
// these sources, so that a bare GPU machine builds and runs it in seconds:
//   nvcc -std=c++17 -O2 -arch=sm_90 -I. tests/kernels/tst_cuda_ops.cu kernels/cuda/*.cu \
//        -o tst_cuda_ops && ./tst_cuda_ops
// (scripts/gpu-check.sh --kernels does that). The engine-level comparison with the CPU
// backend is tst_backend_ops. Without a usable GPU it says what is missing and exits 77,
// which CTest reports as skipped.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"

namespace cu = tandem::kernels::cuda;

namespace {

int passed = 0, failed = 0;

void expect(bool ok, const std::string& what, const std::string& detail = {}) {
  if (ok) {
    ++passed;
    std::printf("PASS   : %s\n", what.c_str());
  } else {
    ++failed;
    std::printf("FAIL!  : %s %s\n", what.c_str(), detail.c_str());
  }
}

std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::uint16_t to_bf16(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(b >> 16);
}
float from_bf16(std::uint16_t v) {
  const std::uint32_t b = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
float round_bf16(float f) {
  return from_bf16(to_bf16(f));
}

template <class T>
struct Device {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Device(std::size_t count) : n(count) {
    cu::check(cudaMalloc(&p, std::max<std::size_t>(1, n) * sizeof(T)), "allocating");
    cu::check(cudaMemset(p, 0, std::max<std::size_t>(1, n) * sizeof(T)), "clearing");
  }
  explicit Device(const std::vector<T>& host) : Device(host.size()) {
    cu::check(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), "uploading");
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  std::vector<T> get() const {
    std::vector<T> out(n);
    cu::check(cudaDeviceSynchronize(), "running");
    cu::check(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "downloading");
    return out;
  }
};

// max |a - b| over max |b|.
double relative(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 1e30;
  double worst = 0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return 1e30;
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  const double d = relative(got, want);
  char detail[96];
  std::snprintf(detail, sizeof detail, "(relative difference %.3g, allowed %.3g)", d, tol);
  expect(d <= tol, what, detail);
}

// ---- Products.
void test_matmul() {
  struct Shape {
    int rows, cols, n;
  };
  for (const Shape s : {Shape{37, 72, 1}, Shape{37, 72, 5}, Shape{16, 8, 1}, Shape{37, 72, 33},
                        Shape{130, 200, 70}, Shape{64, 128, 8}, Shape{5, 3, 9}}) {
    for (cu::WeightType type : {cu::WeightType::Bf16, cu::WeightType::F32}) {
      const auto w = normal(static_cast<std::size_t>(s.rows * s.cols), 1);
      const auto x = normal(static_cast<std::size_t>(s.n * s.cols), 2);
      std::vector<std::uint16_t> w16(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) w16[i] = to_bf16(w[i]);
      Device<std::uint16_t> d16(w16);
      Device<float> d32(w), dx(x), dy(static_cast<std::size_t>(s.n * s.rows * 2));
      cu::DeviceWeights dw;
      dw.type = type;
      dw.data = type == cu::WeightType::Bf16 ? static_cast<const void*>(d16.p) : d32.p;
      dw.rows = s.rows;
      dw.cols = s.cols;
      // Into every other row of a wider output (y_stride).
      cu::matmul(dx.p, s.n, dw, dy.p, 2 * s.rows, nullptr);
      // fp32 weights are multiplied in fp32 at every token count (routers).
      const bool tiles = s.n > cu::kGemvMaxTokens && type == cu::WeightType::Bf16;
      std::vector<double> want(dy.n, 0.0);
      for (int t = 0; t < s.n; ++t)
        for (int r = 0; r < s.rows; ++r) {
          double acc = 0;
          for (int c = 0; c < s.cols; ++c) {
            const float wv = type == cu::WeightType::Bf16 || tiles
                                 ? from_bf16(w16[static_cast<std::size_t>(r * s.cols + c)])
                                 : w[static_cast<std::size_t>(r * s.cols + c)];
            const float xv = tiles ? round_bf16(x[static_cast<std::size_t>(t * s.cols + c)])
                                   : x[static_cast<std::size_t>(t * s.cols + c)];
            acc += static_cast<double>(wv) * xv;
          }
          want[static_cast<std::size_t>(t * 2 * s.rows + r)] = acc;
        }
      expect_close(dy.get(), want, 1e-5,
                   "matmul " + std::to_string(s.rows) + "x" + std::to_string(s.cols) + ", " +
                       std::to_string(s.n) + " tokens, " +
                       (type == cu::WeightType::Bf16 ? "bf16" : "f32"));
    }
  }
}

// ---- Element-wise steps.
void test_elementwise() {
  const int rows = 6, cols = 50, stride = 53;
  const auto x = normal(rows * stride, 3), w = normal(cols, 4);
  Device<float> dx(x), dw(w), dy(rows * stride);
  cu::rms_norm(dx.p, stride, dw.p, rows, cols, 1e-6, dy.p, stride, nullptr);
  std::vector<double> want(dy.n, 0.0);
  for (int r = 0; r < rows; ++r) {
    double sq = 0;
    for (int c = 0; c < cols; ++c) sq += static_cast<double>(x[r * stride + c]) * x[r * stride + c];
    const double inv = 1.0 / std::sqrt(sq / cols + 1e-6);
    for (int c = 0; c < cols; ++c) want[r * stride + c] = x[r * stride + c] * inv * w[c];
  }
  expect_close(dy.get(), want, 1e-6, "rms_norm with strides");

  const auto g = normal(300, 5, 3.0f), u = normal(300, 6, 3.0f);
  for (int kind : {0, 1}) {
    Device<float> dg(g), du(u);
    cu::GluParams p;
    p.kind = kind;
    p.alpha = 1.702f;
    p.limit = 7.0f;
    cu::glu(p, dg.p, du.p, 300, nullptr);
    std::vector<double> gw(300);
    for (int i = 0; i < 300; ++i) {
      double gv = g[i], uv = u[i];
      if (kind == 0) {
        gw[i] = gv / (1 + std::exp(-gv)) * uv;
      } else {
        gv = std::min(gv, 7.0);
        uv = std::clamp(uv, -7.0, 7.0);
        gw[i] = gv / (1 + std::exp(-1.702 * gv)) * (uv + 1);
      }
    }
    expect_close(dg.get(), gw, 1e-5, kind == 0 ? "silu_mul" : "clamped swiglu");
  }

  Device<float> ya(g), xa(u);
  cu::add_scaled(ya.p, xa.p, 0.5f, 300, nullptr);
  std::vector<double> aw(300);
  for (int i = 0; i < 300; ++i) aw[i] = g[i] + 0.5 * u[i];
  expect_close(ya.get(), aw, 1e-7, "add_scaled");

  Device<float> yb(g), bias(std::vector<float>(u.begin(), u.begin() + 30));
  cu::add_bias(yb.p, bias.p, 10, 30, nullptr);
  std::vector<double> bw(300);
  for (int i = 0; i < 300; ++i) bw[i] = g[i] + u[i % 30];
  expect_close(yb.get(), bw, 1e-7, "add_bias");

  for (int gate_cols : {1, 30}) {
    Device<float> ys(g), gs(u);
    cu::sigmoid_gate(ys.p, gs.p, 10, 30, gate_cols, nullptr);
    std::vector<double> sw(300);
    for (int i = 0; i < 300; ++i)
      sw[i] = g[i] / (1 + std::exp(-static_cast<double>(
                              u[(i / 30) * gate_cols + (gate_cols == 1 ? 0 : i % 30)])));
    expect_close(ys.get(), sw, 1e-6, "sigmoid_gate, gate columns " + std::to_string(gate_cols));
  }

  // Embedding rows of a BF16 table.
  const int vocab = 11, dim = 24;
  const auto table = normal(vocab * dim, 7);
  std::vector<std::uint16_t> t16(table.size());
  for (std::size_t i = 0; i < table.size(); ++i) t16[i] = to_bf16(table[i]);
  const std::vector<std::int32_t> ids = {3, 0, 10, 3};
  Device<std::uint16_t> dt(t16);
  Device<std::int32_t> di(ids);
  Device<float> de(ids.size() * dim);
  cu::DeviceWeights tw{dt.p, cu::WeightType::Bf16, vocab, dim};
  cu::embed(tw, di.p, static_cast<std::int64_t>(ids.size()), de.p, nullptr);
  std::vector<double> ew(de.n);
  for (std::size_t t = 0; t < ids.size(); ++t)
    for (int c = 0; c < dim; ++c) ew[t * dim + c] = from_bf16(t16[ids[t] * dim + c]);
  expect_close(de.get(), ew, 0.0, "embed");

  // f32 -> bf16 as the host rounds.
  const auto f = normal(1000, 8, 100.0f);
  Device<float> df(f);
  Device<std::uint16_t> db(f.size());
  cu::f32_to_bf16(df.p, db.p, 1000, nullptr);
  const auto b = db.get();
  bool same = true;
  for (std::size_t i = 0; i < f.size(); ++i) same = same && b[i] == to_bf16(f[i]);
  expect(same, "f32_to_bf16 rounds as the host does");
}

void test_rope() {
  for (bool interleaved : {false, true}) {
    const int dim = 16, heads = 3, n = 4, head_stride = 20, token_stride = 70;
    std::vector<double> inv(dim / 2);
    for (int i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(10000.0, 2.0 * i / dim);
    const auto x = normal(n * token_stride, 9);
    Device<double> dinv(inv);
    Device<float> dx(x);
    cu::RopeTable table{dinv.p, dim, interleaved, 1.25};
    cu::rope(table, dx.p, n, token_stride, heads, head_stride, 1000, nullptr);
    std::vector<double> want(x.begin(), x.end());
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < dim / 2; ++i) {
          const double angle = (1000.0 + t) * inv[i];
          const double c = std::cos(angle) * 1.25, s = std::sin(angle) * 1.25;
          const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + dim / 2;
          const std::size_t base = static_cast<std::size_t>(t * token_stride + h * head_stride);
          const double x1 = x[base + a], x2 = x[base + b];
          want[base + a] = x1 * c - x2 * s;
          want[base + b] = x2 * c + x1 * s;
        }
    expect_close(dx.get(), want, 1e-6, interleaved ? "rope, interleaved" : "rope, halves");
  }
}

// ---- Attention: softmax(q k * scale) v per query head, with sinks and windows.
std::vector<double> reference_attention(const cu::AttentionArgs& a, const std::vector<float>& q,
                                        const std::vector<float>& keys,
                                        const std::vector<float>& values,
                                        const std::vector<float>& sinks) {
  std::vector<double> out(static_cast<std::size_t>(a.n * a.out_token_stride), 0.0);
  for (std::int64_t t = 0; t < a.n; ++t)
    for (std::int64_t h = 0; h < a.heads; ++h) {
      const std::int64_t g = h / a.group, end = a.pos0 + t + 1;
      const std::int64_t first = a.window > 0 && end > a.window ? end - a.window : 0;
      std::vector<double> s;
      double top = sinks.empty() ? -1e300 : sinks[h];
      for (std::int64_t p = first; p < end; ++p) {
        double d = 0;
        for (std::int64_t i = 0; i < a.key_dim; ++i)
          d += static_cast<double>(q[t * a.q_token_stride + h * a.q_head_stride + i]) *
               keys[p * a.k_pos_stride + g * a.k_head_stride + i];
        s.push_back(d * a.scale);
        top = std::max(top, s.back());
      }
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - top);
      for (double& v : s) sum += (v = std::exp(v - top));
      for (std::int64_t i = 0; i < a.value_dim; ++i) {
        double acc = 0;
        for (std::size_t j = 0; j < s.size(); ++j)
          acc += s[j] * values[(first + static_cast<std::int64_t>(j)) * a.v_pos_stride +
                               g * a.v_head_stride + i];
        out[t * a.out_token_stride + h * a.out_head_stride + i] = acc / sum;
      }
    }
  return out;
}

void attention_case(const std::string& name, std::int64_t heads, std::int64_t kv_heads,
                    std::int64_t dim, std::int64_t n, std::int64_t pos0, std::int64_t window,
                    bool sinks, int multiprocessors) {
  const std::int64_t positions = pos0 + n;
  const auto q = normal(static_cast<std::size_t>(n * heads * dim), 11);
  const auto k = normal(static_cast<std::size_t>(positions * kv_heads * dim), 12);
  const auto v = normal(static_cast<std::size_t>(positions * kv_heads * dim), 13);
  const auto s = sinks ? normal(static_cast<std::size_t>(heads), 14) : std::vector<float>{};
  Device<float> dq(q), dk(k), dv(v), ds(s.empty() ? std::vector<float>{0.0f} : s),
      dout(static_cast<std::size_t>(n * heads * dim));
  cu::AttentionArgs a;
  a.q = dq.p;
  a.q_token_stride = heads * dim;
  a.q_head_stride = dim;
  a.keys = dk.p;
  a.k_pos_stride = kv_heads * dim;
  a.k_head_stride = dim;
  a.values = dv.p;
  a.v_pos_stride = kv_heads * dim;
  a.v_head_stride = dim;
  a.key_dim = a.value_dim = dim;
  a.heads = heads;
  a.group = heads / kv_heads;
  a.n = n;
  a.pos0 = pos0;
  a.window = window;
  a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  a.sinks = sinks ? ds.p : nullptr;
  a.out = dout.p;
  a.out_token_stride = heads * dim;
  a.out_head_stride = dim;
  Device<float> scratch(static_cast<std::size_t>(
      std::max<std::int64_t>(1, cu::attention_scratch_floats(a, multiprocessors))));
  cu::attention(a, scratch.p, multiprocessors, nullptr);
  expect_close(dout.get(), reference_attention(a, q, k, v, s), 2e-5, "attention, " + name);
}

void test_attention() {
  attention_case("prompt of 9, GQA 8/2, dim 64", 8, 2, 64, 9, 0, 0, false, 132);
  attention_case("3 after 6, dim 128", 4, 4, 128, 3, 6, 0, false, 132);
  attention_case("sliding window 4 and sinks", 8, 2, 64, 9, 0, 4, true, 132);
  attention_case("dim 256", 2, 1, 256, 2, 5, 0, true, 132);
  // A decoded token over a long context: split into parts and combined.
  attention_case("decode over 1300 positions, split", 4, 2, 128, 1, 1299, 0, false, 132);
  attention_case("decode over 1300 positions, split, sinks", 4, 2, 128, 1, 1299, 0, true, 132);
  attention_case("decode over 1300 positions, window 700", 4, 2, 64, 1, 1299, 700, false, 132);
}

// Latent attention: queries absorbed through kv_b, attention over [latent | rotary key] rows,
// values expanded through kv_b again, against the per-head expansion it stands for.
void test_latent_attention() {
  const std::int64_t heads = 4, nope = 16, rope = 8, vd = 12, lora = 32, n = 3, pos0 = 5;
  const std::int64_t key_dim = lora + rope, positions = pos0 + n;
  const auto q = normal(static_cast<std::size_t>(n * heads * (nope + rope)), 21);
  const auto kv = normal(static_cast<std::size_t>(positions * key_dim), 22);
  const auto kv_b = normal(static_cast<std::size_t>(heads * (nope + vd) * lora), 23, 0.3f);
  Device<float> dq(q), dkv(kv), dkvb(kv_b);
  cu::DeviceWeights w{dkvb.p, cu::WeightType::F32, heads * (nope + vd), lora};
  Device<float> q_keys(static_cast<std::size_t>(n * heads * key_dim)),
      o_latent(static_cast<std::size_t>(n * heads * lora)),
      out(static_cast<std::size_t>(n * heads * vd));
  cu::absorb_latent_queries(dq.p, n, heads, nope, rope, vd, w, q_keys.p, nullptr);
  cu::AttentionArgs a;
  a.q = q_keys.p;
  a.q_token_stride = heads * key_dim;
  a.q_head_stride = key_dim;
  a.keys = dkv.p;
  a.k_pos_stride = key_dim;
  a.values = dkv.p;
  a.v_pos_stride = key_dim;
  a.key_dim = key_dim;
  a.value_dim = lora;
  a.heads = heads;
  a.group = heads;
  a.n = n;
  a.pos0 = pos0;
  a.scale = 0.2f;
  a.out = o_latent.p;
  a.out_token_stride = heads * lora;
  a.out_head_stride = lora;
  cu::attention(a, nullptr, 132, nullptr);
  cu::expand_latent_values(o_latent.p, n, heads, nope, vd, w, out.p, nullptr);
  // Expanded: k_h = [W_UK_h latent | rotary key], v_h = W_UV_h latent.
  std::vector<double> want(out.n, 0.0);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t h = 0; h < heads; ++h) {
      std::vector<double> s;
      double top = -1e300;
      for (std::int64_t p = 0; p <= pos0 + t; ++p) {
        double d = 0;
        for (std::int64_t r = 0; r < nope; ++r) {
          double kr = 0;
          for (std::int64_t c = 0; c < lora; ++c)
            kr += kv_b[(h * (nope + vd) + r) * lora + c] * static_cast<double>(kv[p * key_dim + c]);
          d += q[(t * heads + h) * (nope + rope) + r] * kr;
        }
        for (std::int64_t r = 0; r < rope; ++r)
          d += static_cast<double>(q[(t * heads + h) * (nope + rope) + nope + r]) *
               kv[p * key_dim + lora + r];
        s.push_back(d * 0.2);
        top = std::max(top, s.back());
      }
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - top));
      for (std::int64_t j = 0; j < vd; ++j) {
        double acc = 0;
        for (std::size_t p = 0; p < s.size(); ++p) {
          double vj = 0;
          for (std::int64_t c = 0; c < lora; ++c)
            vj += kv_b[(h * (nope + vd) + nope + j) * lora + c] *
                  static_cast<double>(kv[static_cast<std::int64_t>(p) * key_dim + c]);
          acc += s[p] * vj;
        }
        want[(t * heads + h) * vd + j] = acc / sum;
      }
    }
  expect_close(out.get(), want, 2e-5, "latent attention (absorbed) equals the expanded heads");
}

// ---- Routing.
void test_routing() {
  const int n = 7, experts = 64, k = 6;
  const auto logits = normal(n * experts, 31, 2.0f);
  const auto bias = normal(experts, 32, 0.1f);
  // Softmax (Qwen3, Mixtral), DeepSeek-V2's grouped softmax (a group scores its best expert;
  // weights scaled, not renormalised) and DeepSeek-V3's grouped sigmoid (top two summed).
  enum Kind { kSoftmax, kGroupedSoftmax, kGroupedSigmoid };
  for (Kind kind : {kSoftmax, kGroupedSoftmax, kGroupedSigmoid}) {
    const bool sigmoid = kind == kGroupedSigmoid;
    const int groups = kind == kSoftmax ? 1 : 8;
    const int top_groups = kind == kSoftmax ? 1 : 3;
    Device<float> dl(logits), db(bias), dw(n * k);
    Device<std::int32_t> di(n * k);
    cu::RoutingArgs a;
    a.experts = experts;
    a.k = k;
    a.sigmoid = sigmoid;
    a.groups = groups;
    a.top_groups = top_groups;
    a.normalize = kind != kGroupedSoftmax;
    a.scaling = kind == kSoftmax ? 1.0f : 2.5f;
    a.bias = sigmoid ? db.p : nullptr;
    cu::route(dl.p, n, a, di.p, dw.p, nullptr);
    const auto ids = di.get();
    const auto weights = dw.get();
    bool same_ids = true;
    std::vector<double> want_w(n * k);
    for (int t = 0; t < n; ++t) {
      std::vector<double> score(experts), choice(experts);
      double top = -1e300, sum = 0;
      for (int e = 0; e < experts; ++e) top = std::max(top, double(logits[t * experts + e]));
      for (int e = 0; e < experts; ++e) {
        score[e] = sigmoid ? 1 / (1 + std::exp(-double(logits[t * experts + e])))
                           : std::exp(logits[t * experts + e] - top);
        sum += score[e];
      }
      for (int e = 0; e < experts; ++e) {
        if (!sigmoid) score[e] /= sum;
        choice[e] = score[e] + (sigmoid ? bias[e] : 0.0);
      }
      if (groups > 1) {
        const int per = experts / groups;
        std::vector<std::pair<double, int>> ranked;
        for (int g = 0; g < groups; ++g) {
          std::vector<double> m(choice.begin() + g * per, choice.begin() + (g + 1) * per);
          std::sort(m.rbegin(), m.rend());
          ranked.push_back({-(sigmoid ? m[0] + m[1] : m[0]), g});
        }
        std::sort(ranked.begin(), ranked.end());
        std::vector<bool> kept(groups, false);
        for (int j = 0; j < top_groups; ++j) kept[ranked[j].second] = true;
        for (int e = 0; e < experts; ++e)
          if (!kept[e / per]) choice[e] = 0.0;
      }
      std::vector<int> order(experts);
      for (int e = 0; e < experts; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(),
                       [&](int x, int y) { return choice[x] > choice[y]; });
      double chosen = 0;
      for (int j = 0; j < k; ++j) chosen += score[order[j]];
      for (int j = 0; j < k; ++j) {
        same_ids = same_ids && ids[t * k + j] == order[j];
        const double w = score[order[j]];
        want_w[t * k + j] = (a.normalize ? w / (sigmoid ? chosen + 1e-20 : chosen) : w) * a.scaling;
      }
    }
    const std::string name = kind == kSoftmax          ? "softmax routing"
                             : kind == kGroupedSoftmax ? "grouped softmax routing (DeepSeek-V2)"
                                                       : "grouped sigmoid routing";
    expect(same_ids, name + ": the experts chosen");
    expect_close(weights, want_w, 1e-5, name + ": their weights");
  }
}

// ---- Routed experts: out[t] += sum_j w[t, j] * down(glu(gate x + gb, up x + ub)) + db.
void test_grouped_experts(const int hidden) {
  const int experts = 6, inner = 24;
  const std::vector<int> resident = {0, 3, 5};
  std::vector<std::vector<float>> gate(experts), up(experts), down(experts), gb(experts),
      ub(experts), dbias(experts);
  std::vector<std::vector<std::uint16_t>> gate16(experts), up16(experts), down16(experts);
  std::vector<std::unique_ptr<Device<std::uint16_t>>> dg, du, dd;
  std::vector<std::unique_ptr<Device<float>>> dgb, dub, ddb;
  std::vector<cu::ExpertOnDevice> descs;
  for (int e = 0; e < experts; ++e) {
    gate[e] = normal(inner * hidden, 100 + e, 0.3f);
    up[e] = normal(inner * hidden, 200 + e, 0.3f);
    down[e] = normal(hidden * inner, 300 + e, 0.3f);
    gb[e] = normal(inner, 400 + e);
    ub[e] = normal(inner, 500 + e);
    dbias[e] = normal(hidden, 600 + e);
    for (auto* p : {&gate, &up, &down}) {
      auto& src = (*p)[e];
      auto& dst = p == &gate ? gate16[e] : p == &up ? up16[e] : down16[e];
      dst.resize(src.size());
      for (std::size_t i = 0; i < src.size(); ++i) {
        dst[i] = to_bf16(src[i]);
        src[i] = from_bf16(dst[i]);
      }
    }
  }
  std::vector<std::int32_t> slot_of_expert(experts, -1);
  for (int e : resident) {
    dg.push_back(std::make_unique<Device<std::uint16_t>>(gate16[e]));
    du.push_back(std::make_unique<Device<std::uint16_t>>(up16[e]));
    dd.push_back(std::make_unique<Device<std::uint16_t>>(down16[e]));
    dgb.push_back(std::make_unique<Device<float>>(gb[e]));
    dub.push_back(std::make_unique<Device<float>>(ub[e]));
    ddb.push_back(std::make_unique<Device<float>>(dbias[e]));
    cu::ExpertOnDevice d;
    d.gate = dg.back()->p;
    d.up = du.back()->p;
    d.down = dd.back()->p;
    // Expert 3 is gpt-oss-like: biases and the clamped SwiGLU.
    if (e == 3) {
      d.gate_bias = dgb.back()->p;
      d.up_bias = dub.back()->p;
      d.down_bias = ddb.back()->p;
      d.glu = {1, 1.702f, 7.0f};
    }
    slot_of_expert[e] = static_cast<std::int32_t>(descs.size());
    descs.push_back(d);
  }
  for (int n : {1, 13, 40}) {
    const int k = 2;
    const auto x = normal(n * hidden, 700 + n);
    std::vector<std::int32_t> ids(n * k);
    for (int i = 0; i < n * k; ++i) ids[i] = (i * 5 + i / k) % experts;
    const auto weights = normal(n * k, 800 + n);
    const auto initial = normal(n * hidden, 900 + n);
    Device<float> dx(x), dw(weights), dout(initial);
    Device<std::int32_t> di(ids), dslots(slot_of_expert);
    Device<cu::ExpertOnDevice> ddesc(descs);
    cu::GroupedExpertsArgs a;
    a.x = dx.p;
    a.n = n;
    a.k = k;
    a.hidden = hidden;
    a.inner = inner;
    a.ids = di.p;
    a.weights = dw.p;
    a.slot_of_expert = dslots.p;
    a.expert_count = experts;
    a.experts = ddesc.p;
    a.slots = static_cast<std::int64_t>(descs.size());
    a.out = dout.p;
    Device<char> scratch(
        static_cast<std::size_t>(cu::grouped_experts_scratch_bytes(n, k, hidden, inner, a.slots)));
    cu::grouped_experts(a, scratch.p, nullptr);
    const bool tiles = n * k > 64;
    std::vector<double> want(initial.begin(), initial.end());
    for (int t = 0; t < n; ++t)
      for (int j = 0; j < k; ++j) {
        const int e = ids[t * k + j];
        if (slot_of_expert[e] < 0) continue;
        const bool clamped = e == 3;
        std::vector<double> h(inner);
        for (int r = 0; r < inner; ++r) {
          double g = 0, u = 0;
          for (int c = 0; c < hidden; ++c) {
            const double xv = tiles ? round_bf16(x[t * hidden + c]) : x[t * hidden + c];
            g += gate[e][r * hidden + c] * xv;
            u += up[e][r * hidden + c] * xv;
          }
          if (clamped) {
            g = std::min(g + gb[e][r], 7.0);
            u = std::clamp(u + ub[e][r], -7.0, 7.0);
            h[r] = g / (1 + std::exp(-1.702 * g)) * (u + 1);
          } else {
            h[r] = g / (1 + std::exp(-g)) * u;
          }
          if (tiles) h[r] = round_bf16(static_cast<float>(h[r]));
        }
        for (int c = 0; c < hidden; ++c) {
          double d = clamped ? dbias[e][c] : 0.0;
          for (int r = 0; r < inner; ++r) d += down[e][c * inner + r] * h[r];
          want[t * hidden + c] += weights[t * k + j] * d;
        }
      }
    expect_close(dout.get(), want, tiles ? 2e-2 : 1e-5,
                 "grouped experts, " + std::to_string(n) + " tokens (3 of 6 resident), " +
                     std::to_string(hidden) + " columns");
  }
}

void test_grouped_experts() {
  // 300 columns: the results are added by more than one block per token.
  for (const int hidden : {40, 300}) test_grouped_experts(hidden);
}

// ---- Gated DeltaNet, as transformers' recurrent form writes it.
void test_delta_net() {
  const int nk = 2, nv = 4, dk = 16, dv = 16, kernel = 4;
  const int channels = 2 * nk * dk + nv * dv, row = channels + nv * dv;
  const auto conv = normal(channels * kernel, 41, 0.5f);
  const auto a_log = normal(nv, 42, 0.5f), dt_bias = normal(nv, 43, 0.5f), norm = normal(dv, 44);
  Device<float> dconv(conv), dalog(a_log), ddt(dt_bias), dnorm(norm);
  Device<float> conv_state((kernel - 1) * channels), recurrent(nv * dk * dv);
  std::vector<double> ref_conv((kernel - 1) * channels, 0.0), ref_state(nv * dk * dv, 0.0);
  std::int64_t pos0 = 0;
  for (int n : {7, 3}) {
    const auto qkvz = normal(n * row, 45 + n), ba = normal(n * 2 * nv, 46 + n);
    Device<float> dq(qkvz), dba(ba), mixed(n * channels), out(n * nv * dv);
    cu::DeltaNetArgs a;
    a.qkvz = dq.p;
    a.ba = dba.p;
    a.n = n;
    a.pos0 = pos0;
    a.key_heads = nk;
    a.value_heads = nv;
    a.key_dim = dk;
    a.value_dim = dv;
    a.conv_kernel = kernel;
    a.conv = dconv.p;
    a.a_log = dalog.p;
    a.dt_bias = ddt.p;
    a.norm = dnorm.p;
    a.eps = 1e-6;
    a.conv_state = conv_state.p;
    a.recurrent = recurrent.p;
    a.mixed = mixed.p;
    a.out = out.p;
    cu::gated_delta_net(a, nullptr);
    std::vector<double> want(n * nv * dv);
    for (int t = 0; t < n; ++t) {
      std::vector<double> m(channels);
      for (int c = 0; c < channels; ++c) {
        double y = conv[c * kernel + kernel - 1] * double(qkvz[t * row + c]);
        for (int j = 0; j + 1 < kernel; ++j) y += conv[c * kernel + j] * ref_conv[j * channels + c];
        for (int j = 0; j + 2 < kernel; ++j)
          ref_conv[j * channels + c] = ref_conv[(j + 1) * channels + c];
        ref_conv[(kernel - 2) * channels + c] = qkvz[t * row + c];
        m[c] = y / (1 + std::exp(-y));
      }
      for (int h = 0; h < nv; ++h) {
        const int g = h / (nv / nk);
        std::vector<double> q(dk), kk(dk), u(dv), o(dv, 0.0);
        double qq = 0, kq = 0;
        for (int i = 0; i < dk; ++i) {
          qq += m[g * dk + i] * m[g * dk + i];
          kq += m[nk * dk + g * dk + i] * m[nk * dk + g * dk + i];
        }
        for (int i = 0; i < dk; ++i) {
          q[i] = m[g * dk + i] / std::sqrt(qq + 1e-6) / std::sqrt(double(dk));
          kk[i] = m[nk * dk + g * dk + i] / std::sqrt(kq + 1e-6);
        }
        const double beta = 1 / (1 + std::exp(-double(ba[t * 2 * nv + h])));
        const double x = double(ba[t * 2 * nv + nv + h]) + dt_bias[h];
        const double decay = std::exp(-std::exp(double(a_log[h])) * std::log1p(std::exp(x)));
        double* S = ref_state.data() + h * dk * dv;
        for (int i = 0; i < dk * dv; ++i) S[i] *= decay;
        for (int j = 0; j < dv; ++j) {
          double sk = 0;
          for (int i = 0; i < dk; ++i) sk += S[i * dv + j] * kk[i];
          u[j] = beta * (m[2 * nk * dk + h * dv + j] - sk);
        }
        for (int i = 0; i < dk; ++i)
          for (int j = 0; j < dv; ++j) S[i * dv + j] += kk[i] * u[j];
        double sq = 0;
        for (int j = 0; j < dv; ++j) {
          for (int i = 0; i < dk; ++i) o[j] += S[i * dv + j] * q[i];
          sq += o[j] * o[j];
        }
        const double inv = 1 / std::sqrt(sq / dv + 1e-6);
        for (int j = 0; j < dv; ++j) {
          const double z = qkvz[t * row + channels + h * dv + j];
          want[(t * nv + h) * dv + j] = o[j] * inv * norm[j] * z / (1 + std::exp(-z));
        }
      }
    }
    expect_close(
        out.get(), want, 1e-4,
        "gated DeltaNet, " + std::to_string(n) + " tokens from position " + std::to_string(pos0));
    pos0 += n;
  }
}

}  // namespace

int main() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf(
        "SKIP   : the CUDA kernels were not run: %s. Run this test where an NVIDIA GPU "
        "and its driver are.\n",
        e != cudaSuccess ? cudaGetErrorString(e) : "no NVIDIA GPU was found");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("Testing the CUDA kernels on %s (compute capability %d.%d)\n", prop.name, prop.major,
              prop.minor);
  const std::pair<const char*, void (*)()> tests[] = {{"matmul", test_matmul},
                                                      {"elementwise", test_elementwise},
                                                      {"rope", test_rope},
                                                      {"attention", test_attention},
                                                      {"latent attention", test_latent_attention},
                                                      {"routing", test_routing},
                                                      {"grouped experts", test_grouped_experts},
                                                      {"delta net", test_delta_net}};
  for (const auto& [name, run] : tests) {
    try {
      run();
    } catch (const std::exception& ex) {
      expect(false, name, std::string("threw: ") + ex.what());
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
