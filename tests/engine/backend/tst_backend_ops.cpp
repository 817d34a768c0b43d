// Every backend held against the CPU backend, operation by operation (as ggml's
// test-backend-ops does): random inputs of odd sizes, one token and many, every weight format
// Tandem holds, and the queues, events, memory budget and bus of the accelerators. A backend
// that computes with the CPU's kernels (the emulated accelerator) must agree to the bit.
#include <QtTest>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_threads.h"
#include "engine/backend/cpu/kv_cache.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/backend/emulated/emulated_backend.h"
#include "engine/model/loaded_model.h"
#include "kernels/cpu/packed/matmul.h"
#include "kernels/cuda/device_query.h"
#include "tests/support/random_values.h"
#if TANDEM_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

using namespace tandem;
using backend::Backend;
using backend::DeviceBuffer;
using backend::LatentProjections;
using backend::Queue;

namespace {

std::string fixture(const char* name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name;
}

// The backends under test, each with how far from the CPU it may be (relative to the
// largest magnitude of the CPU's result).
struct Candidate {
  std::string name;
  std::function<std::unique_ptr<Backend>(const model::ModelSpec&)> make;
  double tolerance;
};

// The first NVIDIA GPU this build can compute on, or null with the reason in `why`.
const kernels::cuda::DeviceInfo* usable_gpu(std::string& why) {
  static const kernels::cuda::DeviceQuery q = kernels::cuda::query_devices();
  if (!q.compiled) {
    why = "this build has no CUDA kernels (nvcc was not found when it was configured)";
    return nullptr;
  }
  for (const auto& d : q.devices)
    if (d.usable) return &d;
  why = !q.devices.empty() ? q.devices.front().name + ": " + q.devices.front().not_usable
        : q.reason.empty() ? std::string("no NVIDIA GPU was found")
                           : q.reason;
  return nullptr;
}

std::vector<Candidate> candidates() {
  std::vector<Candidate> all = {{"emulated",
                                 [](const model::ModelSpec& spec) {
                                   backend::EmulatedOptions o;
                                   o.memory_bytes = 1ull << 30;
                                   o.threads = 2;
                                   return std::make_unique<backend::EmulatedBackend>(o, spec);
                                 },
                                 0.0}};
#if TANDEM_HAVE_CUDA
  std::string why;
  if (const kernels::cuda::DeviceInfo* gpu = usable_gpu(why)) {
    // BF16 weights (fp32 ones stay fp32) and, from 9 tokens on, activations rounded to BF16
    // for the tensor cores: within a few parts in a thousand of the CPU, which computes in
    // fp32 or with INT8 activations of its own.
    all.push_back({"cuda",
                   [index = gpu->index](const model::ModelSpec& spec) {
                     backend::CudaOptions o;
                     o.device = index;
                     o.memory_bytes = 2ull << 30;
                     return std::make_unique<backend::CudaBackend>(o, spec);
                   },
                   3e-2});
  }
#endif
  return all;
}

// Qwen3-Next's gated DeltaNet layer as transformers' recurrent form writes it, in double
// precision, for n tokens from the state (conv_state, state) it updates: the test's own
// reference for the CPU's recurrent and chunked forms.
struct DeltaNetReference {
  const model::ModelSpec& spec;
  std::vector<double> conv_state, state;
  explicit DeltaNetReference(const model::ModelSpec& s)
      : spec(s),
        conv_state(static_cast<std::size_t>((s.linear_conv_kernel - 1) * s.linear_conv_channels())),
        state(static_cast<std::size_t>(s.linear_value_heads * s.linear_key_dim *
                                       s.linear_value_dim)) {}

