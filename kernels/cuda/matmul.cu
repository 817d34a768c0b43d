// Dense products: the few-token product for decode, tensor-core tiles for prompts. Weights kept
// in fp32 (routers, and small checkpoints' matrices) are multiplied in fp32 at every token count:
// rounding a router's inputs to BF16 moves near-tied experts' scores enough to change which
// experts a token gets, and the tiles would round the weights as well.
#include "kernels/cuda/gemm_tiles.cuh"
#include "kernels/cuda/ops.h"

namespace tandem::kernels::cuda {
namespace {

__global__ void gemv_kernel(GemmProblem p) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  if (r < p.rows) gemv_warp_row(p, r);
}

__global__ void __launch_bounds__(kGemmThreads) gemm_kernel(GemmProblem p) {
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kTileM;
  const std::int64_t n0 = static_cast<std::int64_t>(blockIdx.x) * kTileN;
  gemm_tile(p, m0, n0);
}

}  // namespace

void matmul(const float* x, std::int64_t n, const DeviceWeights& w, float* y, std::int64_t y_stride,
            cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return;
  GemmProblem p;
  p.x = x;
  p.x_stride = w.cols;
  p.m = n;
  p.w = w.data;
  p.type = w.type;
  p.rows = w.rows;
  p.cols = w.cols;
  p.y = y;
  p.y_stride = y_stride;
  if (n <= kGemvMaxTokens || w.type == WeightType::F32) {
    const auto blocks = static_cast<unsigned>((w.rows + kGemvWarps - 1) / kGemvWarps);
    gemv_kernel<<<blocks, kGemvWarps * 32, 0, stream>>>(p);
  } else {
    const dim3 grid(static_cast<unsigned>((w.rows + kTileN - 1) / kTileN),
                    static_cast<unsigned>((n + kTileM - 1) / kTileM));
    gemm_kernel<<<grid, kGemmThreads, 0, stream>>>(p);
  }
  check(cudaGetLastError(), "multiplying by a weight matrix");
}

}  // namespace tandem::kernels::cuda
