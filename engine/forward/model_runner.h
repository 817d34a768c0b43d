// The forward pass of every supported family (Llama, Qwen3, Qwen3-MoE, Mixtral with
// grouped-query attention; DeepSeek-V3/Kimi-K2 with latent attention), written once against
// the backend interface. Without an accelerator it runs on the CPU backend and every routed
// expert on the CPU's threads. With one, attention, dense layers, shared experts, embeddings,
// the output head and the KV cache live on the accelerator with the routed experts the
// scheduler placed there; per MoE layer the CPU computes the others while the accelerator
// computes its own, and the two partial outputs are summed (engine/schedule says how:
// deferral, layerwise prefill, the dynamic update).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/expert_compute.h"
#include "engine/forward/device_weights.h"
#include "engine/measure/metrics.h"
#include "engine/model/loaded_model.h"
#include "engine/schedule/dynamic_placement.h"
#include "engine/schedule/expert_residency.h"
#include "engine/schedule/hybrid_options.h"

namespace tandem::forward {

// The keys and values of one conversation's tokens, on the backend the forward pass runs on.
class ContextCache {
 public:
  std::int64_t capacity() const { return device_->capacity(); }
  std::int64_t size() const { return size_; }
  std::uint64_t bytes() const { return device_->bytes(); }
  // Forgets every position from `tokens` on (a new turn that diverges, an edited message).
  // A model with recurrent layers cannot keep an arbitrary prefix: ModelRunner::rewind says
  // what it kept, and truncate(0) (start over) is always right.
  void truncate(std::int64_t tokens) {
    size_ = std::clamp<std::int64_t>(tokens, 0, size_);
    if (size_ < checkpoint_) checkpoint_ = -1;  // the saved state is of tokens now gone
  }

 private:
  friend class ModelRunner;
  explicit ContextCache(std::unique_ptr<backend::DeviceKvCache> device)
      : device_(std::move(device)) {}
  std::unique_ptr<backend::DeviceKvCache> device_;
  std::int64_t size_ = 0;
  std::int64_t checkpoint_ = -1;  // where the saved recurrent state stands; -1: none
};

struct ForwardOptions {
  // Logits of every token ([n x vocab]) instead of the last one's.
  bool all_logits = false;
  // The prompt these tokens are part of, in tokens (for the layerwise prefill threshold);
  // 0: just these.
  std::int64_t prompt_tokens = 0;
  // Checked between layers where the CPU runs the whole pass (with an accelerator a pass
  // always runs to its end): once set, the pass stops at the next layer, the cache keeps its
  // size and recurrent layers their state, `logits` keep what they held, and forward
  // returns false. A model with recurrent layers saves their state at each such pass's
  // start, as checkpoint() does, to put it back.
  const std::atomic<bool>* cancel = nullptr;
};

class ModelRunner {
 public:
  // Everything on the CPU.
  ModelRunner(const model::LoadedModel& model, backend::NumaPools& cpu);
  // With an accelerator (null: the CPU alone). Throws std::invalid_argument with a sentence
  // for options that do not fit the model, and backend::DeviceOutOfMemory (with a sentence
  // saying what to change) when the accelerator cannot hold what must be on it.
  ModelRunner(const model::LoadedModel& model, backend::NumaPools& cpu,
              std::unique_ptr<backend::Backend> accelerator, const schedule::HybridOptions& hybrid);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // A cache for `capacity` positions on the backend the forward pass runs on.
  std::unique_ptr<ContextCache> make_cache(std::int64_t capacity);
  // How caches made from now on keep keys and values where attention runs on the CPU (F32
  // until set); an accelerator keeps its own as it does. Throws std::invalid_argument, with
  // what to use instead, for a format the model's heads do not fit.
  void set_cpu_kv_cache_format(backend::KvCacheFormat format);

  // Runs `tokens` at positions cache.size() onwards and appends them to the cache; writes
  // the logits of the last token to `logits` ([vocab]), or of every token. Throws
  // std::length_error when the cache has no room and std::out_of_range for a token id
  // outside the vocabulary. Returns false when options.cancel stopped the pass.
  bool forward(std::span<const std::int32_t> tokens, ContextCache& cache,
               std::vector<float>& logits, const ForwardOptions& options = {});
  // The tokens a prompt is fed in per forward pass: HybridOptions::chunk_tokens as asked,
  // else schedule::prefill_chunk_tokens's default for where the pass runs.
  std::int64_t prefill_chunk_tokens() const { return hybrid_.chunk_tokens; }