  std::vector<float> run(const std::vector<float>& qkvz, const std::vector<float>& ba,
                         std::int64_t n, const std::vector<float>& conv,
                         const std::vector<float>& a_log, const std::vector<float>& dt_bias,
                         const std::vector<float>& norm) {
    const std::int64_t nk = spec.linear_key_heads, nv = spec.linear_value_heads;
    const std::int64_t dk = spec.linear_key_dim, dv = spec.linear_value_dim;
    const std::int64_t channels = spec.linear_conv_channels(), kernel = spec.linear_conv_kernel;
    const std::int64_t row = channels + nv * dv;
    const auto at = [](auto& v, std::int64_t i) -> auto& {
      return v[static_cast<std::size_t>(i)];
    };
    std::vector<float> out(static_cast<std::size_t>(n * nv * dv));
    for (std::int64_t t = 0; t < n; ++t) {
      std::vector<double> mixed(static_cast<std::size_t>(channels));
      for (std::int64_t c = 0; c < channels; ++c) {
        double y = at(conv, c * kernel + kernel - 1) * at(qkvz, t * row + c);
        for (std::int64_t j = 0; j + 1 < kernel; ++j)
          y += at(conv, c * kernel + j) * at(conv_state, j * channels + c);
        for (std::int64_t j = 0; j + 2 < kernel; ++j)
          at(conv_state, j * channels + c) = at(conv_state, (j + 1) * channels + c);
        at(conv_state, (kernel - 2) * channels + c) = at(qkvz, t * row + c);
        at(mixed, c) = y / (1.0 + std::exp(-y));
      }
      for (std::int64_t h = 0; h < nv; ++h) {
        const std::int64_t g = h / (nv / nk);
        std::vector<double> q(static_cast<std::size_t>(dk)), k(q.size()),
            u(static_cast<std::size_t>(dv)), o(u.size());
        double qq = 0, kk = 0;
        for (std::int64_t i = 0; i < dk; ++i) {
          qq += at(mixed, g * dk + i) * at(mixed, g * dk + i);
          kk += at(mixed, nk * dk + g * dk + i) * at(mixed, nk * dk + g * dk + i);
        }
        for (std::int64_t i = 0; i < dk; ++i) {
          at(q, i) = at(mixed, g * dk + i) / std::sqrt(qq + 1e-6) / std::sqrt(double(dk));
          at(k, i) = at(mixed, nk * dk + g * dk + i) / std::sqrt(kk + 1e-6);
        }
        const double beta = 1.0 / (1.0 + std::exp(-double(at(ba, t * 2 * nv + h))));
        const double a = double(at(ba, t * 2 * nv + nv + h)) + at(dt_bias, h);
        const double decay = std::exp(-std::exp(double(at(a_log, h))) * std::log1p(std::exp(a)));
        double* S = state.data() + h * dk * dv;
        for (std::int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
        for (std::int64_t j = 0; j < dv; ++j) {
          double sk = 0;
          for (std::int64_t i = 0; i < dk; ++i) sk += S[i * dv + j] * at(k, i);
          at(u, j) = beta * (at(mixed, 2 * nk * dk + h * dv + j) - sk);
        }
        for (std::int64_t i = 0; i < dk; ++i)
          for (std::int64_t j = 0; j < dv; ++j) S[i * dv + j] += at(k, i) * at(u, j);
        double sq = 0;
        for (std::int64_t j = 0; j < dv; ++j) {
          for (std::int64_t i = 0; i < dk; ++i) at(o, j) += S[i * dv + j] * at(q, i);
          sq += at(o, j) * at(o, j);
        }
        const double inv = 1.0 / std::sqrt(sq / double(dv) + spec.rms_norm_eps);
        for (std::int64_t j = 0; j < dv; ++j) {
          const double z = at(qkvz, t * row + channels + h * dv + j);
          at(out, t * nv * dv + h * dv + j) =
              static_cast<float>(at(o, j) * inv * at(norm, j) * z / (1.0 + std::exp(-z)));
        }
      }
    }
    return out;
  }
};

template <class T>
std::unique_ptr<DeviceBuffer> put(Backend& b, const std::vector<T>& host) {
  std::unique_ptr<DeviceBuffer> buffer =
      b.allocate(std::max<std::size_t>(1, host.size() * sizeof(T)));
  b.upload(Queue::Compute, buffer->as<void>(), host.data(), host.size() * sizeof(T));
  return buffer;
}

template <class T>
std::vector<T> get(Backend& b, const DeviceBuffer& buffer, std::size_t n) {
  std::vector<T> out(n);
  b.download(Queue::Compute, out.data(), buffer.as<const void>(), n * sizeof(T));
  b.record(Queue::Compute)->wait();
  return out;
}

// max |a - b| over max |b|; 0 when equal.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double worst = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return 1e30;
    worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return worst / scale;
}

// Host weight matrices of every stored and packed format, with their storage.
struct HostWeights {
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  std::vector<std::uint8_t> fp8;
  std::vector<float> scales;
  std::unique_ptr<kernels::PackedMatrix> packed;
  kernels::WeightMatrix matrix;
};

std::unique_ptr<HostWeights> make_weights(const std::string& format, std::int64_t rows,
                                          std::int64_t cols, std::uint32_t seed) {
  auto w = std::make_unique<HostWeights>();
  w->f32 = test::normal_values(static_cast<std::size_t>(rows * cols), seed);
  kernels::WeightMatrix& m = w->matrix;
  m.rows = rows;
  m.cols = cols;
  m.dtype = kernels::DType::F32;
  m.data = w->f32.data();
  if (format == "bf16" || format == "f16") {
    w->half.resize(w->f32.size());
    for (std::size_t i = 0; i < w->f32.size(); ++i) {
      if (format == "bf16") {
        w->half[i] = kernels::f32_to_bf16(w->f32[i]);
      } else {
        // A finite half with a random mantissa and an exponent near 1.
        w->half[i] = static_cast<std::uint16_t>((seed * 2654435761u + i * 40503u) & 0x83ffu) |
                     static_cast<std::uint16_t>((13 + i % 4) << 10);
      }
    }
    m.dtype = format == "bf16" ? kernels::DType::BF16 : kernels::DType::F16;
    m.data = w->half.data();
  } else if (format == "fp8" || format == "fp8-slice") {
    // DeepSeek-V3's layout with small blocks, so several scales cover one matrix; the slice
    // starts inside a block, as a per-head slice of kv_b does.
    const std::int64_t first = format == "fp8-slice" ? 20 : 0;
    const std::int64_t total = rows + first;
    w->fp8.resize(static_cast<std::size_t>(total * cols));
    std::mt19937 rng(seed);
    for (auto& b : w->fp8) b = static_cast<std::uint8_t>((rng() & 0x80) | (rng() % 0x60 + 0x10));
    m.block_rows = 16;
    m.block_cols = 32;
    w->scales = test::normal_values(
        static_cast<std::size_t>(((total + 15) / 16) * ((cols + 31) / 32)), seed + 1);
    m.dtype = kernels::DType::F8E4M3;
    m.data = w->fp8.data() + first * cols;
    m.block_scale = w->scales.data();
    m.first_row = first;
  } else if (format == "int8" || format == "int4" || format == "packed-bf16") {
    w->packed =
        std::make_unique<kernels::PackedMatrix>(format == "int8"   ? kernels::pack_int8(m)
                                                : format == "int4" ? kernels::pack_int4(m, 32)
                                                                   : kernels::pack_bf16(m));
    m.packed = w->packed.get();
    m.packed_variant = kernels::active_variant();
    if (format == "packed-bf16" && m.packed_variant == kernels::CpuVariant::Avx512 &&
        !kernels::detect_isa().usable.avx512_bf16)
      m.packed_variant = kernels::CpuVariant::Avx2;
  }
  return w;
}

// Attention over `len` tokens of q, k and v on `threads` threads: the first len - turn as
// one call, then the last `turn` as another; returns the last turn's outputs.
std::vector<float> attend_last_turn(const model::ModelSpec& spec, int threads,
                                    backend::KvCacheFormat format, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    std::int64_t len, std::int64_t turn) {
  const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
  backend::NumaPools pools(threads, 1, /*pin=*/false);
  backend::CpuBackend b(pools, spec);
  b.set_kv_cache_format(format);
  auto cache = b.allocate_kv_cache(spec, len);
  auto dq = put(b, q), dk = put(b, k), dv = put(b, v);
  auto out = b.allocate(len * nh * hd * sizeof(float));
  b.attention(0, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(), len - turn, 0,
              *cache, out->as<float>(), {});
  b.attention(0, dq->as<const float>() + (len - turn) * nh * hd,
              dk->as<const float>() + (len - turn) * nkv * hd,
              dv->as<const float>() + (len - turn) * nkv * hd, turn, len - turn, *cache,
              out->as<float>() + (len - turn) * nh * hd, {});
  const auto all = get<float>(b, *out, len * nh * hd);
  return {all.end() - turn * nh * hd, all.end()};
}

// A grouped-experts test's model: `fixture` packed as `format` (INT4 in groups of 16), its
// experts split for `pools` pools, and a CPU backend on two threads over them.
struct ExpertsSetup {
  ExpertsSetup(const QString& fixture, const QString& format, int pools)
      : model(load(fixture, format, pools)), threads(2, pools, false), cpu(threads, spec()) {}
  const model::ModelSpec& spec() const { return model->spec(); }
  static std::unique_ptr<model::LoadedModel> load(const QString& fixture, const QString& format,
                                                  int pools) {
    model::LoadOptions options;
    if (!model::parse_cpu_format(format.toStdString(), options.cpu_format))
      throw std::invalid_argument("no CPU format " + format.toStdString());
    options.pools = pools;
    options.int4_group = 16;
    return model::LoadedModel::load(::fixture(fixture.toLatin1().constData()), options);
  }
  std::unique_ptr<model::LoadedModel> model;
  backend::NumaPools threads;
  backend::CpuBackend cpu;
};

}  // namespace

class TestBackendOps : public QObject {
  Q_OBJECT

  std::unique_ptr<model::LoadedModel> qwen_, deepseek_, next_;
  std::unique_ptr<backend::NumaPools> pools_;
  std::unique_ptr<backend::CpuBackend> cpu_qwen_, cpu_deepseek_, cpu_next_;

  // Runs `op` on the CPU backend and on every candidate; each must agree.
  void against_cpu(backend::CpuBackend& cpu, const model::ModelSpec& spec,
                   const std::function<std::vector<float>(Backend&)>& op, const char* what) {
    const std::vector<float> want = op(cpu);
    QVERIFY2(!want.empty(), what);
    for (const Candidate& c : candidates()) {
      auto device = c.make(spec);
      const std::vector<float> got = op(*device);
      const double d = relative_difference(got, want);
      QVERIFY2(d <= c.tolerance, qPrintable(QStringLiteral("%1 on %2: relative difference %3")
                                                .arg(QLatin1String(what))
                                                .arg(QString::fromStdString(c.name))
                                                .arg(d)));
    }
  }

 private slots:
  void initTestCase() {
    std::string why;
    if (const kernels::cuda::DeviceInfo* gpu = usable_gpu(why)) {
      qInfo("CUDA backend: held against the CPU on GPU %d, %s", gpu->index, gpu->name.c_str());
    } else {
      qInfo(
          "CUDA backend not tested on this machine: %s. Only the emulated accelerator is "
          "held against the CPU here; run this test where an NVIDIA GPU and its driver are.",
          why.c_str());
    }
    model::LoadOptions int8;
    int8.cpu_format = model::CpuFormat::Int8;
    qwen_ = model::LoadedModel::load(fixture("qwen3-moe"));
    deepseek_ = model::LoadedModel::load(fixture("deepseek-v3"));
    next_ = model::LoadedModel::load(fixture("qwen3-next"));
    pools_ = std::make_unique<backend::NumaPools>(2, 1, /*pin=*/false);
    cpu_qwen_ = std::make_unique<backend::CpuBackend>(*pools_, qwen_->spec());
    cpu_deepseek_ = std::make_unique<backend::CpuBackend>(*pools_, deepseek_->spec());
    cpu_next_ = std::make_unique<backend::CpuBackend>(*pools_, next_->spec());
  }

