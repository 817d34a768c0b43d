#include "engine/measure/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/forward/model_runner.h"
#include "engine/measure/distribution_file.h"

namespace tandem::measure {
namespace {

using Clock = std::chrono::steady_clock;

// log softmax of one row of logits, in double: the sums run over vocabularies of 150k.
void log_probabilities(const float* logits, std::int64_t n, std::vector<double>& out) {
  const float largest = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - largest);
  const double log_sum = largest + std::log(sum);
  out.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = logits[i] - log_sum;
}

// KL(p || q) from log probabilities.
double kl_divergence(const std::vector<double>& log_p, const std::vector<double>& log_q) {
  double kl = 0.0;
  for (std::size_t i = 0; i < log_p.size(); ++i) kl += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
  return kl;
}

// One model running windows of the text from an empty cache.
struct Scorer {
  Scorer(const model::LoadedModel& model, backend::NumaPools& pool, std::int64_t context,
         backend::KvCacheFormat kv_cache)
      : runner(model, pool) {
    runner.set_cpu_kv_cache_format(kv_cache);
    cache = runner.make_cache(context);
  }
  forward::ModelRunner runner;
  std::unique_ptr<forward::ContextCache> cache;
  std::vector<float> logits;
};

}  // namespace

double PerplexityResult::perplexity() const {
  return evaluated_tokens > 0 ? std::exp(mean_nll) : std::numeric_limits<double>::quiet_NaN();
}

