// Routed experts on CPU threads: a list of (token, expert, weight) pairs, bucketed per expert,
// each expert's tokens multiplied at once. The host's CPU experts run through it on the
// model's NumaPools, and so does the grouped product of the experts resident on the CPU-run
// backends (the CPU's own, the emulated accelerator's).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/cpu/cpu_threads.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::backend {

struct ExpertPair {
  std::int32_t token = 0;
  std::int32_t expert = 0;
  float weight = 0.0f;
};

class ExpertCompute {
 public:
  explicit ExpertCompute(const model::ModelSpec& spec) : spec_(spec) {}

  // out[t] += weight * FFN_expert(x[t]) for every pair, x and out [tokens x hidden].
  // experts[e] holds expert e's weights (null where no pair names it); all have one shape and
  // format. Each token's sum runs over its experts in id order.
  void run(const CpuThreads& threads, const std::vector<const model::FeedForwardWeights*>& experts,
           const float* x, std::span<const ExpertPair> pairs, float* out);

 private:
  struct Active {
    std::int64_t expert, begin, rows;
  };
  void packed(const CpuThreads& threads,
              const std::vector<const model::FeedForwardWeights*>& experts,
              const model::FeedForwardWeights& shape_of, const float* x, float* out);
  void gguf(const CpuThreads& threads, const std::vector<const model::FeedForwardWeights*>& experts,
            const float* x, float* out);
  void unpacked(const CpuThreads& threads,
                const std::vector<const model::FeedForwardWeights*>& experts, const float* x,
                float* out);

  const model::ModelSpec& spec_;
  // The pairs bucketed per expert, kept between calls to avoid reallocation.
  std::vector<Active> active_;
  std::vector<std::int64_t> count_, slot_token_;
  std::vector<float> slot_weight_;
  // A prompt's slots by token, in slot order: token t's are token_slots_[token_slot_begin_[t],
  // token_slot_begin_[t + 1]).
  std::vector<std::int64_t> token_slot_begin_, token_slots_;
  // Scratch of the packed path; with several slices, each buffer holds one block per slice.
  std::vector<kernels::PackedActivations> inputs_, hidden_;
  // Every token of the call, packed once: quantised, and in BF16 for the experts whose
  // products are widened (kernels::widened_product: AMX, enough tokens).
  kernels::PackedActivations all_tokens_, all_tokens_wide_;
  // Per slice and active expert, its gate/up tasks not yet done (the GGUF path: per expert).
  std::unique_ptr<std::atomic<std::int64_t>[]> tasks_left_;
  std::size_t tasks_left_size_ = 0;
  std::vector<float> gate_, up_, out_;
  // Scratch of the GGUF path, one per active expert.
  // in and in_up: the expert's tokens for gate and up (where up's code bias differs); hidden:
  // its GLU output for down.
  struct GgufScratch {
    kernels::GgufQuantizedActivations in, in_up, hidden;
    std::vector<float> gate, up, result;
  };
  std::vector<GgufScratch> gguf_;
};

}  // namespace tandem::backend
