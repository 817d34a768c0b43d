// A dense matrix product through oneDNN's matmul primitive (the 2.6 API), as the other
// path beside our packed kernels: the weights are reordered once into the blocked layout
// oneDNN prefers, and every product runs one primitive per slice of output rows.
//
// Values: built from a PackedMatrix, it multiplies with the packed BF16 weights exactly; INT8
// weights it rounds again to one scale per row, and takes activations from pack_activations
// with one scale per token (kWholeRow): oneDNN 2.6 has no scales per group along the inner
// dimension, so this path is less accurate than the packed kernels' groups of kInt8WeightGroup.
// Its INT8 results equal the product of those rounded weights and activations up to the
// order of the additions (the same integer sums), its BF16 results the packed kernels' up to
// summation order.
//
// Threads: Debian's libdnnl2 is built with the OpenMP runtime (libgomp). Left alone, each
// primitive would start a team of omp_get_max_threads() threads beside our ThreadPool, whose
// workers spin between loops: on 2 cores that is oversubscription. So the weights are cut
// into slices of output rows, each with its own primitives; ParallelFor hands slices to our
// threads, and each of those limits OpenMP to itself (omp_set_num_threads(1), before the
// primitive is created: oneDNN fixes its thread count at creation). No OpenMP thread is
// ever started. A primitive is created per token count (M) and kept (about 0.1 ms each,
// the first one ~8 ms for JIT): with M as DNNL_RUNTIME_DIM_VAL, 2.6 falls back to its
// reference implementation.
//
// Decision, measured with `tandem bench --kernels -r 5` (quiet machine: AMD EPYC Zen 5, 2
// cores, AVX-512 VNNI and BF16, no AMX; our avx512 variant against oneDNN's
// brg:avx512_core_vnni / brg:avx512_core_bf16; weights rotated over 256 MiB so they come from
// memory). oneDNN's GFLOP/s over ours, 2 threads / 1 thread:
//
//   INT8          M=1        M=8        M=64       M=512
//   q 4096x2048   0.97/1.01  1.12/1.15  1.32/1.37  1.33/1.36   (M=512: 1503 vs 1134 GFLOP/s)
//   k/v 512x2048  0.88/0.91  1.09/1.11  1.18/1.25  1.19/1.26
//   o 2048x4096   0.89/0.96  0.95/0.91  1.23/1.27  1.28/1.34
//   head 151936   0.84/0.68  0.86/0.82  1.22/1.26  1.36/1.41
//   BF16: 0.72 to 1.05 for every matrix and M; ours wins or ties.
//
// These numbers are with one activation scale per token on both sides. Since our kernels
// quantise activations per 32 columns (kInt8ActivationGroup), which oneDNN 2.6 cannot, the
// default keeps every product on our kernels; `--dense onednn` (model::DenseBackend) still
// hands the prompts' dense INT8 products (attention, dense FFNs, shared experts, output
// head) to oneDNN, from model::kOnednnMinTokens tokens on, while decode and BF16 keep ours.
// The routed experts always stay on our batched path (INT8 experts measured 1.0 to 1.3x
// from 64 tokens; INT4 has no oneDNN 2.6 counterpart).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::kernels {

// Version and threading runtime of the oneDNN library loaded, e.g. "oneDNN 2.6.3 (OpenMP)".
std::string onednn_description();

// Slices for a matrix of `rows` outputs: enough for any thread count to balance, each of
// at least 256 rows, enough for oneDNN's kernels to run at full speed.
std::int64_t onednn_slices_for(std::int64_t rows);

// C = alpha op(A) op(B) + beta C in fp32, row-major (op: transposed where asked; A is M x K
// after op, B K x N, C M x N, each `ld` floats between rows), through oneDNN's sgemm on the
// calling thread only: for products small enough to be one thread's share of a loop (Qwen3-
// Next's delta rule, a chunk of tokens per head).
void gemm_f32(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
              float beta, float* c, std::int64_t ldc);

// Why oneDNN cannot take products in `format` (INT8 or BF16) on this CPU, as a sentence, or
// empty where it can. Checked once per process on a small product whose result is known
// exactly: without VNNI (AVX512_VNNI or AVX-VNNI) oneDNN 2.6 adds pairs of INT8 byte products
// in 16 bits, which overflow with 8-bit weights (it leaves weights of 7 bits to the caller),
// so its INT8 results there are wrong, not merely rounded; and without AVX-512 it has no BF16
// product at all.
std::string onednn_refusal(PackedFormat format);

class OnednnMatmul {
 public:
  // `weights` must be INT8 or BF16; `slices` (>= 1) parts of output rows, run in parallel.
  // Throws std::runtime_error with onednn_refusal's sentence where oneDNN cannot take them.
  OnednnMatmul(const PackedMatrix& weights, std::int64_t slices);
  // Packs `weights` (its packed form when it has one in `format`) as INT8 or BF16 first.
  OnednnMatmul(const WeightMatrix& weights, PackedFormat format, std::int64_t slices);
  ~OnednnMatmul();
  OnednnMatmul(const OnednnMatmul&) = delete;
  OnednnMatmul& operator=(const OnednnMatmul&) = delete;

  PackedFormat format() const { return format_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  std::int64_t slices() const { return static_cast<std::int64_t>(slices_.size()); }
  // Bytes of the reordered weights (with oneDNN's INT8 compensation) and the scales.
  std::uint64_t weight_bytes() const;
  // The implementation oneDNN chose for `tokens` rows of activations, e.g. "brg:avx512_core_vnni".
  std::string implementation(std::int64_t tokens) const;

  // y[t * y_stride + r] = sum_k x[t, k] * W[r, k]. Thread-safe: the primitives per token
  // count are created on first use and kept, under a lock per slice.
  void run(const float* x, std::int64_t tokens, float* y, std::int64_t y_stride,
           const ParallelFor& parallel) const;
  // The same with activations already packed for this matrix's format.
  void run(const PackedActivations& x, float* y, std::int64_t y_stride,
           const ParallelFor& parallel) const;

 private:
  struct Primitive;
  struct Slice;
  PackedFormat format_;
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
  std::int64_t cols_padded_ = 0;
  std::vector<std::unique_ptr<Slice>> slices_;

  // For onednn_refusal's check (uncached), which builds one without asking itself.
  explicit OnednnMatmul(PackedFormat format);
  friend std::string onednn_refusal(PackedFormat format);
  static std::string check(PackedFormat format);

  void init(const PackedMatrix& weights, std::int64_t slices);
  void init_unchecked(const PackedMatrix& weights, std::int64_t slices);
  std::shared_ptr<const Primitive> primitive(Slice& slice, std::int64_t tokens) const;
};

}  // namespace tandem::kernels