PerplexityResult measure_perplexity(const ScoredModel& model, std::string_view text,
                                    backend::NumaPools& pool, const PerplexityOptions& options,
                                    const ScoredModel* base) {
  const auto started = Clock::now();
  if (options.context_tokens < 2) {
    throw PerplexityError("the context must hold at least 2 tokens; use a larger --context");
  }
  const std::vector<text::TokenId> ids = model.tokenizer.encode(text, /*parse_special=*/false);
  if (ids.size() < 2) {
    // A text of more than a few characters that makes fewer than 2 tokens is one whose
    // characters the vocabulary has no tokens for (a tokenizer without byte tokens drops them).
    constexpr std::size_t kFewCharacters = 16;
    throw PerplexityError(
        "the text has " + std::to_string(ids.size()) +
        " token(s) in this model's vocabulary, and perplexity needs at least 2: " +
        (text.size() <= kFewCharacters
             ? std::string("give a longer text")
             : "its " + std::to_string(text.size()) +
                   " bytes are characters the vocabulary has no tokens for. Give a text in a "
                   "language and script the model knows, or check that the model's tokenizer "
                   "is its own"));
  }
  const std::int64_t vocab = model.model.spec().vocab_size;
  if (base != nullptr) {
    if (base->model.spec().vocab_size != vocab) {
      throw PerplexityError("the base model's output has " +
                            std::to_string(base->model.spec().vocab_size) +
                            " tokens and the model's " + std::to_string(vocab) +
                            "; KL divergence compares models with the same tokenizer");
    }
    if (base->tokenizer.encode(text, /*parse_special=*/false) != ids) {
      throw PerplexityError(
          "the base model tokenizes the text differently; KL divergence compares models with the "
          "same "
          "tokenizer (for example a quantized model and the original it came from)");
    }
  }

  const std::int64_t context = options.context_tokens;
  const std::int64_t batch = std::max<std::int64_t>(1, options.batch_tokens);
  const std::int64_t total = static_cast<std::int64_t>(ids.size());
  // Every window predicts all its tokens but the last.
  std::int64_t evaluated = 0;
  for (std::int64_t start = 0; start + 1 < total; start += context)
    evaluated += std::min(context, total - start) - 1;
  std::optional<DistributionReader> saved;
  if (!options.base_distributions.empty()) {
    if (base != nullptr)
      throw PerplexityError("compare with a base model or with its saved distributions, not both");
    try {
      saved.emplace(options.base_distributions);
    } catch (const std::runtime_error& e) {
      throw PerplexityError(e.what());
    }
    const DistributionHeader& h = saved->header();
    const std::string& file = options.base_distributions;
    if (h.vocab != vocab) {
      throw PerplexityError(file + " holds distributions over " + std::to_string(h.vocab) +
                            " tokens and the model's are over " + std::to_string(vocab) +
                            "; KL divergence compares models with the same tokenizer");
    }
    if (h.ids_digest != digest_ids(ids) || h.text_tokens != total) {
      throw PerplexityError(file + " was saved on another text, or one tokenized otherwise (" +
                            std::to_string(h.text_tokens) + " tokens, here " +
                            std::to_string(total) +
                            "); give the same text file, to a model with the same tokenizer");
    }
    if (h.context != context) {
      throw PerplexityError(file + " was saved with windows of " + std::to_string(h.context) +
                            " tokens; measure with --context " + std::to_string(h.context) +
                            " too");
    }
  }
  std::optional<DistributionWriter> writer;
  if (!options.save_distributions.empty()) {
    DistributionHeader h;
    h.vocab = vocab;
    h.context = context;
    h.text_tokens = total;
    h.evaluated_tokens = evaluated;
    h.ids_digest = digest_ids(ids);
    h.model = options.saved_as.model;
    h.cpu_format = options.saved_as.cpu_format;
    h.kv_cache = options.saved_as.kv_cache;
    try {
      writer.emplace(options.save_distributions, h);
    } catch (const std::runtime_error& e) {
      throw PerplexityError(e.what());
    }
  }
  Scorer scored(model.model, pool, context, options.kv_cache);
  std::optional<Scorer> reference;
  if (base != nullptr) reference.emplace(base->model, pool, context, options.base_kv_cache);

  PerplexityResult result;
  result.text_tokens = total;
  if (saved) {
    const DistributionHeader& h = saved->header();
    result.base_saved_from = h.model + ", " + h.cpu_format + " weights, " + h.kv_cache + " cache";
  }
  double nll_sum = 0.0;
  double kl_sum = 0.0;
  std::vector<double> log_p, log_base;
  for (std::int64_t start = 0; start + 1 < total && !result.cancelled; start += context) {
    const std::int64_t n = std::min(context, total - start);
    scored.cache->truncate(0);
    if (reference) reference->cache->truncate(0);
    for (std::int64_t at = 0; at < n; at += batch) {
      if (options.cancel != nullptr && options.cancel->load()) {
        result.cancelled = true;
        break;
      }
      const std::int64_t m = std::min(batch, n - at);
      const std::span<const std::int32_t> chunk(ids.data() + start + at,
                                                static_cast<std::size_t>(m));
      const forward::ForwardOptions all_logits{.all_logits = true};
      scored.runner.forward(chunk, *scored.cache, scored.logits, all_logits);
      if (reference)
        reference->runner.forward(chunk, *reference->cache, reference->logits, all_logits);
      // The window's last token has nothing after it inside the window to predict.
      const std::int64_t predicting = std::min(m, n - 1 - at);
      for (std::int64_t j = 0; j < predicting; ++j) {
        log_probabilities(scored.logits.data() + j * vocab, vocab, log_p);
        nll_sum -=
            log_p[static_cast<std::size_t>(ids[static_cast<std::size_t>(start + at + j + 1)])];
        if (reference) {
          log_probabilities(reference->logits.data() + j * vocab, vocab, log_base);
          kl_sum += kl_divergence(log_base, log_p);
        }
        if (saved) {
          try {
            kl_sum += saved->next_kl(log_p);
          } catch (const std::runtime_error& e) {
            throw PerplexityError(e.what());
          }
        }
        if (writer) writer->add(log_p);
        ++result.evaluated_tokens;
      }
      if (options.progress) options.progress(start + at + m, total);
    }
    ++result.windows;
  }
  if (result.evaluated_tokens > 0) {
    result.mean_nll = nll_sum / static_cast<double>(result.evaluated_tokens);
    if (reference || saved) result.mean_kl = kl_sum / static_cast<double>(result.evaluated_tokens);
  }
  // A cancelled measurement saves nothing (the writer removes its part).
  if (writer && !result.cancelled) writer->finish();
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return result;
}

}  // namespace tandem::measure
