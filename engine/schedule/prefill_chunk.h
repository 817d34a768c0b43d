// How many of a prompt's tokens one forward pass takes: a prompt longer than that is fed in
// chunks, each a pass over every layer.
#pragma once

#include <cstdint>

namespace tandem::schedule {

// Where an accelerator runs the pass (its scratch is sized for the chunk), and on the CPU
// for models without routed experts, which gain nothing from longer passes.
inline constexpr std::int64_t kPrefillChunkTokens = 512;

// Where the CPU runs the whole pass of a model with routed experts. Each expert takes its
// share of a chunk's tokens (Qwen3-30B-A3B routes each token to 8 of 128: 32 tokens an
// expert in 512, 128 in 2048), and its products read each weight once for all of them, so
// longer chunks run the experts nearer their kernels' pace. On 2 Zen 5 threads, the
// Qwen3-30B-A3B-shaped synthetic in INT8 reads a 2048-token prompt at 891-905 tokens/s in
// chunks of 512 and 957-967 in one of 2048 (docs/benchmarks.md). The scratch grows with
// it, about 270 KB a token at that shape (plan::cpu_scratch_bytes_per_token).
inline constexpr std::int64_t kCpuExpertPrefillChunkTokens = 2048;

// The chunk for a pass on the CPU alone, by whether the model has routed experts. A stop
// during a prompt cuts such a pass short at the next layer (forward::ForwardOptions::cancel).
constexpr std::int64_t cpu_prefill_chunk_tokens(bool routed_experts) {
  return routed_experts ? kCpuExpertPrefillChunkTokens : kPrefillChunkTokens;
}

// The chunk a runner takes: the one asked for (--prefill-chunk, a profile's prefill-chunk),
// else kPrefillChunkTokens with an accelerator and cpu_prefill_chunk_tokens without.
constexpr std::int64_t prefill_chunk_tokens(std::int64_t asked, bool accelerator,
                                            bool routed_experts) {
  return asked > 0     ? asked
         : accelerator ? kPrefillChunkTokens
                       : cpu_prefill_chunk_tokens(routed_experts);
}

}  // namespace tandem::schedule
