// Prefill and decode over one KV cache, reusing the longest common prefix between calls
// so a new turn only processes its new tokens.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend/cpu/numa_pools.h"
#include "engine/forward/model_runner.h"
#include "engine/generate/sampler.h"
#include "engine/model/loaded_model.h"

namespace tandem::generate {

enum class StopReason { EndOfSequence, MaxTokens, ContextFull, Cancelled, Caller };

struct GenerationOptions {
  std::int64_t max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;
  // Tokens per forward pass during prefill; 0: the runner's (ModelRunner::prefill_chunk_tokens).
  std::int64_t prefill_chunk = 0;
  // Checked between tokens, and between layers where the pass lets it (ForwardOptions::cancel).
  const std::atomic<bool>* cancel = nullptr;
};

struct GenerationStats {
  std::int64_t cached_tokens = 0;  // reused from the previous call
  std::int64_t prompt_tokens = 0;  // prefilled now: fewer than asked when a stop cut it short
  double prompt_seconds = 0.0;
  // A stop came during the prompt: what was computed of it stays cached, but its time
  // includes work thrown away, so it gives no rate.
  bool prompt_cut_short = false;
  std::int64_t generated_tokens = 0;
  double decode_seconds = 0.0;
  StopReason stop = StopReason::MaxTokens;

  double prompt_tokens_per_s() const {
    return prompt_seconds > 0 && !prompt_cut_short ? prompt_tokens / prompt_seconds : 0.0;
  }
  double decode_tokens_per_s() const {
    // The first generated token comes from the prefill's logits; decode time covers the rest.
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds
                                                      : 0.0;
  }
};

class Generator {
 public:
  // On a CPU-only forward pass of its own.
  Generator(const model::LoadedModel& model, backend::NumaPools& pool, std::int64_t context_tokens);
  // On `runner` (the CPU alone, or hybrid), which must outlive the generator.
  Generator(forward::ModelRunner& runner, std::int64_t context_tokens);

  // Generates after `prompt` (the whole context, e.g. the rendered conversation). Calls
  // `on_token` for each new token; returning false stops with StopReason::Caller.
  GenerationStats generate(std::span<const std::int32_t> prompt, const GenerationOptions& options,
                           const std::function<bool(std::int32_t)>& on_token);

  // Logits after the last prefill or decode step.
  const std::vector<float>& last_logits() const { return logits_; }
  // Runs `prompt` (reusing the cache) and returns the logits of its last token.
  const std::vector<float>& evaluate(std::span<const std::int32_t> prompt);

  const std::vector<std::int32_t>& context() const { return context_; }
  // Routing hits, residency and time split of the runner; safe to read from any thread.
  const std::shared_ptr<measure::Metrics>& metrics() const { return runner_->metrics(); }
  std::int64_t context_capacity() const { return cache_->capacity(); }
  forward::ModelRunner& runner() { return *runner_; }
  void reset();

 private:
  std::int64_t prefill(std::span<const std::int32_t> prompt, std::int64_t chunk,
                       const std::atomic<bool>* cancel = nullptr);

  std::unique_ptr<forward::ModelRunner> own_runner_;
  forward::ModelRunner* runner_;
  std::unique_ptr<forward::ContextCache> cache_;
  std::vector<std::int32_t> context_;  // tokens whose keys and values are in the cache
  std::vector<float> logits_;
};

}  // namespace tandem::generate
