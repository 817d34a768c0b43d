// The two products every weight goes through on the GPU, as device functions that the plain
// product (matmul.cu) and the grouped expert product (experts.cu) share:
// - gemv_warp_row: one weight row for up to a few tokens per warp, fp32 activations times
//   BF16 (or fp32) weights, summed in fp32: decode, where reading the weights is the cost;
// - gemm_tile: a 64 x 64 tile of tokens x weight rows through the tensor cores (WMMA, BF16
//   in, fp32 sums), activations rounded to BF16 as they are staged: prompts.
// Both read their activation rows through an optional index (a gathered expert bucket) and
// write through one.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"

namespace tandem::kernels::cuda {

// One product: y[c_row(i) * y_stride + r] = sum_k x[a_row(i) * x_stride + k] * w[r * cols + k]
// for rows i < m. a_row(i) = a_rows ? a_rows[i] / a_div : i; c_row(i) = c_rows ? c_rows[i] : i.
struct GemmProblem {
  const float* x = nullptr;
  std::int64_t x_stride = 0;
  const std::int32_t* a_rows = nullptr;
  std::int32_t a_div = 1;
  std::int64_t m = 0;
  const void* w = nullptr;
  WeightType type = WeightType::Bf16;
  std::int64_t rows = 0, cols = 0;
  float* y = nullptr;
  std::int64_t y_stride = 0;
  const std::int32_t* c_rows = nullptr;
};

__device__ __forceinline__ std::int64_t a_row(const GemmProblem& p, std::int64_t i) {
  return p.a_rows != nullptr ? p.a_rows[i] / p.a_div : i;
}
__device__ __forceinline__ std::int64_t c_row(const GemmProblem& p, std::int64_t i) {
  return p.c_rows != nullptr ? p.c_rows[i] : i;
}

inline constexpr int kGemvWarps = 8;  // rows per block of the few-token product
inline constexpr int kGemvTokens = 8;

// Eight consecutive weights as fp32 (one 16-byte load for BF16, two for fp32).
__device__ __forceinline__ void load8(const void* w, WeightType type, std::int64_t i,
                                      float (&out)[8]) {
  if (type == WeightType::Bf16) {
    const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(w) + i);
    const std::uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      out[2 * j] = __uint_as_float(words[j] << 16);
      out[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
  } else {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
}

// Row r of the product for every token, by one warp.
__device__ inline void gemv_warp_row(const GemmProblem& p, std::int64_t r) {
  const int lane = threadIdx.x % 32;
  const std::int64_t base = r * p.cols;
  // Eight values per lane per step where rows and activations allow 16-byte loads.
  const bool vectors = p.cols % 8 == 0 && p.x_stride % 4 == 0 &&
                       (reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0) &&
                       (reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0);
  for (std::int64_t t0 = 0; t0 < p.m; t0 += kGemvTokens) {
    const int tokens = static_cast<int>(p.m - t0 < kGemvTokens ? p.m - t0 : kGemvTokens);
    const float* xr[kGemvTokens];
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t)
      xr[t] = p.x + a_row(p, t0 + (t < tokens ? t : 0)) * p.x_stride;
    float acc[kGemvTokens] = {};
    if (vectors) {
      // Unrolled so that several 16-byte weight loads are in flight per lane: a decoded
      // token's products are bound by how many bytes are on their way.
#pragma unroll 4
      for (std::int64_t c = static_cast<std::int64_t>(lane) * 8; c < p.cols; c += 32 * 8) {
        float wv[8];
        load8(p.w, p.type, base + c, wv);
#pragma unroll
        for (int t = 0; t < kGemvTokens; ++t) {
          if (t < tokens) {
            const float4 a = *reinterpret_cast<const float4*>(xr[t] + c);
            const float4 b = *reinterpret_cast<const float4*>(xr[t] + c + 4);
            acc[t] += wv[0] * a.x + wv[1] * a.y + wv[2] * a.z + wv[3] * a.w + wv[4] * b.x +
                      wv[5] * b.y + wv[6] * b.z + wv[7] * b.w;
          }
        }
      }
    } else {
      for (std::int64_t c = lane; c < p.cols; c += 32) {
        const float wv = load_weight(p.w, p.type, base + c);
#pragma unroll
        for (int t = 0; t < kGemvTokens; ++t)
          if (t < tokens) acc[t] += wv * xr[t][c];
      }
    }
#pragma unroll
    for (int t = 0; t < kGemvTokens; ++t) {
      if (t < tokens) {
        const float v = warp_sum(acc[t]);
        if (lane == 0) p.y[c_row(p, t0 + t) * p.y_stride + r] = v;
      }
    }
  }
}

inline constexpr int kTileM = 64, kTileN = 64, kTileK = 32;
inline constexpr int kGemmThreads = 128;

// The tile of tokens [m0, m0 + 64) x weight rows [n0, n0 + 64), by 4 warps of 32 x 32 each.
__device__ inline void gemm_tile(const GemmProblem& p, std::int64_t m0, std::int64_t n0) {
  using namespace nvcuda;
  constexpr int kPadK = kTileK + 8;  // a multiple of 8 halves, and off the banks' period
  constexpr int kPadN = kTileN + 4;
  __shared__ __align__(32) __nv_bfloat16 a_tile[kTileM][kPadK];
  __shared__ __align__(32) __nv_bfloat16 b_tile[kTileN][kPadK];
  __shared__ __align__(32) float c_tile[kTileM][kPadN];
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int wm = warp / 2, wn = warp % 2;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  // Each thread stages 16 consecutive values of one row of each tile.
  const int stage_row = tid / 2;
  const int stage_col = (tid % 2) * 16;
  const std::int64_t gi = m0 + stage_row;
  const bool a_valid = gi < p.m;
  const float* a_src = p.x + (a_valid ? a_row(p, gi) : 0) * p.x_stride;
  const std::int64_t gj = n0 + stage_row;
  const bool b_valid = gj < p.rows;
  const std::int64_t b_base = (b_valid ? gj : 0) * p.cols;

  for (std::int64_t k0 = 0; k0 < p.cols; k0 += kTileK) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const std::int64_t c = k0 + stage_col + j;
      const bool in = c < p.cols;
      a_tile[stage_row][stage_col + j] = __float2bfloat16_rn(a_valid && in ? a_src[c] : 0.0f);
      const float wv = b_valid && in ? load_weight(p.w, p.type, b_base + c) : 0.0f;
      b_tile[stage_row][stage_col + j] = __float2bfloat16_rn(wv);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b[2];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(a[i], &a_tile[wm * 32 + i * 16][kk], kPadK);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(b[j], &b_tile[wn * 32 + j * 16][kk], kPadK);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(&c_tile[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], kPadN,
                              wmma::mem_row_major);
  __syncthreads();
  for (int idx = tid; idx < kTileM * kTileN; idx += kGemmThreads) {
    const int r = idx / kTileN, c = idx % kTileN;
    const std::int64_t i = m0 + r, j = n0 + c;
    if (i < p.m && j < p.rows) p.y[c_row(p, i) * p.y_stride + j] = c_tile[r][c];
  }
}

}  // namespace tandem::kernels::cuda
