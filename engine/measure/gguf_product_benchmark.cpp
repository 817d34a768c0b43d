#include "engine/measure/gguf_product_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

#include "engine/backend/cpu/thread_pool.h"
#include "engine/model/gguf/file.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/isa.h"

namespace tandem::measure {
namespace {

struct Format {
  kernels::DType dtype;
  std::vector<kernels::WeightMatrix> matrices;  // in file order; experts one by one
  std::string first;                            // the first matrix's name
};

// The SIMD variants of the GGUF kernels this CPU runs (AMX multiplies GGUF blocks with the
// AVX-512 kernels); the scalar reference only where it has neither. A variant forced by
// `--cpu-variant` (TANDEM_CPU_VARIANT) is timed alone.
std::vector<kernels::CpuVariant> variants_to_time() {
  if (const std::optional<kernels::CpuVariant> v = kernels::forced_variant())
    return {*v == kernels::CpuVariant::Amx ? kernels::CpuVariant::Avx512 : *v};
  const kernels::IsaFeatures& usable = kernels::detect_isa().usable;
  std::vector<kernels::CpuVariant> out;
  for (kernels::CpuVariant v : {kernels::CpuVariant::Avx2, kernels::CpuVariant::Avx512})
    if (kernels::variant_supported(v, usable)) out.push_back(v);
  if (out.empty()) out.push_back(kernels::CpuVariant::Scalar);
  return out;
}

}  // namespace

GgufProductReport run_gguf_product_benchmark(
    const GgufProductBenchOptions& options,
    const std::function<void(const std::string&)>& progress) {
  const model::GgufFile file(options.path);
  GgufProductReport report;
  report.cpu = kernels::detect_isa().identity.brand;
  report.file = options.path;
  report.threads = options.threads;
  // The matrices (two or three dimensions: an expert tensor is one matrix per expert) by
  // format, formats in the order the file first uses them.
  std::vector<Format> formats;
  std::map<std::uint32_t, std::size_t> format_of;
  for (const model::GgufTensorInfo& t : file.tensors()) {
    if (t.dims.size() < 2 || t.dims.size() > 3) continue;
    kernels::DType dtype;
    const bool known = kernels::dtype_from_ggml_type(t.ggml_type, dtype);
    if (!known || !kernels::gguf_matmul_supports(dtype)) {
      const std::string name = known ? std::string(kernels::dtype_name(dtype))
                                     : fmt::format("ggml type {}", t.ggml_type);
      if (std::find(report.other_formats.begin(), report.other_formats.end(), name) ==
          report.other_formats.end())
        report.other_formats.push_back(name);
      continue;
    }
    const auto cols = static_cast<std::int64_t>(t.dims[0]);
    const auto rows = static_cast<std::int64_t>(t.dims[1]);
    const std::int64_t count = t.dims.size() == 3 ? static_cast<std::int64_t>(t.dims[2]) : 1;
    const std::span<const std::byte> data = file.tensor_data(t);
    const std::uint64_t matrix_bytes = kernels::dtype_bytes(dtype, rows * cols);
    if (data.size() < matrix_bytes * static_cast<std::uint64_t>(count)) continue;
    auto [it, added] = format_of.emplace(t.ggml_type, formats.size());
    if (added) formats.push_back({dtype, {}, count == 1 ? t.name : t.name + " (expert 0)"});
    Format& f = formats[it->second];
    for (std::int64_t e = 0; e < count; ++e) {
      kernels::WeightMatrix w;
      w.dtype = dtype;
      w.data = data.data() + matrix_bytes * static_cast<std::uint64_t>(e);
      w.rows = rows;
      w.cols = cols;
      f.matrices.push_back(w);
    }
  }
  if (formats.empty()) {
    std::string others;
    for (const std::string& name : report.other_formats)
      others += (others.empty() ? "" : ", ") + name;
    throw std::runtime_error(
        fmt::format("{} has no matrix in a GGUF block format (Q4_K, Q8_0, IQ2_XS, ...) to time{}.",
                    options.path, others.empty() ? "" : "; its matrices are " + others));
  }
  backend::ThreadPool pool(options.threads);
  const kernels::ParallelFor parallel = pool.as_parallel_for();
  const std::vector<kernels::CpuVariant> variants = variants_to_time();
  std::int64_t widest = 0;
  for (const Format& f : formats)
    for (const kernels::WeightMatrix& w : f.matrices) widest = std::max({widest, w.cols, w.rows});
  const std::int64_t most_tokens = *std::max_element(options.tokens.begin(), options.tokens.end());
  const std::vector<float> x =
      random_values(static_cast<std::size_t>(most_tokens * widest), options.seed);
  std::vector<float> y(static_cast<std::size_t>(most_tokens * widest));
  for (const Format& f : formats) {
    // The pass: the matrices in file order up to the working set (at least one).
    std::size_t n = 0;
    std::uint64_t bytes = 0, weights = 0;
    while (n < f.matrices.size() && (n == 0 || bytes < options.working_set_bytes)) {
      const std::int64_t count = f.matrices[n].rows * f.matrices[n].cols;
      bytes += kernels::dtype_bytes(f.dtype, count);
      weights += static_cast<std::uint64_t>(count);
      ++n;
    }
    for (std::int64_t tokens : options.tokens) {
      for (kernels::CpuVariant variant : variants) {
        GgufProductRow row;
        row.format = std::string(kernels::dtype_name(f.dtype));
        row.first = f.first;
        row.matrices = static_cast<std::int64_t>(n);
        row.matrices_in_file = static_cast<std::int64_t>(f.matrices.size());
        row.pass_bytes = bytes;
        row.pass_weights = weights;
        row.tokens = tokens;
        row.variant = std::string(kernels::variant_name(variant));
        const auto pass = [&] {
          for (std::size_t i = 0; i < n; ++i) {
            const kernels::WeightMatrix& w = f.matrices[i];
            kernels::gguf_matmul_xwt(x.data(), tokens, w, y.data(), w.rows, parallel, variant);
          }
        };
        pass();  // warm: the pages mapped, the activations' buffers sized
        for (int r = 0; r < options.repetitions; ++r) {
          const double seconds = seconds_per_product(pass, options.min_sample_seconds);
          row.weight_gb_per_s.values.push_back(static_cast<double>(bytes) / seconds / 1e9);
          row.gflops.values.push_back(2.0 * static_cast<double>(tokens) *
                                      static_cast<double>(weights) / seconds / 1e9);
        }
        if (progress) {
          progress(fmt::format("{}, {} token{}, {}: {:.2f} GB/s of weights, {:.1f} GFLOP/s",
                               row.format, tokens, tokens == 1 ? "" : "s", row.variant,
                               row.weight_gb_per_s.mean(), row.gflops.mean()));
        }
        report.rows.push_back(std::move(row));
      }
    }
  }
  return report;
}

}  // namespace tandem::measure