  // Keeps the first `tokens` positions of `cache` where it can and returns how many it kept.
  // Attention keeps any prefix; the recurrent state of gated DeltaNet layers (Qwen3-Next)
  // only the position of its checkpoint, if at most `tokens`, or nothing, and then the
  // caller recomputes from what is kept.
  std::int64_t rewind(ContextCache& cache, std::int64_t tokens);
  // Remembers the state at the cache's present size as the position rewind can return to
  // (nothing to do for a model without recurrent layers).
  void checkpoint(ContextCache& cache);

  const model::ModelSpec& spec() const { return spec_; }
  const model::LoadedModel& model() const { return model_; }
  // Routing hits, residency and the time split; safe to read from any thread.
  const std::shared_ptr<measure::Metrics>& metrics() const { return metrics_; }
  bool has_accelerator() const { return accelerator_ != nullptr; }
  // Where the forward pass runs: the accelerator, or the CPU backend.
  const backend::Backend& device() const { return *device_; }
  const schedule::HybridOptions& hybrid() const { return hybrid_; }
  // The experts on the accelerator now (every layer empty without one).
  schedule::ExpertPlacement placement() const;
  // Experts per MoE layer placed at load (as --num-gpu-experts counts them).
  std::int64_t gpu_experts_per_layer() const { return gpu_experts_per_layer_; }
  // Whether prompts at the threshold run layerwise (false when the staging did not fit).
  bool layerwise_prefill() const { return !staging_[0].empty(); }

 private:
  struct Workspace;
  struct PendingDeferral;

  static std::uint64_t now_ns();
  void check_tokens(std::span<const std::int32_t> tokens, const ContextCache& cache) const;
  void ensure_workspace(std::int64_t n, std::int64_t logit_rows);
  void attention_block(std::int64_t layer, std::int64_t n, std::int64_t pos0, ContextCache& cache);
  void linear_attention_block(std::int64_t layer, std::int64_t n, std::int64_t pos0,
                              ContextCache& cache);
  void feed_forward(const DeviceFeedForward& f, backend::DevicePtr<const float> x, std::int64_t n,
                    backend::DevicePtr<float> out);
  // The MoE layer; engine/forward/moe_layer.cpp.
  void moe_layer(std::int64_t layer, std::int64_t moe_index, std::int64_t n, bool layerwise,
                 bool last_layer);
  void finish_deferred(std::int64_t n);
  bool compute_deferred(std::int64_t n);
  void cpu_experts(std::int64_t layer, const float* x, std::span<const backend::ExpertPair> pairs,
                   float* out);
  void start_staging(std::int64_t moe_index);
  void record_metrics(std::int64_t n, std::uint64_t wall_ns);

  const model::LoadedModel& model_;
  const model::ModelSpec& spec_;
  backend::NumaPools& cpu_pools_;
  std::unique_ptr<backend::CpuBackend> cpu_backend_;
  std::unique_ptr<backend::Backend> accelerator_;
  backend::Backend* device_ = nullptr;
  schedule::HybridOptions hybrid_;
  DeviceWeights weights_;
  std::unique_ptr<schedule::ExpertResidency> residency_;
  std::unique_ptr<schedule::DynamicPlacement> dynamic_;
  std::int64_t gpu_experts_per_layer_ = 0;
  std::vector<std::int64_t> moe_layers_;  // the MoE layers, in order
  // Layerwise prefill: two sets of staging slots, each able to hold the experts a layer has
  // off the device, filled on the copy queue for every other MoE layer.
  std::vector<std::unique_ptr<backend::DeviceExpert>> staging_[2];
  std::vector<const backend::DeviceExpert*> staged_table_[2];
  backend::EventPtr staged_[2], staging_free_[2];
  backend::ExpertCompute cpu_expert_compute_;
  backend::CpuThreads cpu_threads_;
  std::unique_ptr<Workspace> work_;
  std::unique_ptr<PendingDeferral> deferred_;
  std::shared_ptr<measure::Metrics> metrics_;
  std::vector<std::uint64_t> step_hits_;
  backend::DeviceTimes last_times_;
  std::uint64_t cpu_expert_ns_ = 0, waiting_ns_ = 0;
  std::uint64_t moves_reported_ = 0;
};

}  // namespace tandem::forward
