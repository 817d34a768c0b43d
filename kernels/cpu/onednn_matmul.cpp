#include "kernels/cpu/onednn_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tandem::kernels {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A CPU stream keeps no queue of its own; one per thread avoids sharing it anyway.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

// oneDNN runs on the calling thread only (see the header): set once per thread, before any
// primitive is created on it.
void keep_onednn_on_this_thread() {
  thread_local const bool limited = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)limited;
}

DataType data_type_of(PackedFormat f) {
  return f == PackedFormat::Int8 ? DataType::s8 : DataType::bf16;
}

// A bound on the primitives kept per slice: the engine's token counts are 1 (decode) and a
// few prompt chunk sizes; anything beyond is recreated (0.1 ms) rather than kept forever.
constexpr std::size_t kMaxPrimitivesPerSlice = 32;

dnnl::primitive_attr attributes(PackedFormat format, const std::vector<float>& row_scales) {
  dnnl::primitive_attr attr;
  // Per output column (mask bit 1 of [M x N]); the per-token scales come after the product.
  if (format == PackedFormat::Int8) attr.set_output_scales(1 << 1, row_scales);
  return attr;
}

// Tokens per product when the output goes through a buffer: bounds the buffer (the output
// head has 151936 rows) while keeping products large enough to run at full speed.
constexpr std::int64_t kScratchTokens = 128;

}  // namespace

std::string onednn_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP          ? "OpenMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB        ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ        ? "sequential"
                        : v->cpu_runtime == DNNL_RUNTIME_THREADPOOL ? "threadpool"
                                                                    : "other";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + runtime + ")";
}

std::int64_t onednn_slices_for(std::int64_t rows) {
  constexpr std::int64_t kRowsPerSlice = 256;
  return std::max<std::int64_t>(1, rows / kRowsPerSlice);
}

struct OnednnMatmul::Primitive {
  dnnl::matmul matmul;
  std::string implementation;
};

struct OnednnMatmul::Slice {
  std::int64_t row_begin = 0;
  std::int64_t rows = 0;
  memory::desc weights_desc;
  memory weights;
  std::vector<float> scales;  // INT8: the packed row scales of this slice
  // oneDNN fixes the shapes at creation. Shared, so that a product in flight keeps its
  // primitive while another thread replaces the set.
  std::mutex lock;
  std::map<std::int64_t, std::shared_ptr<const Primitive>> by_tokens;
};

OnednnMatmul::OnednnMatmul(const PackedMatrix& weights, std::int64_t slices)
    : format_(weights.format) {
  init(weights, slices);
}

OnednnMatmul::OnednnMatmul(const WeightMatrix& weights, PackedFormat format, std::int64_t slices)
    : format_(format) {
  if (weights.packed != nullptr && weights.packed->format == format) {
    init(*weights.packed, slices);
  } else if (format == PackedFormat::Int8) {
    init(pack_int8(weights), slices);
  } else if (format == PackedFormat::Bf16) {
    init(pack_bf16(weights), slices);
  } else {
    throw std::invalid_argument("oneDNN matmul takes INT8 or BF16 weights");
  }
}

OnednnMatmul::OnednnMatmul(PackedFormat format) : format_(format) {}

OnednnMatmul::~OnednnMatmul() = default;