  void matmul_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("tokens");
    for (const char* f :
         {"f32", "bf16", "f16", "fp8", "fp8-slice", "int8", "int4", "packed-bf16"}) {
      for (int tokens : {1, 5, 33}) {
        QTest::addRow("%s, 37x72, %d tokens", f, tokens)
            << QString::fromLatin1(f) << 37 << 72 << tokens;
      }
      QTest::addRow("%s, 16x8, 1 token", f) << QString::fromLatin1(f) << 16 << 8 << 1;
    }
  }
  void matmul() {
    QFETCH(QString, format);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, tokens);
    const auto host = make_weights(format.toStdString(), rows, cols, 7);
    const std::vector<float> x = test::normal_values(static_cast<std::size_t>(tokens * cols), 3);
    against_cpu(
        *cpu_qwen_, qwen_->spec(),
        [&](Backend& b) {
          auto w = b.place_matrix(host->matrix, Queue::Compute);
          auto dx = put(b, x);
          // Written into every other row of a wider output (y_stride) to check the stride too.
          auto dy = b.allocate(static_cast<std::size_t>(tokens * rows * 2) * sizeof(float));
          b.zero(dy->as<float>(), tokens * rows * 2);
          b.matmul(dx->as<const float>(), tokens, *w, dy->as<float>(), 2 * rows);
          return get<float>(b, *dy, static_cast<std::size_t>(tokens * rows * 2));
        },
        "matmul");
  }

  void elementwise() {
    const std::int64_t rows = 6, cols = 50;
    const std::vector<float> x = test::normal_values(rows * cols, 11);
    const std::vector<float> y = test::normal_values(rows * cols, 12);
    const std::vector<float> weight = test::normal_values(cols, 13);
    against_cpu(
        *cpu_qwen_, qwen_->spec(),
        [&](Backend& b) {
          auto dx = put(b, x), dy = put(b, y), dw = put(b, weight);
          auto out = b.allocate(rows * cols * sizeof(float));
          // A norm of strided rows into a packed output, then in place.
          b.rms_norm(dx->as<const float>(), cols, dw->as<const float>(), rows / 2, cols, 1e-6,
                     out->as<float>(), cols);
          b.rms_norm(dx->as<const float>() + cols, 2 * cols, dw->as<const float>(), rows / 2, cols,
                     1e-5, out->as<float>() + (rows / 2) * cols, cols);
          b.rms_norm(out->as<const float>(), cols, dw->as<const float>(), rows, cols, 1e-6,
                     out->as<float>(), cols);
          b.add_scaled(out->as<float>(), dy->as<const float>(), 1.0f, rows * cols);
          b.add_scaled(out->as<float>(), dx->as<const float>(), -0.375f, rows * cols - 3);
          b.silu_mul(out->as<float>(), dy->as<const float>(), rows * cols - 1);
          b.zero(out->as<float>() + 5, 7);
          return get<float>(b, *out, rows * cols);
        },
        "rms_norm, add_scaled, silu_mul, zero");
    // A prompt's residual adds and norms, which the CPU backend spreads over its threads.
    const std::int64_t long_rows = 400, long_cols = 200;
    QVERIFY(long_rows * long_cols >= backend::kParallelElementwise);
    const std::vector<float> lx = test::normal_values(long_rows * long_cols, 14);
    const std::vector<float> ly = test::normal_values(long_rows * long_cols, 15);
    const std::vector<float> lw = test::normal_values(long_cols, 16);
    against_cpu(
        *cpu_qwen_, qwen_->spec(),
        [&](Backend& b) {
          auto dx = put(b, lx), dy = put(b, ly), dw = put(b, lw);
          auto out = b.allocate(long_rows * long_cols * sizeof(float));
          b.rms_norm(dx->as<const float>(), long_cols, dw->as<const float>(), long_rows, long_cols,
                     1e-6, out->as<float>(), long_cols);
          b.add_scaled(out->as<float>(), dy->as<const float>(), 1.0f, long_rows * long_cols);
          b.add_scaled(out->as<float>(), dx->as<const float>(), 0.5f, long_rows * long_cols - 9);
          return get<float>(b, *out, long_rows * long_cols);
        },
        "rms_norm and add_scaled over a prompt, on every thread");
  }

  void embedAndRope() {
    const model::ModelSpec& spec = deepseek_->spec();  // YaRN with interleaved pairs
    const std::vector<std::int32_t> ids = {3, 0, 17, 5, 3};
    against_cpu(
        *cpu_deepseek_, spec,
        [&](Backend& b) {
          auto table = b.place_matrix(deepseek_->weights().embedding, Queue::Compute);
          auto rope = b.make_rope(spec.rope, spec.rope_dim());
          auto dids = put(b, ids);
          const std::int64_t h = spec.hidden_size;
          auto x = b.allocate(ids.size() * h * sizeof(float));
          b.embed(*table, dids->as<const std::int32_t>(), 5, x->as<float>());
          // Two heads of the rope's width per token at an offset, from position 9.
          b.rope(*rope, x->as<float>() + 3, 5, h, 2, spec.rope_dim() + 1, 9);
          return get<float>(b, *x, ids.size() * h);
        },
        "embed, rope (YaRN)");
    // A prompt's embedding rows, which the CPU backend converts on every thread.
    const std::int64_t h = spec.hidden_size;
    const std::int64_t many = backend::kParallelElementwise / h + 3;
    std::vector<std::int32_t> long_ids(static_cast<std::size_t>(many));
    for (std::size_t i = 0; i < long_ids.size(); ++i)
      long_ids[i] = static_cast<std::int32_t>((i * 7) % static_cast<std::size_t>(spec.vocab_size));
    against_cpu(
        *cpu_deepseek_, spec,
        [&](Backend& b) {
          auto table = b.place_matrix(deepseek_->weights().embedding, Queue::Compute);
          auto dids = put(b, long_ids);
          auto x = b.allocate(long_ids.size() * h * sizeof(float));
          b.embed(*table, dids->as<const std::int32_t>(), many, x->as<float>());
          return get<float>(b, *x, long_ids.size() * h);
        },
        "embed over a prompt, on every thread");
    const model::ModelSpec& qwen = qwen_->spec();
    const std::vector<float> v = test::normal_values(4 * qwen.head_dim * 3, 21);
    against_cpu(
        *cpu_qwen_, qwen,
        [&](Backend& b) {
          auto rope = b.make_rope(qwen.rope, qwen.rope_dim());
          auto x = put(b, v);
          b.rope(*rope, x->as<float>(), 4, qwen.head_dim * 3, 3, qwen.head_dim, 0);
          return get<float>(b, *x, v.size());
        },
        "rope (default)");
    // A prompt's worth, which the CPU backend spreads over its threads.
    const std::int64_t tokens = 300;
    QVERIFY(tokens * 3 >= backend::kParallelRopeHeads);
    const std::vector<float> long_v = test::normal_values(tokens * qwen.head_dim * 3, 22);
    against_cpu(
        *cpu_qwen_, qwen,
        [&](Backend& b) {
          auto rope = b.make_rope(qwen.rope, qwen.rope_dim());
          auto x = put(b, long_v);
          b.rope(*rope, x->as<float>(), tokens, qwen.head_dim * 3, 3, qwen.head_dim, 7);
          return get<float>(b, *x, long_v.size());
        },
        "rope over a prompt, on every thread");
  }

  void groupedQueryAttention() {
    const model::ModelSpec& spec = qwen_->spec();
    const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
    const auto q = test::normal_values(9 * nh * hd, 31), k = test::normal_values(9 * nkv * hd, 32),
               v = test::normal_values(9 * nkv * hd, 33);
    against_cpu(
        *cpu_qwen_, spec,
        [&](Backend& b) {
          auto cache = b.allocate_kv_cache(spec, 16);
          auto dq = put(b, q), dk = put(b, k), dv = put(b, v);
          auto out = b.allocate(9 * nh * hd * sizeof(float));
          // A prompt of 6 into layer 1, then 3 more after it (a decode-like second call).
          b.attention(1, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(), 6, 0,
                      *cache, out->as<float>(), {});
          b.attention(1, dq->as<const float>() + 6 * nh * hd, dk->as<const float>() + 6 * nkv * hd,
                      dv->as<const float>() + 6 * nkv * hd, 3, 6, *cache,
                      out->as<float>() + 6 * nh * hd, {});
          return get<float>(b, *out, 9 * nh * hd);
        },
        "attention");
    // gpt-oss's kind: layer 1 slides over the last 4 positions, and every head has a sink.
    model::ModelSpec windowed = spec;
    windowed.layer_window.assign(static_cast<std::size_t>(spec.num_layers), 0);
    windowed.layer_window[1] = 4;
    const auto sinks = test::normal_values(nh, 34);
    const auto run = [&](Backend& b, bool with_sinks) {
      auto cache = b.allocate_kv_cache(windowed, 16);
      auto dq = put(b, q), dk = put(b, k), dv = put(b, v), ds = put(b, sinks);
      auto out = b.allocate(9 * nh * hd * sizeof(float));
      const backend::DevicePtr<const float> s =
          with_sinks ? ds->as<const float>() : backend::DevicePtr<const float>();
      b.attention(1, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(), 6, 0,
                  *cache, out->as<float>(), s);
      b.attention(1, dq->as<const float>() + 6 * nh * hd, dk->as<const float>() + 6 * nkv * hd,
                  dv->as<const float>() + 6 * nkv * hd, 3, 6, *cache,
                  out->as<float>() + 6 * nh * hd, s);
      return get<float>(b, *out, 9 * nh * hd);
    };
    against_cpu(
        *cpu_qwen_, windowed, [&](Backend& b) { return run(b, true); },
        "attention, sliding window and sinks");
    // Both change the result: the window from the fifth token on, the sinks everywhere.
    const auto full = run(*cpu_qwen_, false);
    auto unwindowed_spec = windowed;
    unwindowed_spec.layer_window[1] = 0;
    {
      auto cache = cpu_qwen_->allocate_kv_cache(unwindowed_spec, 16);
      auto dq = put(*cpu_qwen_, q), dk = put(*cpu_qwen_, k), dv = put(*cpu_qwen_, v);
      auto out = cpu_qwen_->allocate(9 * nh * hd * sizeof(float));
      cpu_qwen_->attention(1, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(),
                           9, 0, *cache, out->as<float>(), {});
      const auto all = get<float>(*cpu_qwen_, *out, 9 * nh * hd);
      QCOMPARE(std::vector<float>(all.begin(), all.begin() + 4 * nh * hd),
               std::vector<float>(full.begin(), full.begin() + 4 * nh * hd));
      QVERIFY(std::vector<float>(all.begin() + 4 * nh * hd, all.end()) !=
              std::vector<float>(full.begin() + 4 * nh * hd, full.end()));
    }
    QVERIFY(run(*cpu_qwen_, true) != full);
  }

  // A decoded token over a long context: with threads to spare, each KV head's positions
  // are split into parts that threads take apart (flash decoding); the combined result is
  // the unsplit one's, with and without sinks.
  void longContextDecodeSplitsAcrossThreads() {
    QCOMPARE(backend::cpu_ops::attention_parts(4, 32, 8192), std::int64_t(16));
    QCOMPARE(backend::cpu_ops::attention_parts(4, 32, 1000), std::int64_t(3));
    QCOMPARE(backend::cpu_ops::attention_parts(4, 2, 8192), std::int64_t(1));  // jobs enough
    QCOMPARE(backend::cpu_ops::attention_parts(4, 32, 500), std::int64_t(1));  // too short
    const model::ModelSpec& spec = qwen_->spec();
    const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
    const std::int64_t len = 1100;
    const auto q = test::normal_values(len * nh * hd, 41),
               k = test::normal_values(len * nkv * hd, 42),
               v = test::normal_values(len * nkv * hd, 43), sinks = test::normal_values(nh, 44);
    QVERIFY(backend::cpu_ops::attention_parts(nkv, 8, len) > 1);
    QCOMPARE(backend::cpu_ops::attention_parts(nkv, 1, len), std::int64_t(1));
    for (bool with_sinks : {false, true}) {
      std::vector<float> decoded[2];
      for (int threads : {1, 8}) {
        backend::NumaPools pools(threads, 1, /*pin=*/false);
        backend::CpuBackend b(pools, spec);
        auto cache = b.allocate_kv_cache(spec, len);
        auto dq = put(b, q), dk = put(b, k), dv = put(b, v), ds = put(b, sinks);
        auto out = b.allocate(len * nh * hd * sizeof(float));
        const backend::DevicePtr<const float> s =
            with_sinks ? ds->as<const float>() : backend::DevicePtr<const float>();
        b.attention(0, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(), len - 1,
                    0, *cache, out->as<float>(), s);
        b.attention(0, dq->as<const float>() + (len - 1) * nh * hd,
                    dk->as<const float>() + (len - 1) * nkv * hd,
                    dv->as<const float>() + (len - 1) * nkv * hd, 1, len - 1, *cache,
                    out->as<float>() + (len - 1) * nh * hd, s);
        const auto all = get<float>(b, *out, len * nh * hd);
        decoded[threads == 1 ? 0 : 1].assign(all.end() - nh * hd, all.end());
      }
      // The order of sums alone: each is about 1.2e-6 from a double-precision reference
      // (mean over 80 heads of 1100-1800 positions), and a wrong combination would be ~1e-1.
      const double d = relative_difference(decoded[1], decoded[0]);
      QVERIFY2(d < 2e-6, qPrintable(QStringLiteral("relative difference %1").arg(d)));
    }
  }

  // A prompt's attention goes through the flash-style kernel in jobs of a few tokens; the
  // same tokens one at a time take the per-token kernel. Both give the same attention, in
  // either cache format, with a sliding window and sinks.
  void promptAttentionMatchesTokenByToken() {
    QCOMPARE(backend::cpu_ops::prompt_job_tokens(2048, 4, 2), kernels::kPromptJobTokens);
    QCOMPARE(backend::cpu_ops::prompt_job_tokens(6, 2, 2), std::int64_t(3));
    QCOMPARE(backend::cpu_ops::prompt_job_tokens(40, 4, 32), std::int64_t(2));
    QCOMPARE(backend::cpu_ops::prompt_job_tokens(3, 4, 1), std::int64_t(3));
    QCOMPARE(backend::cpu_ops::prompt_job_tokens(16, 4, 32), std::int64_t(1));
    QVERIFY(!backend::cpu_ops::prompt_takes_blocks(1, 4, 2, 100));    // decoding
    QVERIFY(backend::cpu_ops::prompt_takes_blocks(2, 4, 32, 100));    // short: never split
    QVERIFY(backend::cpu_ops::prompt_takes_blocks(40, 4, 32, 8192));  // 80 jobs for 32
    // A short turn after a long conversation on many cores: 16 jobs for 32 threads.
    QVERIFY(!backend::cpu_ops::prompt_takes_blocks(4, 4, 32, 8192));
    QVERIFY(backend::cpu_ops::prompt_takes_blocks(4, 4, 2, 8192));
    model::ModelSpec spec = qwen_->spec();
    spec.layer_window.assign(static_cast<std::size_t>(spec.num_layers), 0);
    spec.layer_window[1] = 150;
    const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
    const std::int64_t len = 300;
    QVERIFY(backend::cpu_ops::prompt_job_tokens(len, nkv, 2) > 1);
    const auto q = test::normal_values(len * nh * hd, 61),
               k = test::normal_values(len * nkv * hd, 62),
               v = test::normal_values(len * nkv * hd, 63), sinks = test::normal_values(nh, 64);
    for (backend::KvCacheFormat f : {backend::KvCacheFormat::F32, backend::KvCacheFormat::Bf16,
                                     backend::KvCacheFormat::Int8}) {
      for (std::int64_t layer : {0, 1}) {
        std::vector<float> results[2];
        for (bool whole : {true, false}) {
          backend::NumaPools pools(2, 1, /*pin=*/false);
          backend::CpuBackend b(pools, spec);
          b.set_kv_cache_format(f);
          auto cache = b.allocate_kv_cache(spec, len);
          auto dq = put(b, q), dk = put(b, k), dv = put(b, v), ds = put(b, sinks);
          auto out = b.allocate(len * nh * hd * sizeof(float));
          const backend::DevicePtr<const float> s =
              layer == 1 ? ds->as<const float>() : backend::DevicePtr<const float>();
          // 20 tokens first, so that the prompt starts deep in a key block.
          const std::int64_t start = 20;
          b.attention(layer, dq->as<const float>(), dk->as<const float>(), dv->as<const float>(),
                      start, 0, *cache, out->as<float>(), s);
          if (whole) {
            b.attention(layer, dq->as<const float>() + start * nh * hd,
                        dk->as<const float>() + start * nkv * hd,
                        dv->as<const float>() + start * nkv * hd, len - start, start, *cache,
                        out->as<float>() + start * nh * hd, s);
          } else {
            for (std::int64_t t = start; t < len; ++t) {
              b.attention(layer, dq->as<const float>() + t * nh * hd,
                          dk->as<const float>() + t * nkv * hd,
                          dv->as<const float>() + t * nkv * hd, 1, t, *cache,
                          out->as<float>() + t * nh * hd, s);
            }
          }
          results[whole ? 0 : 1] = get<float>(b, *out, len * nh * hd);
        }
        // fp32: the order of sums alone; BF16 and 8 bits: each block's weights rounded to
        // their own maximum, as a decoded token's parts are (8 bits: to bytes per chunk of
        // 64 positions, against the largest of the chunk's positions each row sees).
        const double d = relative_difference(results[0], results[1]);
        const double allowed = f == backend::KvCacheFormat::F32    ? 1e-6
                               : f == backend::KvCacheFormat::Int8 ? 1e-2
                                                                   : 5e-3;
        QVERIFY2(d < allowed,
                 qPrintable(QStringLiteral("%1 cache, layer %2: relative difference %3")
                                .arg(QString::fromUtf8(backend::kv_cache_format_name(f).data()))
                                .arg(layer)
                                .arg(d)));
      }
    }
  }

  // A short turn after a long context on many threads takes the per-token kernel with each
  // context split into parts; on one thread the same call takes the prompt kernel. Both
  // give the same attention.
  void shortTurnAfterLongContextSplitsContexts() {
    const model::ModelSpec& spec = qwen_->spec();
    const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
    const std::int64_t len = 1100, turn = 3;
    QVERIFY(!backend::cpu_ops::prompt_takes_blocks(turn, nkv, 16, len));
    QVERIFY(backend::cpu_ops::prompt_takes_blocks(turn, nkv, 1, len));
    const auto q = test::normal_values(len * nh * hd, 71),
               k = test::normal_values(len * nkv * hd, 72),
               v = test::normal_values(len * nkv * hd, 73);
    const std::vector<float> results[2] = {
        attend_last_turn(spec, 1, backend::KvCacheFormat::F32, q, k, v, len, turn),
        attend_last_turn(spec, 16, backend::KvCacheFormat::F32, q, k, v, len, turn)};
    const double d = relative_difference(results[1], results[0]);
    QVERIFY2(d < 1e-6, qPrintable(QStringLiteral("relative difference %1").arg(d)));
  }

  // The gated DeltaNet layer against the double-precision reference: token by token and in
  // chunks (whole, ragged and one-token chunks), a prompt continued by decode steps and by a
  // second prompt; the snapshot taken mid-way restored; the emulated device as the CPU.
  void gatedDeltaNet() {
    const model::ModelSpec& spec = next_->spec();
    const std::int64_t nv = spec.linear_value_heads, dv = spec.linear_value_dim;
    const std::int64_t channels = spec.linear_conv_channels(), kernel = spec.linear_conv_kernel;
    const std::int64_t row = channels + nv * dv;
    const std::int64_t total = 150;
    auto qkvz = test::normal_values(static_cast<std::size_t>(total * row), 51);
    const auto ba = test::normal_values(static_cast<std::size_t>(total * 2 * nv), 52);
    const auto conv = test::normal_values(static_cast<std::size_t>(channels * kernel), 53);
    auto a_log = test::normal_values(static_cast<std::size_t>(nv), 54);
    a_log[0] = 3.0f;  // one head that forgets almost at once, to test e^G far below 1
    const auto dt_bias = test::normal_values(static_cast<std::size_t>(nv), 55);
    const auto norm = test::normal_values(static_cast<std::size_t>(dv), 56);
    const std::int64_t layer = 0;
    QVERIFY(spec.layer_is_linear[layer]);
    // Steps: a prompt of 100, one decode token, a second prompt of 37, 12 decode tokens.
    const std::vector<std::int64_t> steps = {100, 1, 37, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    DeltaNetReference reference(spec);
    std::vector<float> want;
    for (std::int64_t pos = 0, i = 0; i < std::int64_t(steps.size());
         pos += steps[size_t(i)], ++i) {
      const std::vector<float> x(qkvz.begin() + pos * row,
                                 qkvz.begin() + (pos + steps[size_t(i)]) * row);
      const std::vector<float> b(ba.begin() + pos * 2 * nv,
                                 ba.begin() + (pos + steps[size_t(i)]) * 2 * nv);
      const auto o = reference.run(x, b, steps[size_t(i)], conv, a_log, dt_bias, norm);
      want.insert(want.end(), o.begin(), o.end());
    }
    backend::CpuThreads threads(*pools_);
    for (std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7},
                               backend::cpu_ops::kDeltaRuleChunk, std::int64_t{128}}) {
      backend::KvCache cache(spec, 4);
      std::vector<float> got(want.size());
      for (std::int64_t pos = 0, i = 0; i < std::int64_t(steps.size());
           pos += steps[size_t(i)], ++i) {
        backend::cpu_ops::gated_delta_net(threads, spec, cache, layer, qkvz.data() + pos * row,
                                          ba.data() + pos * 2 * nv, steps[size_t(i)], pos,
                                          conv.data(), a_log.data(), dt_bias.data(), norm.data(),
                                          got.data() + pos * nv * dv, chunk);
      }
      const double d = relative_difference(got, want);
      QVERIFY2(d < 2e-5,
               qPrintable(QStringLiteral("chunk %1: relative difference %2").arg(chunk).arg(d)));
    }
    // The backends: 20 tokens, the snapshot, 5 more, back to the snapshot and the same 5
    // again (the same numbers), then 64 tokens as one prompt; sigmoid gates both ways.
    const auto gate = test::normal_values(static_cast<std::size_t>(89 * nv * dv), 57);
    against_cpu(
        *cpu_next_, spec,
        [&](Backend& b) {
          auto cache = b.allocate_kv_cache(spec, 4);
          auto dx = put(b, qkvz), dba = put(b, ba), dc = put(b, conv), da = put(b, a_log),
               ddt = put(b, dt_bias), dn = put(b, norm), dg = put(b, gate);
          auto out = b.allocate(static_cast<std::size_t>(94 * nv * dv) * sizeof(float));
          const Backend::GatedDeltaNetWeights w{dc->as<const float>(), da->as<const float>(),
                                                ddt->as<const float>(), dn->as<const float>()};
          const auto step = [&](std::int64_t from, std::int64_t n, std::int64_t pos,
                                std::int64_t to) {
            b.gated_delta_net(layer, dx->as<const float>() + from * row,
                              dba->as<const float>() + from * 2 * nv, n, pos, w, *cache,
                              out->as<float>() + to * nv * dv);
          };
          step(0, 20, 0, 0);
          b.save_recurrent_state(*cache);
          step(20, 5, 20, 20);
          b.restore_recurrent_state(*cache);
          step(20, 5, 20, 25);
          step(25, 64, 25, 30);
          const auto ungated = get<float>(b, *out, static_cast<std::size_t>(94 * nv * dv));
          const auto first =
              std::vector<float>(ungated.begin() + 20 * nv * dv, ungated.begin() + 25 * nv * dv);
          const auto again =
              std::vector<float>(ungated.begin() + 25 * nv * dv, ungated.begin() + 30 * nv * dv);
          if (first != again) return std::vector<float>{};  // the snapshot did not restore
          b.sigmoid_gate(out->as<float>(), dg->as<const float>(), 89, nv * dv, nv * dv);
          b.sigmoid_gate(out->as<float>(), dg->as<const float>(), 89, nv * dv, 1);
          return get<float>(b, *out, static_cast<std::size_t>(94 * nv * dv));
        },
        "gated_delta_net, save/restore_recurrent_state, sigmoid_gate");
  }

  void latentAttention() {
    const model::ModelSpec& spec = deepseek_->spec();
    const std::int64_t nh = spec.num_heads;
    const std::int64_t qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim;
    const std::int64_t row = spec.kv_lora_rank + spec.qk_rope_head_dim;
    const auto q = test::normal_values(7 * nh * qk, 41), kv = test::normal_values(7 * row, 42);
    against_cpu(
        *cpu_deepseek_, spec,
        [&](Backend& b) {
          auto cache = b.allocate_kv_cache(spec, 8);
          auto kv_b = b.place_matrix(deepseek_->weights().layers[0].attention.kv_b, Queue::Compute);
          auto dq = put(b, q), dkv = put(b, kv);
          auto out = b.allocate(7 * nh * spec.v_head_dim * sizeof(float));
          b.latent_attention(0, dq->as<const float>(), dkv->as<const float>(),
                             LatentProjections{kv_b.get()}, 5, 0, *cache, out->as<float>());
          b.latent_attention(0, dq->as<const float>() + 5 * nh * qk,
                             dkv->as<const float>() + 5 * row, LatentProjections{kv_b.get()}, 2, 5,
                             *cache, out->as<float>() + 5 * nh * spec.v_head_dim);
          return get<float>(b, *out, 7 * nh * spec.v_head_dim);
        },
        "latent attention");
    // A decoded token over a long context, its few jobs split across spare threads: the
    // same as unsplit.
    const std::int64_t len = 600;
    QVERIFY(backend::cpu_ops::attention_parts((nh + 7) / 8, 8, len) > 1);
    const auto long_q = test::normal_values(len * nh * qk, 43),
               long_kv = test::normal_values(len * row, 44);
    std::vector<float> decoded[2];
    for (int threads : {1, 8}) {
      backend::NumaPools pools(threads, 1, /*pin=*/false);
      backend::CpuBackend b(pools, spec);
      auto cache = b.allocate_kv_cache(spec, len);
      auto kv_b = b.place_matrix(deepseek_->weights().layers[0].attention.kv_b, Queue::Compute);
      auto dq = put(b, long_q), dkv = put(b, long_kv);
      auto out = b.allocate(len * nh * spec.v_head_dim * sizeof(float));
      b.latent_attention(0, dq->as<const float>(), dkv->as<const float>(),
                         LatentProjections{kv_b.get()}, len - 1, 0, *cache, out->as<float>());
      b.latent_attention(0, dq->as<const float>() + (len - 1) * nh * qk,
                         dkv->as<const float>() + (len - 1) * row, LatentProjections{kv_b.get()}, 1,
                         len - 1, *cache, out->as<float>() + (len - 1) * nh * spec.v_head_dim);
      const auto all = get<float>(b, *out, len * nh * spec.v_head_dim);
      decoded[threads == 1 ? 0 : 1].assign(all.end() - nh * spec.v_head_dim, all.end());
    }
    const double d = relative_difference(decoded[1], decoded[0]);
    QVERIFY2(d < 1e-6, qPrintable(QStringLiteral("relative difference %1").arg(d)));
  }

  // The CPU's BF16 KV cache (half the bytes) and its 8-bit one (a little over a quarter)
  // against its fp32 one: grouped-query attention with a sliding window and sinks, and latent
  // attention, a prompt then decode steps, close to fp32 (keys and values rounded to 8
  // significant bits, or to 8-bit integers) but not equal; a long context's decode split
  // across threads as unsplit.
  void reducedKvCachesAreCloseToF32_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<double>("allowed");
    QTest::newRow("bf16") << static_cast<int>(backend::KvCacheFormat::Bf16) << 2e-2;
    QTest::newRow("int8") << static_cast<int>(backend::KvCacheFormat::Int8) << 2.5e-2;
  }

  void reducedKvCachesAreCloseToF32() {
    QFETCH(int, format);
    QFETCH(double, allowed);
    const auto reduced = static_cast<backend::KvCacheFormat>(format);
    const auto compare = [&](const model::ModelSpec& spec, const char* what,
                             const std::function<std::vector<float>(Backend&, std::int64_t)>& run,
                             std::int64_t len) {
      std::vector<float> results[2];
      std::uint64_t bytes[2] = {};
      for (backend::KvCacheFormat f : {backend::KvCacheFormat::F32, reduced}) {
        backend::NumaPools pools(2, 1, /*pin=*/false);
        backend::CpuBackend b(pools, spec);
        b.set_kv_cache_format(f);
        const int i = f == reduced ? 1 : 0;
        bytes[i] = b.kv_cache_bytes(spec, len);
        results[i] = run(b, len);
      }
      const double d = relative_difference(results[1], results[0]);
      QVERIFY2(d > 0.0 && d < allowed,
               qPrintable(QStringLiteral("%1: relative difference %2").arg(what).arg(d)));
      // BF16: half of fp32's bytes; 8 bits: a quarter and a float per 32 (9/32).
      if (reduced == backend::KvCacheFormat::Bf16) {
        QCOMPARE(bytes[1] * 2, bytes[0]);
      } else {
        QCOMPARE(bytes[1] * 32, bytes[0] * 9);
      }
    };
    {
      model::ModelSpec spec = qwen_->spec();
      spec.layer_window.assign(static_cast<std::size_t>(spec.num_layers), 0);
      spec.layer_window[1] = 5;
      const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
      const auto q = test::normal_values(11 * nh * hd, 51),
                 k = test::normal_values(11 * nkv * hd, 52),
                 v = test::normal_values(11 * nkv * hd, 53), sinks = test::normal_values(nh, 54);
      for (std::int64_t layer : {0, 1}) {
        compare(
            spec, layer == 0 ? "attention" : "attention, sliding window and sinks",
            [&](Backend& b, std::int64_t len) {
              auto cache = b.allocate_kv_cache(spec, len);
              auto dq = put(b, q), dk = put(b, k), dv = put(b, v), ds = put(b, sinks);
              auto out = b.allocate(11 * nh * hd * sizeof(float));
              const backend::DevicePtr<const float> s =
                  layer == 1 ? ds->as<const float>() : backend::DevicePtr<const float>();
              // A prompt of 7 from an odd start of pairs, then 4 decoded one by one.
              b.attention(layer, dq->as<const float>(), dk->as<const float>(),
                          dv->as<const float>(), 7, 0, *cache, out->as<float>(), s);
              for (std::int64_t t = 7; t < 11; ++t) {
                b.attention(layer, dq->as<const float>() + t * nh * hd,
                            dk->as<const float>() + t * nkv * hd,
                            dv->as<const float>() + t * nkv * hd, 1, t, *cache,
                            out->as<float>() + t * nh * hd, s);
              }
              return get<float>(b, *out, 11 * nh * hd);
            },
            16);
      }
    }
    {
      // The 8-bit cache takes rows of whole 32s: the fixture's latent of 32 with a rotary key
      // of 32 (its 8 would make the keys 40 wide). The latent projection is the fixture's.
      model::ModelSpec spec = deepseek_->spec();
      if (reduced == backend::KvCacheFormat::Int8) spec.qk_rope_head_dim = 32;
      const std::int64_t nh = spec.num_heads;
      const std::int64_t qk = spec.qk_nope_head_dim + spec.qk_rope_head_dim;
      const std::int64_t row = spec.kv_lora_rank + spec.qk_rope_head_dim;
      const auto q = test::normal_values(7 * nh * qk, 55), kv = test::normal_values(7 * row, 56);
      compare(
          spec, "latent attention",
          [&](Backend& b, std::int64_t len) {
            auto cache = b.allocate_kv_cache(spec, len);
            auto kv_b =
                b.place_matrix(deepseek_->weights().layers[0].attention.kv_b, Queue::Compute);
            auto dq = put(b, q), dkv = put(b, kv);
            auto out = b.allocate(7 * nh * spec.v_head_dim * sizeof(float));
            b.latent_attention(0, dq->as<const float>(), dkv->as<const float>(),
                               LatentProjections{kv_b.get()}, 5, 0, *cache, out->as<float>());
            b.latent_attention(0, dq->as<const float>() + 5 * nh * qk,
                               dkv->as<const float>() + 5 * row, LatentProjections{kv_b.get()}, 2,
                               5, *cache, out->as<float>() + 5 * nh * spec.v_head_dim);
            return get<float>(b, *out, 7 * nh * spec.v_head_dim);
          },
          8);
    }
    // A decoded token over a long context, split across 8 threads and not.
    const model::ModelSpec& spec = qwen_->spec();
    const std::int64_t nh = spec.num_heads, nkv = spec.num_kv_heads, hd = spec.head_dim;
    const std::int64_t len = 1101;
    const auto q = test::normal_values(len * nh * hd, 57),
               k = test::normal_values(len * nkv * hd, 58),
               v = test::normal_values(len * nkv * hd, 59);
    const std::vector<float> decoded[2] = {attend_last_turn(spec, 1, reduced, q, k, v, len, 1),
                                           attend_last_turn(spec, 8, reduced, q, k, v, len, 1)};
    // Each part rounds its own weights (scaled by its own maximum) to BF16, or to bytes per
    // chunk of 64 positions: within their 8 bits of the unsplit ones.
    const double d = relative_difference(decoded[1], decoded[0]);
    const double split_allowed = reduced == backend::KvCacheFormat::Int8 ? 1e-2 : 5e-3;
    QVERIFY2(d < split_allowed, qPrintable(QStringLiteral("relative difference %1").arg(d)));
  }

  // A width the 8-bit cache does not take is refused with what to use instead.
  void int8KvCacheRefusesOddWidths() {
    model::ModelSpec spec = qwen_->spec();
    spec.head_dim = 24;
    try {
      backend::KvCache cache(spec, 16, backend::KvCacheFormat::Int8);
      QFAIL("a KV cache of heads 24 wide in 8 bits was made");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("--kv-cache bf16") != std::string::npos, e.what());
    }
  }

  // A few tokens, and a prompt's worth that the CPU backend routes on every thread.
  void routing_data() {
    QTest::addColumn<int>("tokens");
    QTest::newRow("11 tokens") << 11;
    QTest::newRow("a prompt") << 20000;
  }

  void routing() {
    QFETCH(int, tokens);
    for (const model::LoadedModel* m : {qwen_.get(), deepseek_.get()}) {
      const model::ModelSpec& spec = m->spec();
      const std::int64_t n = tokens, e = spec.num_experts, k = spec.experts_per_token;
      if (n > 11) QVERIFY(n * e >= backend::kParallelElementwise);
      const auto logits = test::normal_values(n * e, 51);
      const auto bias = test::normal_values(e, 52);
      backend::CpuBackend& cpu = m == qwen_.get() ? *cpu_qwen_ : *cpu_deepseek_;
      against_cpu(
          cpu, spec,
          [&](Backend& b) {
            auto dl = put(b, logits), db = put(b, bias);
            auto ids = b.allocate(n * k * 4), weights = b.allocate(n * k * 4);
            b.route(dl->as<const float>(), n, backend::routing_params(spec),
                    spec.scoring == model::RouterScoring::Sigmoid
                        ? db->as<const float>()
                        : backend::DevicePtr<const float>(),
                    ids->as<std::int32_t>(), weights->as<float>());
            std::vector<float> both = get<float>(b, *weights, n * k);
            for (std::int32_t id : get<std::int32_t>(b, *ids, n * k))
              both.push_back(static_cast<float>(id));
            return both;
          },
          spec.scoring == model::RouterScoring::Sigmoid ? "grouped sigmoid routing"
                                                        : "softmax routing");
    }
  }

  void groupedExperts_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("pools");
    QTest::addColumn<int>("tokens");
    for (const char* f : {"native", "int8", "int4", "bf16"}) {
      for (int tokens : {1, 13})
        QTest::addRow("qwen3-moe %s, %d tokens", f, tokens) << "qwen3-moe" << f << 1 << tokens;
    }
    // Experts of width 32 split in two 16-row slices, one per pool.
    QTest::addRow("deepseek-v3 int8 split for 2 pools") << "deepseek-v3"
                                                        << "int8" << 2 << 13;
    QTest::addRow("deepseek-v3 int4 split for 2 pools") << "deepseek-v3"
                                                        << "int4" << 2 << 5;
  }
  void groupedExperts() {
    QFETCH(QString, fixture);
    QFETCH(QString, format);
    QFETCH(int, pools);
    QFETCH(int, tokens);
    ExpertsSetup setup(fixture, format, pools);
    const model::ModelSpec& spec = setup.spec();
    backend::CpuBackend& cpu = setup.cpu;
    const std::int64_t h = spec.hidden_size, k = spec.experts_per_token, e = spec.num_experts;
    const auto x = test::normal_values(tokens * h, 61);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * k));
    std::vector<float> weights = test::normal_values(ids.size(), 62);
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>((i * 5 + i / k) % e);
    const auto initial = test::normal_values(tokens * h, 63);
    const auto& experts = setup.model->weights().layers[2].experts.experts;  // layer 1 is dense
    against_cpu(
        cpu, spec,
        [&](Backend& b) {
          // Experts 0, 3 and 5 resident; pairs naming the others are not this backend's.
          std::vector<std::unique_ptr<backend::DeviceExpert>> resident;
          std::vector<const backend::DeviceExpert*> table(static_cast<std::size_t>(e), nullptr);
          for (int id : {0, 3, 5}) {
            resident.push_back(b.place_expert(experts[static_cast<std::size_t>(id)], Queue::Copy));
            table[static_cast<std::size_t>(id)] = resident.back().get();
          }
          b.wait(Queue::Compute, b.record(Queue::Copy));
          auto dx = put(b, x), dids = put(b, ids), dw = put(b, weights);
          auto out = put(b, initial);  // the product adds to what is there
          b.set_part(backend::Part::Experts);
          b.grouped_experts(dx->as<const float>(), tokens, dids->as<const std::int32_t>(),
                            dw->as<const float>(), k, table, out->as<float>());
          return get<float>(b, *out, tokens * h);
        },
        "grouped experts");
  }

  // A prompt's experts add each token's slots into its row by token, the tokens shared among
  // the threads: the same results as the tokens one at a time (a decode step's path, which
  // adds its few slots alone), for every CPU format and with the experts split for two pools.
  void promptExpertsMatchTokenByToken_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("pools");
    for (const char* f : {"native", "int8", "int4", "bf16"})
      QTest::addRow("qwen3-moe %s", f) << "qwen3-moe" << f << 1;
    QTest::addRow("deepseek-v3 int8 split for 2 pools") << "deepseek-v3"
                                                        << "int8" << 2;
  }
  void promptExpertsMatchTokenByToken() {
    QFETCH(QString, fixture);
    QFETCH(QString, format);
    QFETCH(int, pools);
    ExpertsSetup setup(fixture, format, pools);
    const model::ModelSpec& spec = setup.spec();
    backend::CpuBackend& cpu = setup.cpu;
    const std::int64_t h = spec.hidden_size, k = spec.experts_per_token, e = spec.num_experts;
    constexpr std::int64_t tokens = 70;  // 140 or more slots: past the decode step's path
    const auto x = test::normal_values(tokens * h, 81);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * k));
    const std::vector<float> weights = test::normal_values(ids.size(), 82);
    // Each token's k distinct experts, in an order that differs from token to token.
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t j = 0; j < k; ++j)
        ids[static_cast<std::size_t>(t * k + j)] =
            static_cast<std::int32_t>((t * 7 + (t % 2 == 0 ? j : k - 1 - j)) % e);
    const auto initial = test::normal_values(tokens * h, 83);
    const auto& experts = setup.model->weights().layers[2].experts.experts;  // layer 1 is dense
    std::vector<std::unique_ptr<backend::DeviceExpert>> resident;
    std::vector<const backend::DeviceExpert*> table(static_cast<std::size_t>(e), nullptr);
    for (std::int64_t id = 0; id < e; ++id) {
      resident.push_back(cpu.place_expert(experts[static_cast<std::size_t>(id)], Queue::Compute));
      table[static_cast<std::size_t>(id)] = resident.back().get();
    }
    cpu.set_part(backend::Part::Experts);
    const auto experts_of = [&](std::int64_t t0, std::int64_t n) {
      const auto begin = static_cast<std::ptrdiff_t>(t0 * k), end = begin + n * k;
      auto dx = put(cpu, std::vector<float>(x.begin() + t0 * h, x.begin() + (t0 + n) * h));
      auto dids = put(cpu, std::vector<std::int32_t>(ids.begin() + begin, ids.begin() + end));
      auto dw = put(cpu, std::vector<float>(weights.begin() + begin, weights.begin() + end));
      auto out =
          put(cpu, std::vector<float>(initial.begin() + t0 * h, initial.begin() + (t0 + n) * h));
      cpu.grouped_experts(dx->as<const float>(), n, dids->as<const std::int32_t>(),
                          dw->as<const float>(), k, table, out->as<float>());
      return get<float>(cpu, *out, n * h);
    };
    const std::vector<float> prompt = experts_of(0, tokens);
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::vector<float> alone = experts_of(t, 1);
      const std::vector<float> row(prompt.begin() + t * h, prompt.begin() + (t + 1) * h);
      const double d = relative_difference(row, alone);
      QVERIFY2(
          d <= 1e-5,
          qPrintable(QStringLiteral("token %1: relative difference %2").arg(t).arg(d, 0, 'g', 3)));
    }
  }

  // A slot refilled on the copy queue after the compute queue is done with its old expert:
  // the product enqueued before the refill sees the old expert, the one after the new.
  void refillWaitsForReadersAndArrivesBeforeUse() {
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    const auto m = model::LoadedModel::load(fixture("qwen3-moe"), load);
    const model::ModelSpec& spec = m->spec();
    const auto& experts = m->weights().layers[0].experts.experts;
    const std::int64_t h = spec.hidden_size, k = spec.experts_per_token, n = 64;
    const auto x = test::normal_values(n * h, 71);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(n * k), 2);
    std::vector<float> weights(ids.size(), 0.5f);
    const auto expected = [&](int id) {
      std::vector<const backend::DeviceExpert*> table(static_cast<std::size_t>(spec.num_experts));
      auto e = cpu_qwen_->place_expert(experts[static_cast<std::size_t>(id)], Queue::Compute);
      table[2] = e.get();
      auto dx = put(*cpu_qwen_, x), dids = put(*cpu_qwen_, ids), dw = put(*cpu_qwen_, weights);
      auto out = cpu_qwen_->allocate(n * h * 4);
      cpu_qwen_->zero(out->as<float>(), n * h);
      cpu_qwen_->grouped_experts(dx->as<const float>(), n, dids->as<const std::int32_t>(),
                                 dw->as<const float>(), k, table, out->as<float>());
      return get<float>(*cpu_qwen_, *out, n * h);
    };
    const std::vector<float> old_expert = expected(2), new_expert = expected(4);
    for (const Candidate& c : candidates()) {
      auto b = c.make(spec);
      auto slot = b->place_expert(experts[2], Queue::Compute);
      std::vector<const backend::DeviceExpert*> table(static_cast<std::size_t>(spec.num_experts));
      table[2] = slot.get();
      auto dx = put(*b, x), dids = put(*b, ids), dw = put(*b, weights);
      auto before = b->allocate(n * h * 4), after = b->allocate(n * h * 4);
      b->zero(before->as<float>(), n * h);
      b->zero(after->as<float>(), n * h);
      b->grouped_experts(dx->as<const float>(), n, dids->as<const std::int32_t>(),
                         dw->as<const float>(), k, table, before->as<float>());
      b->wait(Queue::Copy, b->record(Queue::Compute));
      b->refill_expert(*slot, experts[4], Queue::Copy);
      const backend::EventPtr arrived = b->record(Queue::Copy);
      b->wait(Queue::Compute, arrived);
      b->grouped_experts(dx->as<const float>(), n, dids->as<const std::int32_t>(),
                         dw->as<const float>(), k, table, after->as<float>());
      QVERIFY2(relative_difference(get<float>(*b, *before, n * h), old_expert) <= c.tolerance,
               c.name.c_str());
      QVERIFY2(relative_difference(get<float>(*b, *after, n * h), new_expert) <= c.tolerance,
               c.name.c_str());
      QVERIFY(arrived->ready());
    }
  }

  void emulatedMemoryBudget() {
    backend::EmulatedOptions o;
    o.memory_bytes = 1 << 20;
    backend::EmulatedBackend b(o, qwen_->spec());
    auto first = b.allocate(600 << 10);
    QCOMPARE(b.memory_used(), std::uint64_t{600 << 10});
    try {
      auto second = b.allocate(600 << 10);
      QFAIL("an allocation beyond the budget succeeded");
    } catch (const backend::DeviceOutOfMemory& e) {
      QCOMPARE(e.requested_bytes(), std::uint64_t{600 << 10});
      QCOMPARE(e.free_bytes(), std::uint64_t{(1 << 20) - (600 << 10)});
      QVERIFY2(std::string(e.what()).find("out of memory") != std::string::npos, e.what());
    }
    QCOMPARE(b.memory_used(), std::uint64_t{600 << 10});  // the failed one took nothing
    first.reset();
    QCOMPARE(b.memory_used(), std::uint64_t{0});
    auto third = b.allocate(1 << 20);  // the whole budget is free again
    QVERIFY_THROWS_EXCEPTION(backend::DeviceOutOfMemory,
                             b.place_matrix(qwen_->weights().output, Queue::Compute));
  }

  // The modelled bus charges latency + bytes / rate: a transfer never arrives sooner, and the
  // time is counted as bus time on the queue that carried it.
  void emulatedBusChargesTransfers() {
    backend::EmulatedOptions o;
    o.bus_bytes_per_s = 1e9;
    o.bus_latency_s = 2e-3;
    backend::EmulatedBackend b(o, qwen_->spec());
    const std::vector<char> data(4 << 20, 'x');
    auto buffer = b.allocate(data.size());
    const auto start = std::chrono::steady_clock::now();
    b.upload(Queue::Copy, buffer->as<void>(), data.data(), data.size());
    b.record(Queue::Copy)->wait();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    QVERIFY2(seconds >= 2e-3 + 4.19e-3, qPrintable(QString::number(seconds)));
    b.upload(Queue::Compute, buffer->as<void>(), data.data(), 1024);
    b.synchronize();
    const backend::DeviceTimes t = b.times();
    QCOMPARE(t.bus_bytes, std::uint64_t{(4 << 20) + 1024});
    QVERIFY(t.copy_ns >= 6'190'000);
    QVERIFY(t.part_ns(backend::Part::Bus) >= 2'000'000);
  }

  // A GPU's budget, its transfers in pieces through the page-locked ring (larger than one
  // piece, so several), and its time split.
  void cudaMemoryTransfersAndTimes() {
#if TANDEM_HAVE_CUDA
    std::string why;
    const kernels::cuda::DeviceInfo* gpu = usable_gpu(why);
    if (gpu == nullptr)
      QSKIP(qPrintable("needs a usable NVIDIA GPU: " + QString::fromStdString(why)));
    backend::CudaOptions small;
    small.device = gpu->index;
    small.memory_bytes = 1 << 20;
    {
      backend::CudaBackend b(small, qwen_->spec());
      QCOMPARE(b.memory_budget(), std::uint64_t{1 << 20});
      auto first = b.allocate(600 << 10);
      QCOMPARE(b.memory_used(), std::uint64_t{600 << 10});
      QVERIFY_THROWS_EXCEPTION(backend::DeviceOutOfMemory, b.allocate(600 << 10));
      QCOMPARE(b.memory_used(), std::uint64_t{600 << 10});
      first.reset();
      QCOMPARE(b.memory_used(), std::uint64_t{0});
      QVERIFY(backend::host_address(b, b.allocate(64)->as<float>()) == nullptr);
    }
    backend::CudaOptions o;
    o.device = gpu->index;
    o.memory_bytes = 256ull << 20;
    backend::CudaBackend b(o, qwen_->spec());
    const std::vector<float> data = test::normal_values((20u << 20) / 4, 91);
    auto buffer = put(b, data);
    QCOMPARE(get<float>(b, *buffer, data.size()), data);
    std::vector<float> back(data.size());
    b.download(Queue::Copy, back.data(), buffer->as<const void>(), back.size() * 4);
    b.record(Queue::Copy)->wait();
    QCOMPARE(back, data);
    auto w = b.place_matrix(qwen_->weights().output, Queue::Copy);
    QVERIFY(w->bytes() > 0);
    b.synchronize();
    b.set_part(backend::Part::Attention);
    b.zero(buffer->as<float>(), static_cast<std::int64_t>(data.size()));
    b.set_part(backend::Part::Dense);
    b.synchronize();
    const backend::DeviceTimes t = b.times();
    QVERIFY(t.bus_bytes >= 3 * data.size() * 4);
    QVERIFY(t.copy_ns > 0);
#else
    QSKIP(
        "needs a build with the CUDA kernels (nvcc was not found when this build was "
        "configured)");
#endif
  }

  // The host sees an accelerator's memory only through transfers.
  void emulatedMemoryIsNotTheHosts() {
    backend::EmulatedBackend b(backend::EmulatedOptions{}, qwen_->spec());
    auto buffer = b.allocate(64);
    QVERIFY(backend::host_address(b, buffer->as<float>()) == nullptr);
    QVERIFY(backend::host_address(*cpu_qwen_, buffer->as<float>()) != nullptr);
  }
};

QTEST_GUILESS_MAIN(TestBackendOps)
#include "tst_backend_ops.moc"
