// The memory planner and recommender: from the hardware, a model's shape and the user's
// wishes, where every byte goes (RAM and VRAM by category), whether it fits, and the
// parameters to run with, each with a one-line reason.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/hw/hardware_report.h"
#include "engine/plan/model_shape.h"
#include "kernels/cpu/isa.h"

namespace tandem::plan {

enum class Quality { Quality, Balanced, Speed };
std::string_view quality_name(Quality q);
bool parse_quality(std::string_view name, Quality& out);

// Mxfp4: routed experts stored as MXFP4 (gpt-oss), kept so. Native: a GGUF file's tensors
// as stored, each in its own block format (sized from ModelShape::stored). Int4Down8: INT4
// routed experts whose down projections are INT8 (model::CpuFormat::Int4Down8).
// Int8Rotated: INT8's bytes, rotated (model::CpuFormat::Int8Rotated), whose prompts AMX
// multiplies in integer tiles.
enum class WeightFormat { Bf16, Int8, Int4, Mxfp4, Native, Int4Down8, Int8Rotated };
// "bf16", "int8", "int4", "mxfp4", "native", "int4-down8", "int8-rotated"
std::string_view format_name(WeightFormat f);
// The 8-bit format the plan recommends for a CPU whose best kernels are `variant`: rotated
// INT8 where AMX multiplies it in integer tiles (prompts 1.6-2.2x as fast as INT8's at the
// same size, mean KL 0.0047 against INT8's 0.0029 on SmolLM2-135M, both well inside 0.01;
// docs/benchmarks.md, "INT8 rotated, built"); plain INT8 elsewhere, whose prompts the
// rotation did not measurably speed up.
WeightFormat int8_format_for(kernels::CpuVariant variant);
// Bytes per parameter: BF16 2, INT8 (rotated or not) 1 plus an FP16 scale per 32 (1/16 byte),
// INT4 0.5 plus an FP16 scale and offset per group of 32 (1/8 byte), MXFP4 0.5 plus a 1-byte
// exponent per 32 (1/32 byte); Int4Down8 a routed expert's, whose down is a third of it (gate,
// up and down alike in size): two thirds INT4's and a third INT8's. Native has no one figure:
// 0.
double bytes_per_param(WeightFormat f);

struct PlanWishes {
  std::int64_t context_tokens = 8192;
  Quality quality = Quality::Balanced;
  // Recorded routing statistics of the model (schedule/routing_stats.h); empty: none. With
  // them the plan places the most routed experts on the GPU (the frequency strategy).
  std::string expert_stats;
  // The CPU format the user chose (the setup assistant's format box); absent: the plan
  // chooses by quality and shrinks it to fit. A chosen one is kept, and the verdict says
  // whether it fits.
  std::optional<WeightFormat> cpu_format;
  // Whether the user gave context_tokens (else it is the default), for the reason's words.
  bool context_asked = false;
};

struct MemoryLine {
  std::string category;
  std::uint64_t bytes = 0;
};

struct Parameter {
  std::string name;  // the seeds' names: kt-method, cpuinfer, ...
  std::string value;
  std::string reason;
};

enum class Verdict { Fits, FitsWithChanges, DoesNotFit };
std::string_view verdict_name(Verdict v);  // "fits", "fits_with_changes", "does_not_fit"

struct Plan {
  std::vector<MemoryLine> ram;
  std::vector<MemoryLine> vram;
  std::uint64_t ram_budget = 0;  // what the plan may use
  std::uint64_t vram_budget = 0;
  std::uint64_t ram_total() const;
  std::uint64_t vram_total() const;

  Verdict verdict = Verdict::Fits;
  std::string verdict_reason;
  std::vector<std::string> changes;  // what was changed from the wishes to make it fit
  // How many of `changes` only chose a smaller CPU format for the experts than the quality
  // wished (the rest shorten the context, shrink the KV cache or the GPU's share): a list of
  // formats can say "INT4 fits" of a plan whose one change was INT4 for INT8.
  int cpu_format_changes = 0;

  bool uses_gpu = false;
  std::string gpu_name;
  WeightFormat cpu_format = WeightFormat::Int8;
  WeightFormat gpu_format = WeightFormat::Bf16;
  std::int64_t gpu_experts_per_layer = 0;
  std::int64_t context_tokens = 0;
  // The positions the model takes, which context_tokens stays within; 0: the model does not
  // say. What a context setting may go up to.
  std::int64_t max_positions = 0;
  // The CPU engine keeps its KV cache in 8 bits (kv-cache int8) rather than BF16: where RAM
  // would not hold BF16's at the context asked, or for speed at long contexts (Quality::Speed
  // on CPUs with AVX-512 VNNI, or with AVX2 alone). Without a GPU only: the GPU keeps its own
  // cache.
  bool kv_cache_int8 = false;
  // Prompt tokens per forward pass (prefill-chunk): schedule::kCpuExpertPrefillChunkTokens
  // where the CPU runs routed experts alone and RAM has room for its scratch, else
  // schedule::kPrefillChunkTokens.
  std::int64_t prefill_chunk_tokens = 0;
  std::vector<Parameter> parameters;
  // Where copying a layer's experts to the GPU at the bus's full speed pays, for engines that
  // stage them so (SGLang's kt-kernel); 0 without a GPU or experts. Tandem's own threshold,
  // among `parameters`, also counts the host's widening to BF16 and the prompt chunks.
  std::int64_t bus_prefill_threshold = 0;
};

// Memory the runtime needs besides weights and the KV cache.
inline constexpr std::uint64_t kRuntimeOverheadBytes = 1ull << 30;  // the app, buffers, libraries
inline constexpr std::uint64_t kCudaContextBytes = 512ull
                                                   << 20;  // CUDA context and allocator slack

// Where the CPU runs the whole forward pass: the scratch a prompt token takes in it (its
// activations, attention rows and, with routed experts, each of its experts' rows), and the
// scratch of a prompt chunk of `chunk_tokens` with an allowance for the
// logits, the sampler and the kernels' buffers.
std::uint64_t cpu_scratch_bytes_per_token(const ModelShape& model);
std::uint64_t cpu_scratch_bytes(const ModelShape& model, std::int64_t chunk_tokens);

Plan make_plan(const hw::HardwareReport& hardware, const ModelShape& model,
               const PlanWishes& wishes);

nlohmann::json to_json(const Plan& plan);
std::string format_plan(const Plan& plan);

// A recorded machine (the `tandem detect --json` document) back into a report.
hw::HardwareReport hardware_from_json(const nlohmann::json& detect);

}  // namespace tandem::plan