// onednn_refusal's check: 16 rows of 64 columns by one token and by 32 (oneDNN may choose
// another kernel for each), every weight and activation +-1 with equal signs, so every
// product is 1 and each output exactly 64. In INT8 each is 127 * 127 as integers: oneDNN's
// unsigned activations (x + 128) make pairs of 2 * 255 * 127, past 16 bits, wherever it adds
// pairs in 16 bits. In BF16 every value is exact.
std::string OnednnMatmul::check(PackedFormat format) {
  constexpr std::int64_t kRows = 16, kCols = 64, kTokens = 32;
  std::vector<float> w(static_cast<std::size_t>(kRows * kCols));
  std::vector<float> x(static_cast<std::size_t>(kTokens * kCols));
  for (std::int64_t c = 0; c < kCols; ++c) {
    const float sign = c % 3 == 0 ? -1.0f : 1.0f;
    for (std::int64_t r = 0; r < kRows; ++r) w[static_cast<std::size_t>(r * kCols + c)] = sign;
    for (std::int64_t t = 0; t < kTokens; ++t) x[static_cast<std::size_t>(t * kCols + c)] = sign;
  }
  WeightMatrix source;
  source.data = w.data();
  source.rows = kRows;
  source.cols = kCols;
  const PackedMatrix packed = format == PackedFormat::Int8 ? pack_int8(source) : pack_bf16(source);
  std::vector<float> y(static_cast<std::size_t>((1 + kTokens) * kRows));
  try {
    OnednnMatmul m(format);
    m.init_unchecked(packed, 1);
    m.run(x.data(), 1, y.data(), kRows, serial_for);
    m.run(x.data(), kTokens, y.data() + kRows, kRows, serial_for);
  } catch (const dnnl::error& e) {
    return std::string(onednn_description()) + " has no " +
           (format == PackedFormat::Int8 ? "INT8" : "BF16") + " matrix product for this CPU (" +
           e.what() + ")" +
           (format == PackedFormat::Bf16 ? ": its BF16 products need AVX-512." : ".");
  }
  for (float v : y) {
    if (std::abs(v - static_cast<float>(kCols)) > 1e-3f * kCols) {
      return format == PackedFormat::Int8
                 ? onednn_description() +
                       " multiplies INT8 wrongly on this CPU: without VNNI (AVX512_VNNI or "
                       "AVX-VNNI) it adds pairs of byte products in 16 bits, which overflow with "
                       "8-bit weights (a product of ones gave " +
                       std::to_string(v) + ", not 64)."
                 : onednn_description() + " multiplies BF16 wrongly on this CPU (a product " +
                       "of ones gave " + std::to_string(v) + ", not 64).";
    }
  }
  return {};
}

std::string onednn_refusal(PackedFormat format) {
  if (format != PackedFormat::Int8 && format != PackedFormat::Bf16)
    return "oneDNN 2.6 has no product of " + std::string(packed_format_name(format)) + " weights.";
  // Each checked on its first question only (a oneDNN primitive made and run, a few ms).
  if (format == PackedFormat::Int8) {
    static const std::string int8 = OnednnMatmul::check(PackedFormat::Int8);
    return int8;
  }
  static const std::string bf16 = OnednnMatmul::check(PackedFormat::Bf16);
  return bf16;
}

void OnednnMatmul::init(const PackedMatrix& w, std::int64_t slices) {
  if (w.format != PackedFormat::Int8 && w.format != PackedFormat::Bf16)
    throw std::invalid_argument("oneDNN matmul takes INT8 or BF16 weights");
  if (const std::string refusal = onednn_refusal(w.format); !refusal.empty())
    throw std::runtime_error(refusal);
  init_unchecked(w, slices);
}

