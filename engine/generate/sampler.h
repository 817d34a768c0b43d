// Picks the next token from the logits: greedy, or sampled with temperature, top-k, top-p
// and min-p, after a repetition penalty. Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace tandem::generate {

struct SamplingParams {
  float temperature = 0.7f;           // 0 or below: greedy
  std::int32_t top_k = 40;            // 0: off
  float top_p = 0.95f;                // 1: off
  float min_p = 0.05f;                // 0: off
  float repetition_penalty = 1.0f;    // 1: off; applied to tokens already in the context
  std::int32_t penalty_window = 256;  // how many recent tokens the penalty looks at
  std::uint64_t seed = 0;

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
};

// The ranges every front end takes: the command line, the server (whose temperature and
// top_p are OpenAI's) and the window.
inline constexpr float kMaxTemperature = 2.0f;
inline constexpr float kMaxRepetitionPenalty = 10.0f;  // above 0: 0 would divide by zero

// A sentence naming the first setting outside its range, or empty. NaN is outside every range.
std::string sampling_problem(const SamplingParams& params);

class Sampler {
 public:
  // Throws std::invalid_argument with sampling_problem's sentence for settings outside their
  // ranges (a negative top-k, a penalty of 0), which would otherwise sample from the wrong
  // distribution without a word.
  explicit Sampler(const SamplingParams& params);

  // `history` is the context so far (prompt and generated tokens).
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<std::int32_t> ids_;
};

}  // namespace tandem::generate
