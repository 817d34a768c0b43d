// Random-weight BF16 checkpoints whose per-layer shapes equal a real model's, for
// benchmarks (`tandem synth`). Weights have variance 1/fan_in, so activations stay sane,
// except the embeddings (variance 1) and the matrices that write into the residual stream
// (1 / (2 * layers * fan_in)), so that tokens stay apart and the routers spread them over
// the experts as trained routers do.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::model {

struct SynthOptions {
  std::string like;         // "qwen3-30b-a3b", "deepseek-v3"
  std::int64_t layers = 0;  // 0: as many as the real model has
  // Routed experts per MoE layer, each of the real shape; 0: as many as the real model has.
  std::int64_t experts = 0;
  std::string out;
  std::uint64_t seed = 1;
  // config.json entries set over the shape's (tests write small models this way).
  std::vector<std::pair<std::string, std::int64_t>> config_overrides;
};

std::vector<std::string> synth_shapes();  // the names `like` accepts

// Writes config.json, generation_config.json and one shard per layer (plus the index).
// `progress` gets (bytes written, bytes total). Throws ModelError with a sentence.
void write_synthetic_checkpoint(
    const SynthOptions& options,
    const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace tandem::model
