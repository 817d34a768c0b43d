// The compute bound on prompts: what a prompt token multiplies on the CPU, by the product
// instruction that carries it, and the tokens a second the instructions' measured peaks
// allow (kernels/cpu/compute_peak.h). A prompt takes each weight from the caches for many
// tokens, so its ceiling is the instructions' rate, as decoding's is the memory's.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/model/loaded_model.h"
#include "kernels/cpu/compute_peak.h"

namespace tandem::measure {

struct ProductWork {
  kernels::ProductInstruction instruction;
  double multiply_adds = 0;  // per prompt token
};

struct PromptWork {
  std::vector<ProductWork> products;  // one entry per instruction
  // Empty when every product was counted; otherwise a sentence saying what has no ceiling.
  std::string uncounted;
};

// Per token of a prompt of `prompt_tokens` after `depth` cached ones, on the CPU alone: the
// weights' products (the routed experts' as many as a token takes, the output head's one row
// spread over the prompt; routers, a few per mille, not counted) by their packed kernels'
// instruction, and attention's scores and weighted values (a token sees the depth and, on
// average, half the prompt) by `attention` (none: attention not counted). Dense matrices
// that oneDNN multiplies count as our kernel's instruction: oneDNN takes the same one
// (VPDPBUSD) where our kernels have a single instruction.
PromptWork prompt_work_per_token(const model::LoadedModel& model, std::int64_t prompt_tokens,
                                 std::int64_t depth,
                                 std::optional<kernels::ProductInstruction> attention);

// Tokens a second if every product ran at its instruction's peak; `peak_multiply_adds`
// gives each instruction's multiply-adds a second. 0 when nothing was counted.
double prompt_ceiling_tokens_per_s(
    const PromptWork& work,
    const std::function<double(kernels::ProductInstruction)>& peak_multiply_adds);

}  // namespace tandem::measure