void OnednnMatmul::init_unchecked(const PackedMatrix& w, std::int64_t slices) {
  if (w.format != PackedFormat::Int8 && w.format != PackedFormat::Bf16)
    throw std::invalid_argument("oneDNN matmul takes INT8 or BF16 weights");
  if (slices < 1) throw std::invalid_argument("oneDNN matmul needs at least one slice");
  format_ = w.format;
  rows_ = w.rows;
  cols_ = w.cols;
  cols_padded_ = w.cols_padded;
  keep_onednn_on_this_thread();
  const DataType type = data_type_of(format_);
  // oneDNN multiplies over the padded columns (zero in weights and activations): its fast
  // kernels take only dense activations, and ours are padded.
  const std::int64_t k = cols_padded_;
  const std::int64_t count = std::min(slices, std::max<std::int64_t>(1, rows_));
  for (std::int64_t s = 0; s < count; ++s) {
    auto slice = std::make_unique<Slice>();
    slice->row_begin = rows_ * s / count;
    slice->rows = rows_ * (s + 1) / count - slice->row_begin;
    const std::int64_t n = slice->rows;
    // The slice's weights as oneDNN's plain [K x N] with N outermost: our rows as they are.
    memory plain(memory::desc({k, n}, type, Tag::ba), cpu_engine());
    if (format_ == PackedFormat::Int8) {
      // oneDNN 2.6 takes one weight scale per output row, ours one per row and 32 columns: each
      // row's packed weights are rounded again on the step of its largest.
      auto* out = static_cast<std::int8_t*>(plain.get_data_handle());
      std::fill_n(out, n * k, std::int8_t{0});
      slice->scales.resize(static_cast<std::size_t>(n));
      std::vector<float> row(static_cast<std::size_t>(cols_));
      for (std::int64_t i = 0; i < n; ++i) {
        unpack_row(w, slice->row_begin + i, row.data());
        float max_abs = 0.0f;
        for (float v : row) max_abs = std::max(max_abs, std::abs(v));
        const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
        for (std::int64_t c = 0; c < cols_; ++c) {
          out[i * k + c] = static_cast<std::int8_t>(std::clamp(
              std::nearbyint(row[static_cast<std::size_t>(c)] / scale), -127.0f, 127.0f));
        }
        slice->scales[static_cast<std::size_t>(i)] = scale;
      }
    } else {
      auto* out = static_cast<std::uint16_t*>(plain.get_data_handle());
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = slice->row_begin + i;
        const auto* block = reinterpret_cast<const std::uint16_t*>(w.block(r / kPackRows));
        const std::int64_t lane = r % kPackRows;
        for (std::int64_t c = 0; c < k; ++c)
          out[i * k + c] = block[(c / 2) * 32 + lane * 2 + c % 2];
      }
    }
    // The layout oneDNN wants for one token. It wants the same for every token count (checked
    // by the tests, which fail on a fallback to its reference code), so primitives for other
    // counts are created with this layout fixed.
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc({1, k}, type, Tag::ab),
                           memory::desc({k, n}, type, Tag::any),
                           memory::desc({1, n}, DataType::f32, Tag::ab)),
        attributes(format_, slice->scales), cpu_engine());
    slice->weights_desc = pd.weights_desc();
    slice->weights = memory(slice->weights_desc, cpu_engine());
    dnnl::reorder(plain, slice->weights).execute(thread_stream(), plain, slice->weights);
    thread_stream().wait();
    slices_.push_back(std::move(slice));
  }
}

// Created on first use by the thread that runs the slice, with OpenMP already limited to it.
std::shared_ptr<const OnednnMatmul::Primitive> OnednnMatmul::primitive(Slice& slice,
                                                                       std::int64_t tokens) const {
  const std::lock_guard guard(slice.lock);
  auto it = slice.by_tokens.find(tokens);
  if (it != slice.by_tokens.end()) return it->second;
  if (slice.by_tokens.size() >= kMaxPrimitivesPerSlice) slice.by_tokens.clear();
  keep_onednn_on_this_thread();
  const DataType type = data_type_of(format_);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(memory::desc({tokens, cols_padded_}, type, Tag::ab), slice.weights_desc,
                         memory::desc({tokens, slice.rows}, DataType::f32, Tag::ab)),
      attributes(format_, slice.scales), cpu_engine());
  auto made = std::make_shared<const Primitive>(Primitive{dnnl::matmul(pd), pd.impl_info_str()});
  slice.by_tokens.emplace(tokens, made);
  return made;
}

std::string OnednnMatmul::implementation(std::int64_t tokens) const {
  return primitive(*slices_.front(), std::min(tokens, kScratchTokens))->implementation;
}

