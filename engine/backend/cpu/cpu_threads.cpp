#include "engine/backend/cpu/cpu_threads.h"

#include <algorithm>

#include "engine/backend/cpu/numa_pools.h"

namespace tandem::backend {

CpuThreads::CpuThreads(NumaPools& pools)
    : pools_(&pools), count_(pools.threads()), kernels_for_(pools.as_parallel_for()) {}

CpuThreads::CpuThreads(ThreadPool& pool)
    : pool_(&pool), count_(pool.threads()), kernels_for_(pool.as_parallel_for()) {}

void CpuThreads::parallel_for(std::int64_t n, std::int64_t chunk, const Body& body) const {
  if (pools_ != nullptr)
    pools_->parallel_for(n, chunk, body);
  else
    pool_->parallel_for(n, chunk, body);
}

void CpuThreads::for_each_slice(int slices, std::int64_t n, const SliceBody& body) const {
  if (slices == 1) {
    parallel_for(n, 1, [&](std::int64_t b, std::int64_t e) { body(0, b, e); });
  } else if (pools_ != nullptr && pools_->pools() == slices) {
    pools_->parallel_for_each_pool(n, 1, body);
  } else {
    parallel_for(slices * n, 1, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) body(static_cast<int>(i / n), i % n, i % n + 1);
    });
  }
}

}  // namespace tandem::backend
