#include "engine/measure/kernel_benchmark.h"

#include "engine/measure/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "engine/backend/cpu/thread_pool.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed/matmul.h"
#include "kernels/cpu/packed/widen_crossover.h"

namespace tandem::measure {
namespace {

kernels::PackedMatrix copy_of(const kernels::PackedMatrix& m) {
  kernels::PackedMatrix c = kernels::packed_shape(m.rows, m.cols, m.format, m.group);
  c.rotation = m.rotation;
  c.bytes = kernels::AlignedBytes::allocate(m.bytes.size);
  std::memcpy(c.bytes.data.get(), m.bytes.data.get(), m.bytes.size);
  c.group_scale = m.group_scale;
  return c;
}

// `source`'s values packed in `format`; MXFP4, which is read rather than made, from random
// codes with a scale per row and 32 columns instead.
kernels::PackedMatrix packed_in(KernelFormat kernel_format, const kernels::WeightMatrix& source,
                                std::uint64_t seed) {
  switch (kernel_format.format) {
    case kernels::PackedFormat::Int8:
      return kernel_format.rotated ? kernels::pack_int8_rotated(source)
                                   : kernels::pack_int8(source);
    case kernels::PackedFormat::Int4:
      return kernels::pack_int4(source, kernels::kDefaultInt4Group);
    case kernels::PackedFormat::Bf16:
      return kernels::pack_bf16(source);
    case kernels::PackedFormat::Mxfp4:
      break;
  }
  // Two codes a byte, from uniform values in [-1, 1).
  const std::vector<float> values =
      random_values(static_cast<std::size_t>(source.rows * source.cols / 2), seed);
  std::vector<std::uint8_t> codes(values.size());
  for (std::size_t i = 0; i < codes.size(); ++i)
    codes[i] = static_cast<std::uint8_t>((values[i] + 1.0f) * 128.0f);
  const std::int64_t scale_cols = (source.cols + kernels::kMxfp4Group - 1) / kernels::kMxfp4Group;
  const std::vector<float> scales(static_cast<std::size_t>(source.rows * scale_cols), 1.0f / 64);
  kernels::WeightMatrix m;
  m.dtype = kernels::DType::F4E2M1;
  m.data = codes.data();
  m.rows = source.rows;
  m.cols = source.cols;
  m.block_scale = scales.data();
  m.block_rows = 1;
  m.block_cols = kernels::kMxfp4Group;
  return kernels::pack_mxfp4(m);
}

// Where oneDNN takes `format`'s products on this CPU (kernels::onednn_refusal says why not).
bool onednn_multiplies(kernels::PackedFormat format) {
  return (format == kernels::PackedFormat::Int8 || format == kernels::PackedFormat::Bf16) &&
         kernels::onednn_refusal(format).empty();
}

void add_sample(KernelPathResult& r, double seconds, const KernelShape& s, std::int64_t tokens) {
  const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(s.rows * s.cols);
  r.gflops.values.push_back(flops / seconds / 1e9);
  r.weight_gb_per_s.values.push_back(static_cast<double>(r.weight_bytes) / seconds / 1e9);
}

// The tile kernel and the AVX-512 kernel on the row's copies, activations packed once
// beforehand, interleaved as the row's other paths.
void measure_tiles_beside_avx512(KernelBenchRow& row, const KernelBenchOptions& options,
                                 const std::vector<kernels::PackedMatrix>& copies,
                                 const std::vector<float>& x, std::vector<float>& y,
                                 const kernels::ParallelFor& parallel) {
  const kernels::PackedMatrix& first = copies.front();
  // The tiles take INT8 and INT4 widened (BF16 activations), as the engine does from
  // kernels::amx_widen_tokens on; the AVX-512 kernel takes them quantised.
  kernels::PackedActivations activations, tile_activations;
  kernels::pack_activations_for(first, x.data(), row.tokens, activations);
  if (first.format == kernels::PackedFormat::Bf16 || first.rotation > 0)  // rotated: integer tiles
    tile_activations = activations;
  else
    kernels::pack_widened_activations(first, x.data(), row.tokens, tile_activations);
  row.tiles = KernelPathResult{"tiles from 1 token", row.packed.weight_bytes, {}, {}};
  row.avx512 = KernelPathResult{"avx512", row.packed.weight_bytes, {}, {}};
  std::size_t next_tiles = 0;
  std::size_t next_avx512 = 0;
  const auto run = [&](const TileKernel& kernel, std::size_t& next,
                       const kernels::PackedActivations& a) {
    const kernels::PackedMatrix& w = copies[next++ % copies.size()];
    parallel(w.blocks, [&](std::int64_t b0, std::int64_t b1) {
      kernel(w, a, y.data(), row.shape.rows, b0, b1);
    });
  };
  const TileKernel avx512 = [](const kernels::PackedMatrix& w, const kernels::PackedActivations& a,
                               float* out, std::int64_t stride, std::int64_t b0, std::int64_t b1) {
    kernels::packed_matmul_avx512(w, a, out, stride, b0, b1);
  };
  const auto tiles = [&] { run(options.tile_kernel, next_tiles, tile_activations); };
  const auto vectors = [&] { run(avx512, next_avx512, activations); };
  for (std::size_t c = 0; c < copies.size(); ++c) {
    tiles();
    vectors();
  }
  for (int r = 0; r < options.repetitions; ++r) {
    add_sample(*row.tiles, seconds_per_product(tiles, options.min_sample_seconds), row.shape,
               row.tokens);
    add_sample(*row.avx512, seconds_per_product(vectors, options.min_sample_seconds), row.shape,
               row.tokens);
  }
}

}  // namespace

TileKernel amx_from_one_token() {
  if (kernels::active_variant() != kernels::CpuVariant::Amx) return {};
  return [](const kernels::PackedMatrix& w, const kernels::PackedActivations& x, float* y,
            std::int64_t y_stride, std::int64_t block_begin, std::int64_t block_end) {
    kernels::packed_matmul_amx(w, x, y, y_stride, block_begin, block_end, 1);
  };
}

std::vector<TileCrossover> tile_crossovers(const KernelBenchReport& report) {
  // The rows with both kernels, per shape, format and thread count.
  std::vector<TileCrossover> out;
  std::vector<std::vector<const KernelBenchRow*>> rows_of;
  for (const KernelBenchRow& row : report.rows) {
    if (!row.tiles || !row.avx512) continue;
    const auto it = std::find_if(out.begin(), out.end(), [&](const TileCrossover& c) {
      return c.shape == row.shape.name && c.format == row.format && c.threads == row.threads;
    });
    if (it == out.end()) {
      out.push_back({row.shape.name, row.format, row.threads, std::nullopt, 0});
      rows_of.push_back({&row});
    } else {
      rows_of[static_cast<std::size_t>(it - out.begin())].push_back(&row);
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<kernels::CrossoverPoint> points;
    for (const KernelBenchRow* row : rows_of[i]) {
      out[i].tokens_measured_max = std::max(out[i].tokens_measured_max, row->tokens);
      points.push_back({row->tokens, row->tiles->gflops.mean() > row->avx512->gflops.mean()});
    }
    out[i].tiles_from = kernels::tiles_from(std::move(points));
  }
  return out;
}

std::vector<KernelShape> qwen3_30b_a3b_shapes(std::int64_t head_rows) {
  return {{"q", 4096, 2048},         {"k/v", 512, 2048},       {"o", 2048, 4096},
          {"head", head_rows, 2048}, {"expert up", 768, 2048}, {"expert down", 2048, 768}};
}

double RateSamples::mean() const {
  return sample_mean(values);
}

double RateSamples::stddev() const {
  return sample_stddev(values);
}

double instruction_peak_gflops(std::vector<InstructionPeak>& peaks,
                               kernels::ProductInstruction instruction, int threads) {
  const std::string name(kernels::product_instruction_name(instruction));
  for (const InstructionPeak& p : peaks)
    if (p.instruction == name && p.threads == threads) return p.gflops;
  backend::ThreadPool pool(threads);
  const double gflops =
      2.0 * kernels::measure_peak_multiply_adds(instruction, pool.as_parallel_for()) / 1e9;
  peaks.push_back({name, threads, gflops});
  return gflops;
}

double KernelBenchRow::packed_peak_fraction() const {
  return packed_peak_gflops > 0 ? packed.gflops.mean() / packed_peak_gflops : 0;
}

double KernelBenchRow::speedup() const {
  const double ours = packed.gflops.mean();
  return ours > 0 && onednn ? onednn->gflops.mean() / ours : 0;
}

std::string KernelFormat::name() const {
  return rotated ? "int8-rotated" : std::string(kernels::packed_format_name(format));
}

std::string KernelBenchRow::winner() const {
  if (!onednn) return "";
  const double a = packed.gflops.mean();
  const double b = onednn->gflops.mean();
  const double spread = packed.gflops.stddev() + onednn->gflops.stddev();
  if (std::abs(a - b) <= std::max(0.05 * std::max(a, b), spread)) return "tie";
  return b > a ? "onednn" : "packed";
}

KernelBenchReport run_kernel_benchmark(const KernelBenchOptions& options,
                                       const std::function<void(const std::string&)>& progress) {
  KernelBenchReport report;
  report.cpu = kernels::detect_isa().identity.brand;
  report.onednn = kernels::onednn_description();
  // A format oneDNN cannot take here gets no oneDNN column, and the report says why.
  for (kernels::PackedFormat f : {kernels::PackedFormat::Int8, kernels::PackedFormat::Bf16}) {
    const bool asked = std::any_of(options.formats.begin(), options.formats.end(),
                                   [&](const KernelFormat& k) { return k.format == f; });
    if (!asked) continue;
    if (const std::string refusal = kernels::onednn_refusal(f); !refusal.empty())
      report.onednn_refusals.push_back(refusal);
  }
  const kernels::CpuVariant variant = kernels::active_variant();
  report.variant = std::string(kernels::variant_name(variant));
  std::int64_t max_tokens = 1;
  for (std::int64_t t : options.tokens) max_tokens = std::max(max_tokens, t);
  // The product instructions' peaks first, once per thread count, on an idle machine: no
  // pool of the products below exists yet.
  for (int threads : options.threads) {
    for (const KernelFormat& format : options.formats) {
      for (std::int64_t tokens : options.tokens) {
        if (const auto instruction = kernels::packed_product_instruction(
                format.format, variant, kernels::detect_isa().usable, tokens, format.rotated))
          instruction_peak_gflops(report.peaks, *instruction, threads);
      }
    }
  }

  for (const KernelShape& shape : options.shapes) {
    const std::vector<float> source_values =
        random_values(static_cast<std::size_t>(shape.rows * shape.cols), options.seed);
    kernels::WeightMatrix source;
    source.data = source_values.data();
    source.rows = shape.rows;
    source.cols = shape.cols;
    const std::vector<float> x =
        random_values(static_cast<std::size_t>(max_tokens * shape.cols), options.seed + 1);
    std::vector<float> y(static_cast<std::size_t>(max_tokens * shape.rows));

    for (const KernelFormat& kernel_format : options.formats) {
      const kernels::PackedFormat format = kernel_format.format;
      const kernels::PackedMatrix packed = packed_in(kernel_format, source, options.seed);
      const std::uint64_t bytes = kernels::packed_matrix_bytes(packed);
      const std::size_t copies = static_cast<std::size_t>(
          std::max<std::uint64_t>(1, (options.working_set_bytes + bytes - 1) / bytes));
      std::vector<kernels::PackedMatrix> packed_copies;
      std::vector<kernels::WeightMatrix> ours_copies;
      for (std::size_t c = 0; c < copies; ++c) packed_copies.push_back(copy_of(packed));
      for (const kernels::PackedMatrix& p : packed_copies) {
        kernels::WeightMatrix w = source;
        w.packed = &p;
        w.packed_variant = kernels::packed_variant_for(format, variant);  // as LoadedModel does
        ours_copies.push_back(w);
      }

      // Sliced as the engine slices them, each slice one single-threaded primitive.
      std::vector<std::unique_ptr<kernels::OnednnMatmul>> onednn;
      for (std::size_t c = 0; c < copies && onednn_multiplies(format); ++c) {
        onednn.push_back(std::make_unique<kernels::OnednnMatmul>(
            packed, kernels::onednn_slices_for(shape.rows)));
      }
      for (int threads : options.threads) {
        backend::ThreadPool pool(threads);
        const kernels::ParallelFor parallel = pool.as_parallel_for();
        for (std::int64_t tokens : options.tokens) {
          const std::optional<kernels::ProductInstruction> instruction =
              kernels::packed_product_instruction(format, ours_copies[0].packed_variant,
                                                  kernels::detect_isa().usable, tokens,
                                                  packed.rotation > 0);
          const double peak = instruction.has_value()
                                  ? instruction_peak_gflops(report.peaks, *instruction, threads)
                                  : 0.0;
          KernelBenchRow row;
          row.shape = shape;
          row.format = kernel_format.name();
          row.threads = threads;
          row.tokens = tokens;
          row.packed.implementation =
              "packed " + std::string(kernels::variant_name(ours_copies[0].packed_variant));
          row.packed.weight_bytes = bytes;
          if (instruction.has_value()) {
            row.packed_instruction = std::string(kernels::product_instruction_name(*instruction));
            row.packed_peak_gflops = peak;
          }
          if (!onednn.empty()) {
            row.onednn = KernelPathResult{
                onednn[0]->implementation(tokens), onednn[0]->weight_bytes(), {}, {}};
          }
          std::size_t next_ours = 0;
          std::size_t next_theirs = 0;
          const auto ours = [&] {
            kernels::matmul_xwt(x.data(), tokens, ours_copies[next_ours++ % copies], y.data(),
                                shape.rows, parallel);
          };
          const auto theirs = [&] {
            onednn[next_theirs++ % copies]->run(x.data(), tokens, y.data(), shape.rows, parallel);
          };
          // First use of every copy: pages, primitives.
          for (std::size_t c = 0; c < copies; ++c) {
            ours();
            if (row.onednn) theirs();
          }
          // Interleaved, so that a change in the machine's load hits both alike.
          for (int r = 0; r < options.repetitions; ++r) {
            add_sample(row.packed, seconds_per_product(ours, options.min_sample_seconds), shape,
                       tokens);
            if (row.onednn) {
              add_sample(*row.onednn, seconds_per_product(theirs, options.min_sample_seconds),
                         shape, tokens);
            }
          }
          // MXFP4 never goes into tiles.
          if (options.tile_kernel && format != kernels::PackedFormat::Mxfp4) {
            measure_tiles_beside_avx512(row, options, packed_copies, x, y, parallel);
          }
          if (progress) {
            std::string line =
                fmt::format("{} {}x{} {} threads {} tokens {}: packed {:.1f} ± {:.1f}", shape.name,
                            shape.rows, shape.cols, row.format, threads, tokens,
                            row.packed.gflops.mean(), row.packed.gflops.stddev());
            if (row.onednn) {
              line += fmt::format(", oneDNN {:.1f} ± {:.1f}", row.onednn->gflops.mean(),
                                  row.onednn->gflops.stddev());
            }
            line += " GFLOP/s";
            if (row.tiles) {
              line += fmt::format("; kernels alone: tiles {:.1f}, AVX-512 {:.1f}",
                                  row.tiles->gflops.mean(), row.avx512->gflops.mean());
            }
            progress(line);
          }
          report.rows.push_back(std::move(row));
        }
      }
    }
  }
  return report;
}

}  // namespace tandem::measure