void OnednnMatmul::run(const float* x, std::int64_t tokens, float* y, std::int64_t y_stride,
                       const ParallelFor& parallel) const {
  // One buffer per calling thread, as matmul_xwt keeps for the packed kernels.
  thread_local PackedActivations activations;
  pack_activations(x, tokens, cols_, format_, activations, kWholeRow, parallel);
  run(activations, y, y_stride, parallel);
}

void OnednnMatmul::run(const PackedActivations& x, float* y, std::int64_t y_stride,
                       const ParallelFor& parallel) const {
  if (x.format != format_ || x.cols_padded != cols_padded_ ||
      (format_ == PackedFormat::Int8 && x.groups() != 1) ||
      (format_ == PackedFormat::Bf16 && x.bf16_stride != cols_padded_))
    throw std::invalid_argument(
        "activations packed for another format or width, INT8 not with one scale per token, or "
        "BF16 rows padded (as for a widened product)");
  if (x.tokens == 0) return;
  const DataType type = data_type_of(format_);
  const char* src_data = format_ == PackedFormat::Int8
                             ? reinterpret_cast<const char*>(x.q.data())
                             : reinterpret_cast<const char*>(x.bf16.data());
  const std::int64_t src_row_bytes = cols_padded_ * (format_ == PackedFormat::Int8 ? 1 : 2);
  // oneDNN's fast kernels write dense rows only: straight into y when the one slice's rows
  // are y's rows, else into a buffer a few tokens at a time and copied from there.
  const bool direct = slices_.size() == 1 && y_stride == rows_;
  parallel(slices(), [&](std::int64_t s0, std::int64_t s1) {
    keep_onednn_on_this_thread();
    dnnl::stream& stream = thread_stream();
    thread_local std::vector<float> scratch;
    for (std::int64_t s = s0; s < s1; ++s) {
      Slice& slice = *slices_[static_cast<std::size_t>(s)];
      const std::int64_t step = direct ? x.tokens : kScratchTokens;
      for (std::int64_t t0 = 0; t0 < x.tokens; t0 += step) {
        const std::int64_t tokens = std::min(step, x.tokens - t0);
        const std::shared_ptr<const Primitive> p = primitive(slice, tokens);
        const memory src({{tokens, cols_padded_}, type, Tag::ab}, cpu_engine(),
                         const_cast<char*>(src_data + t0 * src_row_bytes));
        float* out = y + t0 * y_stride + slice.row_begin;
        if (!direct) {
          scratch.resize(static_cast<std::size_t>(tokens * slice.rows));
          out = scratch.data();
        }
        const memory dst({{tokens, slice.rows}, DataType::f32, Tag::ab}, cpu_engine(), out);
        p->matmul.execute(
            stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, slice.weights}, {DNNL_ARG_DST, dst}});
        stream.wait();
        // INT8: the token's scale after the row's, in the order of the packed kernels.
        for (std::int64_t t = 0; t < tokens; ++t) {
          const float scale =
              format_ == PackedFormat::Int8 ? x.scale[static_cast<std::size_t>(t0 + t)] : 1.0f;
          const float* from = out + t * slice.rows;
          float* to = y + (t0 + t) * y_stride + slice.row_begin;
          if (direct && scale == 1.0f) continue;
          for (std::int64_t i = 0; i < slice.rows; ++i) to[i] = from[i] * scale;
        }
      }
    }
  });
}

std::uint64_t OnednnMatmul::weight_bytes() const {
  std::uint64_t total = 0;
  for (const auto& s : slices_) total += s->weights_desc.get_size() + s->scales.size() * 4;
  return total;
}

void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
              float beta, float* c, std::int64_t ldc) {
  keep_onednn_on_this_thread();
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha,
                                          a, lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success)
    throw std::runtime_error("oneDNN's sgemm refused a " + std::to_string(m) + "x" +
                             std::to_string(n) + "x" + std::to_string(k) + " product.");
}

}  // namespace tandem::kernels
