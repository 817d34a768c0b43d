// How well a model predicts a text: perplexity over consecutive windows of the text's
// tokens, and optionally the mean KL divergence of its next-token distributions from a
// base model's (how much quantized or converted weights drift from the originals).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/numa_pools.h"
#include "engine/model/loaded_model.h"
#include "engine/text/tokenizer.h"

namespace tandem::measure {

// A request that cannot be measured (an empty text, a base model with another tokenizer);
// the message says what to change.
class PerplexityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PerplexityOptions {
  // The text is cut into consecutive windows of this many tokens; each window starts with
  // an empty context, and every token after its first is predicted from those before it.
  std::int64_t context_tokens = 512;
  // Tokens per forward pass inside a window: bounds the [tokens x vocab] logits in memory.
  std::int64_t batch_tokens = 128;
  // Where each model keeps keys and values (attention on the CPU): the measured one's, and
  // the base's.
  backend::KvCacheFormat kv_cache = backend::KvCacheFormat::F32;
  backend::KvCacheFormat base_kv_cache = backend::KvCacheFormat::F32;
  // Saves the measured model's next-token distributions here (distribution_file.h), renamed
  // into place when the whole text is measured; `saved_as` says what it was measured as.
  std::string save_distributions;
  struct {
    std::string model, cpu_format, kv_cache;
  } saved_as;
  // Compares with distributions saved so, instead of a base model: the same text, tokens and
  // context, or PerplexityError.
  std::string base_distributions;
  const std::atomic<bool>* cancel = nullptr;  // checked between batches
  std::function<void(std::int64_t done_tokens, std::int64_t total_tokens)> progress;
};

struct PerplexityResult {
  std::int64_t text_tokens = 0;       // the whole text
  std::int64_t evaluated_tokens = 0;  // predicted: text_tokens minus one per window
  std::int64_t windows = 0;
  double mean_nll = 0.0;          // natural log
  std::optional<double> mean_kl;  // KL(base || model) in nats, with a base model or its file
  // With saved distributions: what they were saved from ("M, int8 weights, bf16 cache").
  std::string base_saved_from;
  double seconds = 0.0;
  bool cancelled = false;

  double perplexity() const;
};

// The model that is measured, or the base it is compared with.
struct ScoredModel {
  const model::LoadedModel& model;
  const text::Tokenizer& tokenizer;
};

// Tokenizes `text` (no special tokens are added or parsed) and measures it. With `base`, or
// options.base_distributions, both must have the same vocabulary size and token ids of the
// text (and the file the same context); otherwise throws PerplexityError.
PerplexityResult measure_perplexity(const ScoredModel& model, std::string_view text,
                                    backend::NumaPools& pool, const PerplexityOptions& options,
                                    const ScoredModel* base = nullptr);

}  // namespace tandem::measure
