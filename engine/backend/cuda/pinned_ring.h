// Page-locked host memory through which the CUDA backend moves everything between host and
// GPU, so that transfers are truly asynchronous: from pageable memory the CUDA runtime copies
// into a staging buffer of its own and blocks the calling thread until the stream is idle,
// which would stop the CPU's experts from overlapping the GPU's work. Regions are handed out
// round the ring; a region is reused only after the event recorded after its last transfer.
// Where page-locked memory cannot be had (a limit, a container), the ring is absent and the
// backend copies through pageable memory, saying so once in the log.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::backend {

class PinnedRing {
 public:
  // Tries to lock `bytes`; ok() says whether it could, failure() why not.
  explicit PinnedRing(std::size_t bytes);
  ~PinnedRing();
  PinnedRing(const PinnedRing&) = delete;
  PinnedRing& operator=(const PinnedRing&) = delete;

  bool ok() const { return base_ != nullptr; }
  const std::string& failure() const { return failure_; }
  std::size_t capacity() const { return capacity_; }

  // A region of `bytes` (at most capacity()), waiting for earlier users of that memory.
  // The caller fills or reads it around transfers on `stream`, then calls release().
  void* acquire(std::size_t bytes);
  // Marks the region last acquired as in use until everything enqueued on `stream` so far
  // has run.
  void release(cudaStream_t stream);

 private:
  struct Region {
    std::size_t offset, bytes;
    cudaEvent_t done;
  };
  void retire_overlapping(std::size_t offset, std::size_t bytes);
  cudaEvent_t take_event();

  std::mutex mutex_;  // held from acquire() to release()
  char* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t head_ = 0;
  std::size_t pending_offset_ = 0, pending_bytes_ = 0;
  std::deque<Region> in_use_;
  std::vector<cudaEvent_t> spare_events_;
  std::string failure_;
};

}  // namespace tandem::backend
