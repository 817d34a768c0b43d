#include "engine/generate/generator.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

namespace tandem::generate {
namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

Generator::Generator(const model::LoadedModel& model, backend::NumaPools& pool,
                     std::int64_t context_tokens)
    : own_runner_(std::make_unique<forward::ModelRunner>(model, pool)),
      runner_(own_runner_.get()),
      cache_(runner_->make_cache(context_tokens)) {}

Generator::Generator(forward::ModelRunner& runner, std::int64_t context_tokens)
    : runner_(&runner), cache_(runner.make_cache(context_tokens)) {}

void Generator::reset() {
  cache_->truncate(0);
  context_.clear();
  logits_.clear();
}

std::int64_t Generator::prefill(std::span<const std::int32_t> prompt, std::int64_t chunk,
                                const std::atomic<bool>* cancel) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  if (static_cast<std::int64_t>(prompt.size()) > cache_->capacity()) {
    throw std::length_error("the prompt has " + std::to_string(prompt.size()) +
                            " tokens but the context holds " + std::to_string(cache_->capacity()));
  }
  // Keep the longest common prefix; at least the last prompt token is recomputed, since
  // its logits are needed.
  std::size_t common = 0;
  while (common < context_.size() && common < prompt.size() && context_[common] == prompt[common])
    ++common;
  common = std::min(common, prompt.size() - 1);
  // Recurrent layers (Qwen3-Next) keep less than asked where they cannot go back that far.
  common = static_cast<std::size_t>(runner_->rewind(*cache_, static_cast<std::int64_t>(common)));
  context_.resize(common);
  const bool recurrent = runner_->spec().has_linear_layers();
  if (chunk <= 0) chunk = runner_->prefill_chunk_tokens();
  for (std::size_t at = common; at < prompt.size();) {
    // A stop asked for during a long prompt takes effect at the next chunk, or within one
    // at the next layer where the pass lets it (ForwardOptions::cancel); the chunks done stay
    // in the cache for the next call.
    if (cancel != nullptr && cancel->load()) break;
    std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(chunk), prompt.size() - at);
    // The state before the prompt's last token is where the next call most likely returns:
    // the same prompt again (a regenerated reply), or a next turn that rewrites the reply.
    if (recurrent && at + n == prompt.size() && n > 1) --n;
    if (recurrent && at == prompt.size() - 1) runner_->checkpoint(*cache_);
    forward::ForwardOptions forward_options;
    forward_options.prompt_tokens = static_cast<std::int64_t>(prompt.size() - common);
    forward_options.cancel = cancel;
    if (!runner_->forward(prompt.subspan(at, n), *cache_, logits_, forward_options)) break;
    context_.insert(context_.end(), prompt.begin() + static_cast<std::ptrdiff_t>(at),
                    prompt.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  return static_cast<std::int64_t>(common);
}

const std::vector<float>& Generator::evaluate(std::span<const std::int32_t> prompt) {
  prefill(prompt, 0);
  return logits_;
}

GenerationStats Generator::generate(std::span<const std::int32_t> prompt,
                                    const GenerationOptions& options,
                                    const std::function<bool(std::int32_t)>& on_token) {
  GenerationStats stats;
  const auto t0 = Clock::now();
  stats.cached_tokens = prefill(prompt, options.prefill_chunk, options.cancel);
  stats.prompt_tokens = static_cast<std::int64_t>(context_.size()) - stats.cached_tokens;
  stats.prompt_cut_short = context_.size() < prompt.size();
  stats.prompt_seconds = seconds_since(t0);

  Sampler sampler(options.sampling);
  const auto& eos = runner_->spec().eos_token_ids;
  const auto t1 = Clock::now();
  for (;;) {
    if (options.cancel && options.cancel->load()) {
      stats.stop = StopReason::Cancelled;
      break;
    }
    if (stats.generated_tokens >= options.max_tokens) {
      stats.stop = StopReason::MaxTokens;
      break;
    }
    const std::int32_t next = sampler.sample(logits_, context_);
    ++stats.generated_tokens;
    if (options.stop_at_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      stats.stop = StopReason::EndOfSequence;
      break;
    }
    if (!on_token(next)) {
      stats.stop = StopReason::Caller;
      break;
    }
    if (stats.generated_tokens >= options.max_tokens) {
      stats.stop = StopReason::MaxTokens;
      break;
    }
    if (cache_->size() >= cache_->capacity()) {
      stats.stop = StopReason::ContextFull;
      break;
    }
    const std::int32_t one[1] = {next};
    runner_->forward(one, *cache_, logits_);
    context_.push_back(next);
  }
  stats.decode_seconds = seconds_since(t1);
  return stats;
}

}  // namespace tandem::generate
