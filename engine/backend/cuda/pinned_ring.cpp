#include "engine/backend/cuda/pinned_ring.h"

#include <cuda_runtime.h>

#include "kernels/cuda/ops.h"

namespace tandem::backend {

PinnedRing::PinnedRing(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    failure_ = cudaGetErrorString(e);
    cudaGetLastError();
    return;
  }
  base_ = static_cast<char*>(p);
  capacity_ = bytes;
}

PinnedRing::~PinnedRing() {
  for (Region& r : in_use_) {
    cudaEventSynchronize(r.done);
    cudaEventDestroy(r.done);
  }
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  if (base_ != nullptr) cudaFreeHost(base_);
}

cudaEvent_t PinnedRing::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  kernels::cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                       "creating an event for a transfer");
  return e;
}

void PinnedRing::retire_overlapping(std::size_t offset, std::size_t bytes) {
  for (auto it = in_use_.begin(); it != in_use_.end();) {
    const bool overlaps = it->offset < offset + bytes && offset < it->offset + it->bytes;
    const bool finished = !overlaps && cudaEventQuery(it->done) == cudaSuccess;
    if (overlaps) {
      kernels::cuda::check(cudaEventSynchronize(it->done), "waiting for an earlier transfer");
    }
    if (overlaps || finished) {
      spare_events_.push_back(it->done);
      it = in_use_.erase(it);
    } else {
      ++it;
    }
  }
  cudaGetLastError();  // a query of an unfinished event leaves cudaErrorNotReady behind
}

void* PinnedRing::acquire(std::size_t bytes) {
  mutex_.lock();
  bytes = (bytes + 255) / 256 * 256;
  if (head_ + bytes > capacity_) head_ = 0;
  try {
    retire_overlapping(head_, bytes);
  } catch (...) {
    mutex_.unlock();
    throw;
  }
  pending_offset_ = head_;
  pending_bytes_ = bytes;
  head_ += bytes;
  return base_ + pending_offset_;
}

void PinnedRing::release(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  try {
    e = take_event();
    kernels::cuda::check(cudaEventRecord(e, stream), "marking the end of a transfer");
  } catch (...) {
    if (e != nullptr) spare_events_.push_back(e);
    mutex_.unlock();
    throw;
  }
  in_use_.push_back({pending_offset_, pending_bytes_, e});
  mutex_.unlock();
}

}  // namespace tandem::backend
