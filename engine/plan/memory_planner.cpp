#include "engine/plan/memory_planner.h"

#include "engine/schedule/hybrid_options.h"
#include "kernels/cpu/attention/attention.h"
#include "kernels/cpu/packed/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem::plan {
namespace {

constexpr double kPcieBytesPerS = 25e9;  // PCIe 4.0 x16 in practice
// The experts' INT8 products a core carries in a prompt, end to end: about 106 GMAC/s a core on
// one 2-core Zen 5 VM, 257 on another that issues two VPDPBUSD a cycle, and 80 on a 16-core
// Xeon with AMX, whose tiles ran the experts only 1.07x as fast as its AVX-512 kernels
// (docs/benchmarks.md, "The hybrid engine on an NVIDIA H200"; on the synthetic before 96ca19b,
// to be measured again): at the few tokens a prompt chunk gives each expert, the work around
// the tiles set the pace.
constexpr double kCpuMacsPerCoreInt8 = 100e9;
constexpr double kAmxSpeedup = 1.1;
// The CUDA backend widens a staged layer's experts to BF16 on one host thread as it copies
// them: about 1.1 GB/s on an H200's 16-core Xeon host (docs/benchmarks.md, "The hybrid engine
// on an NVIDIA H200"), well under any bus.
constexpr double kStagingWideningBytesPerS = 1.1e9;

std::uint64_t bytes(std::int64_t params, WeightFormat f) {
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(params) * bytes_per_param(f)));
}

// A category's weights in format `f`: as stored (a GGUF file's own bytes) for Native.
std::uint64_t weights(std::int64_t params, std::uint64_t stored, WeightFormat f) {
  return f == WeightFormat::Native ? stored : bytes(params, f);
}

std::string gib(std::uint64_t b) {
  return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
}

std::uint64_t sum(const std::vector<MemoryLine>& lines) {
  std::uint64_t t = 0;
  for (const MemoryLine& l : lines) t += l.bytes;
  return t;
}

// Logits, the sampler and the kernels' buffers, whatever the chunk (with them latent
// attention's keys and values expanded for a long pass: at most 84 MB at DeepSeek-V3).
constexpr std::uint64_t kScratchAllowanceBytes = 256ull << 20;

// One prefill chunk's activations on the accelerator (hidden states, attention and expert
// buffers) plus the allowance.
std::uint64_t scratch_bytes(const ModelShape& m) {
  return static_cast<std::uint64_t>(schedule::kPrefillChunkTokens * m.hidden * 48) +
         kScratchAllowanceBytes;
}

struct Layout {
  std::vector<MemoryLine> ram, vram;
};

// Qwen3-Next's linear-attention layers: a state of fixed size, whatever the context, kept in
// fp32 twice (live, and the snapshot a regenerated reply returns to: backend::KvCache).
MemoryLine recurrent_state(const ModelShape& m) {
  return {"linear-attention state",
          static_cast<std::uint64_t>(m.recurrent_state_elements) * 2 * sizeof(float)};
}

// Where each category goes for the given choices.
// `staging`: with layerwise prefill, the two layers of the other experts staged on the GPU.
// `int8_kv`: without a GPU, the CPU's KV cache in 8 bits.
// `cpu_chunk`: without a GPU, the tokens of a prompt's forward pass (the scratch's).
Layout layout(const ModelShape& m, bool gpu, WeightFormat cpu, WeightFormat gpu_fmt,
              std::int64_t gpu_experts, std::int64_t context, std::uint64_t staging = 0,
              bool int8_kv = false, std::int64_t cpu_chunk = schedule::kPrefillChunkTokens) {
  Layout l;
  const ModelShape::StoredBytes& st = m.stored;
  const std::int64_t attention_dense = m.attention_params + m.dense_ffn_params + m.router_params;
  const std::uint64_t attention_dense_stored = st.attention + st.dense_ffn + st.router;
  const std::int64_t cpu_experts = m.experts - gpu_experts;
  const auto experts = [&](std::int64_t n, WeightFormat f) {
    return weights(m.expert_params * n * m.moe_layers,
                   st.expert * static_cast<std::uint64_t>(n * m.moe_layers), f);
  };
  // Looked up by row, the embedding stays as stored (a GGUF file's blocks; BF16 otherwise).
  l.ram.push_back(
      {"embeddings", st.known ? st.embedding : bytes(m.embedding_params, WeightFormat::Bf16)});
  if (gpu) {
    l.vram.push_back(
        {"attention and dense weights", weights(attention_dense, attention_dense_stored, gpu_fmt)});
    l.vram.push_back(
        {"shared experts", weights(m.shared_expert_params, st.shared_experts, gpu_fmt)});
    l.vram.push_back({"output head", weights(m.output_params, st.output, gpu_fmt)});
    l.vram.push_back({"routed experts (GPU)", experts(gpu_experts, gpu_fmt)});
    if (staging > 0) l.vram.push_back({"layerwise prefill staging", staging});
    // The CUDA backend keeps keys and values (or the latent) in fp32.
    l.vram.push_back(
        {"KV cache", static_cast<std::uint64_t>(context * m.kv_elements_per_token * 4)});
    if (m.recurrent_state_elements > 0) l.vram.push_back(recurrent_state(m));
    l.vram.push_back({"activations and scratch", scratch_bytes(m)});
    l.vram.push_back({"CUDA context", kCudaContextBytes});
    l.ram.push_back({"routed experts (CPU)", experts(cpu_experts, cpu)});
    l.ram.push_back({"activations and scratch", scratch_bytes(m)});
  } else {
    // Read by every token, the dense matrices stay INT8 when the experts are INT4
    // (model::packed_format_for).
    const WeightFormat dense =
        cpu == WeightFormat::Int4 || cpu == WeightFormat::Int4Down8 || cpu == WeightFormat::Mxfp4
            ? WeightFormat::Int8
            : cpu;
    l.ram.push_back(
        {"attention and dense weights", weights(attention_dense, attention_dense_stored, dense)});
    l.ram.push_back({"shared experts", weights(m.shared_expert_params, st.shared_experts, dense)});
    l.ram.push_back({"output head", weights(m.output_params, st.output, dense)});
    l.ram.push_back({"routed experts (CPU)", experts(m.experts, cpu)});
    // The CPU engine keeps keys and values in BF16 (RunSettings' default, --kv-cache bf16) or
    // in 8 bits with a float scale per 32 of a key (1.125 bytes an element) and per value row
    // (kernels::int8_value_group: up to 128, 1.03125 bytes); for latent attention it keeps the
    // latent twice, as the values to weigh and beside the rotary key as the keys to score
    // against (backend/cpu/kv_cache.h).
    const std::int64_t kv_elements = !m.mla ? m.kv_elements_per_token
                                     : m.kv_key_width > 0
                                         ? m.layers * (m.kv_key_width + m.kv_value_width)
                                         : 2 * m.kv_elements_per_token;
    // The keys' share of the elements; with the widths unknown, half, each value scale
    // counted per 32 (the most there can be).
    const bool widths = m.kv_key_width > 0 && m.kv_value_width > 0;
    const double key_share =
        widths ? static_cast<double>(m.kv_key_width) / (m.kv_key_width + m.kv_value_width) : 0.5;
    const double value_group = static_cast<double>(
        widths ? kernels::int8_value_group(m.kv_value_width) : kernels::kInt8Group);
    const double element_bytes = int8_kv ? key_share * (1.0 + 4.0 / kernels::kInt8Group) +
                                               (1.0 - key_share) * (1.0 + 4.0 / value_group)
                                         : 2.0;
    l.ram.push_back({"KV cache", static_cast<std::uint64_t>(std::llround(
                                     static_cast<double>(context * kv_elements) * element_bytes))});
    if (m.recurrent_state_elements > 0) l.ram.push_back(recurrent_state(m));
    l.ram.push_back({"activations and scratch", cpu_scratch_bytes(m, cpu_chunk)});
  }
  l.ram.push_back({"runtime overhead", kRuntimeOverheadBytes});
  return l;
}

const hw::GpuDevice* best_gpu(const hw::HardwareReport& hw) {
  const hw::GpuDevice* best = nullptr;
  for (const hw::GpuDevice& d : hw.gpus.devices) {
    if (d.usable && (best == nullptr || d.free_bytes > best->free_bytes)) best = &d;
  }
  return best;
}

std::string method_name(kernels::CpuVariant v, WeightFormat f) {
  const std::string fmt_part = f == WeightFormat::Bf16          ? "BF16"
                               : f == WeightFormat::Int8        ? "INT8"
                               : f == WeightFormat::Int8Rotated ? "INT8ROTATED"
                               : f == WeightFormat::Mxfp4       ? "MXFP4"
                               : f == WeightFormat::Native      ? "GGUF"
                               : f == WeightFormat::Int4Down8   ? "INT4DOWN8"
                                                                : "INT4";
  switch (v) {
    case kernels::CpuVariant::Amx:
      return "AMX" + fmt_part;
    case kernels::CpuVariant::Avx512:
      return "AVX512" + fmt_part;
    case kernels::CpuVariant::Avx2:
      return "AVX2" + fmt_part;
    case kernels::CpuVariant::Scalar:
      return "SCALAR" + fmt_part;
  }
  return fmt_part;
}

}  // namespace

std::uint64_t cpu_scratch_bytes_per_token(const ModelShape& m) {
  const std::int64_t h = m.hidden;
  const std::int64_t attention = m.attention_width > 0 ? m.attention_width : 2 * h;
  // The widest dense feed-forward (dense layers, shared experts): its gate and up rows.
  const std::int64_t dense_layers = m.layers - m.moe_layers;
  std::int64_t inner = 0;
  if (dense_layers > 0 && m.dense_ffn_params > 0)
    inner = m.dense_ffn_params / (3 * h * dense_layers);
  if (m.moe_layers > 0 && m.shared_expert_params > 0)
    inner = std::max(inner, m.shared_expert_params / (3 * h * m.moe_layers));
  // forward::ModelRunner::Workspace, in fp32: four hidden-wide rows, the query and attended
  // rows and any others of attention, a layer's keys and values (MLA: its latent and rotary
  // key) before the cache takes them, the dense gate and up; with experts the router's logits
  // and choices, the CPU experts' and deferred experts' outputs, and their host copies with two
  // of the input.
  const std::int64_t attention_layers = m.layers - m.linear_layers;
  const std::int64_t kv_row = attention_layers > 0 ? m.kv_elements_per_token / attention_layers : 0;
  std::int64_t floats = 4 * h + 2 * attention + m.attention_extra_width + kv_row + 2 * inner;
  // Latent attention's prompt buffers: 16 heads' queries against the latent and rotary key,
  // and their weighed latents (backend::cpu_ops::latent_attention).
  if (m.mla) floats += 16 * (m.kv_key_width + m.kv_value_width);
  // One product's input at a time as its kernel takes it, at most two bytes an element (BF16,
  // or 8 bits with a scale and a sum per 32): the widest, a dense down's or attention's. And
  // the attention kernels' BF16 copy of the pass's queries (MLA: a block of 16 heads').
  std::int64_t bytes = 2 * std::max({h, attention, inner});
  bytes += 2 * (m.mla ? 16 * m.kv_key_width : attention);
  if (m.experts > 0) floats += m.experts + 2 * m.experts_per_token + 6 * h;
  if (m.experts > 0 && m.moe_layers > 0) {
    const std::int64_t k = m.experts_per_token;
    const std::int64_t expert_inner = m.expert_params / (3 * h);
    // backend::ExpertCompute, for each of the token's experts: gate, up and the down's
    // output in fp32, the input and the hidden activations in 8 bits with their scales, and
    // the token's own input once.
    bytes += k * (4 * (2 * expert_inner + h) + (h + expert_inner) * 9 / 8) + h * 9 / 8;
  }
  return static_cast<std::uint64_t>(4 * floats + bytes);
}

std::uint64_t cpu_scratch_bytes(const ModelShape& m, std::int64_t chunk) {
  return static_cast<std::uint64_t>(chunk) * cpu_scratch_bytes_per_token(m) +
         kScratchAllowanceBytes;
}

std::string_view quality_name(Quality q) {
  switch (q) {
    case Quality::Quality:
      return "quality";
    case Quality::Balanced:
      return "balanced";
    case Quality::Speed:
      return "speed";
  }
  return "balanced";
}

bool parse_quality(std::string_view name, Quality& out) {
  for (Quality q : {Quality::Quality, Quality::Balanced, Quality::Speed}) {
    if (name == quality_name(q)) {
      out = q;
      return true;
    }
  }
  return false;
}

std::string_view format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::Bf16:
      return "bf16";
    case WeightFormat::Int8:
      return "int8";
    case WeightFormat::Int4:
      return "int4";
    case WeightFormat::Mxfp4:
      return "mxfp4";
    case WeightFormat::Native:
      return "native";
    case WeightFormat::Int4Down8:
      return "int4-down8";
    case WeightFormat::Int8Rotated:
      return "int8-rotated";
  }
  return "int8";
}

WeightFormat int8_format_for(kernels::CpuVariant variant) {
  return variant == kernels::CpuVariant::Amx ? WeightFormat::Int8Rotated : WeightFormat::Int8;
}

double bytes_per_param(WeightFormat f) {
  switch (f) {
    case WeightFormat::Bf16:
      return 2.0;
    case WeightFormat::Int8:
    case WeightFormat::Int8Rotated:
      return kernels::int8_bits_per_weight() / 8.0;
    case WeightFormat::Int4:
      return kernels::int4_bits_per_weight(kernels::kDefaultInt4Group) / 8.0;
    case WeightFormat::Mxfp4:
      return 0.5 + 1.0 / 32.0;
    case WeightFormat::Native:
      return 0.0;
    case WeightFormat::Int4Down8:
      return (2.0 * bytes_per_param(WeightFormat::Int4) + bytes_per_param(WeightFormat::Int8)) /
             3.0;
  }
  return 1.0;
}

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::Fits:
      return "fits";
    case Verdict::FitsWithChanges:
      return "fits_with_changes";
    case Verdict::DoesNotFit:
      return "does_not_fit";
  }
  return "does_not_fit";
}

std::uint64_t Plan::ram_total() const {
  return sum(ram);
}
std::uint64_t Plan::vram_total() const {
  return sum(vram);
}

namespace {

// The plan with prompts fed in `cpu_chunk` tokens a pass where the CPU runs alone.
Plan plan_for_chunk(const hw::HardwareReport& hw, const ModelShape& m, const PlanWishes& wishes,
                    std::int64_t cpu_chunk) {
  Plan plan;
  const auto& usable = hw.isa.usable;
  const kernels::CpuVariant variant = kernels::best_variant(usable);
  const bool native_bf16 = usable.avx512_bf16 || usable.amx_bf16;

  // Budgets: leave the operating system and other programs some room.
  const std::uint64_t ram_reserve = std::max<std::uint64_t>(1ull << 30, hw.memory.total_bytes / 20);
  plan.ram_budget =
      hw.memory.available_bytes > ram_reserve ? hw.memory.available_bytes - ram_reserve : 0;
  const hw::GpuDevice* gpu = best_gpu(hw);

  // Quality keeps plain INT8 where BF16 is not taken (or does not fit): with AMX its prompts
  // are the more exact of the two 8-bit formats; balanced takes the faster one for this CPU.
  WeightFormat cpu = wishes.quality == Quality::Quality
                         ? (native_bf16 ? WeightFormat::Bf16 : WeightFormat::Int8)
                     : wishes.quality == Quality::Balanced ? int8_format_for(variant)
                                                           : WeightFormat::Int4;
  if (wishes.cpu_format) {
    cpu = *wishes.cpu_format;
  } else if (m.stored.known) {
    // A GGUF file runs as stored at any quality: its quantisation was chosen at download.
    cpu = WeightFormat::Native;
  } else if (m.mxfp4_experts) {
    // Stored as MXFP4, the experts are kept so at any quality: exact, and as small as INT4.
    cpu = WeightFormat::Mxfp4;
  } else if (wishes.quality == Quality::Quality && !native_bf16) {
    plan.changes.push_back(
        "BF16 experts need AVX512_BF16 or AMX, which this CPU lacks: INT8 instead");
    ++plan.cpu_format_changes;
  }
  // No longer than the positions the model takes: past them its answers fall apart. Not a
  // change made to fit (the verdict): the context-length parameter's reason says it.
  const bool past_limit = m.max_positions > 0 && wishes.context_tokens > m.max_positions;
  const std::int64_t longest = past_limit ? m.max_positions : wishes.context_tokens;
  std::int64_t context = longest;

  // The GPU: the always-active weights first, in the best format that leaves room.
  WeightFormat gpu_fmt = WeightFormat::Bf16;
  std::int64_t gpu_experts = 0;
  bool use_gpu = false;
  const bool stats = !wishes.expert_stats.empty();
  const schedule::PlacementStrategy strategy =
      stats ? schedule::PlacementStrategy::Frequency : schedule::PlacementStrategy::Uniform;
  const bool moe = m.experts > 0 && m.moe_layers > 0;
  const auto expert_bytes = [&] { return weights(m.expert_params, m.stored.expert, gpu_fmt); };
  // Layerwise prefill copies each layer's experts to the GPU again for every chunk of a prompt
  // (schedule::kPrefillChunkTokens, as the generator feeds prompts with an accelerator), so it pays
  // where copying a layer's experts takes less time than the CPU spends on them for the tokens of
  // one chunk.
  struct PrefillCost {
    std::int64_t tokens = 0;      // where copying starts to pay
    std::int64_t bus_tokens = 0;  // the same at the bus's speed alone
    double layer_bytes = 0, bytes_per_s = 0;
    bool measured = false;
  };
  const auto prefill_cost = [&] {
    PrefillCost c;
    c.layer_bytes = static_cast<double>(
        weights(m.expert_params * m.experts,
                m.stored.expert * static_cast<std::uint64_t>(m.experts), gpu_fmt));
    const double rate = std::max(1, hw.topology.physical_cores) * kCpuMacsPerCoreInt8 *
                        (variant == kernels::CpuVariant::Amx ? kAmxSpeedup : 1.0);
    const double cpu_s_per_token =
        static_cast<double>(std::max<std::int64_t>(1, m.experts_per_token * m.expert_params)) /
        rate;
    // The bus as measured at Tandem's first start on this GPU, else PCIe 4.0 x16's, and no
    // faster than the host widens what it copies.
    c.measured = gpu != nullptr && gpu->host_to_device_bytes_per_s > 0;
    const double bus = c.measured ? gpu->host_to_device_bytes_per_s : kPcieBytesPerS;
    c.bytes_per_s = std::min(bus, kStagingWideningBytesPerS);
    c.bus_tokens = static_cast<std::int64_t>(std::ceil(c.layer_bytes / bus / cpu_s_per_token));
    c.tokens =
        static_cast<std::int64_t>(std::ceil(c.layer_bytes / c.bytes_per_s / cpu_s_per_token));
    return c;
  };
  const std::int64_t chunk_tokens = schedule::kPrefillChunkTokens;
  // Layerwise prefill, which the plan turns on with a GPU where it pays, keeps two layers of
  // the experts not on it staged there; the runtime sizes N with the same code
  // (schedule::experts_that_fit).
  const bool layerwise_pays = moe && gpu != nullptr && prefill_cost().tokens <= chunk_tokens;
  bool layerwise = layerwise_pays;
  const auto staging_for = [&](std::int64_t n) -> std::uint64_t {
    return use_gpu && layerwise ? schedule::staging_bytes(expert_bytes(), m.experts, n, strategy)
                                : 0;
  };
  const auto size_gpu_experts = [&](std::int64_t ctx) -> std::int64_t {
    if (!moe) return 0;
    const std::uint64_t fixed = sum(layout(m, true, cpu, gpu_fmt, 0, ctx).vram);
    const std::uint64_t left = plan.vram_budget > fixed ? plan.vram_budget - fixed : 0;
    if (layerwise && schedule::staging_bytes(expert_bytes(), m.experts, 0, strategy) > left) {
      layerwise = false;  // not even the staging fits: prompts use the hybrid split
    }
    return schedule::experts_that_fit(left, expert_bytes(), m.experts, m.moe_layers, layerwise,
                                      strategy);
  };
  if (gpu != nullptr) {
    plan.vram_budget = gpu->free_bytes;
    // A GGUF file's dense part goes to the GPU as stored.
    const std::vector<WeightFormat> choices =
        m.stored.known
            ? std::vector<WeightFormat>{WeightFormat::Native, WeightFormat::Int4}
            : std::vector<WeightFormat>{WeightFormat::Bf16, WeightFormat::Int8, WeightFormat::Int4};
    for (WeightFormat f : choices) {
      if (sum(layout(m, true, cpu, f, 0, context).vram) <= plan.vram_budget) {
        gpu_fmt = f;
        use_gpu = true;
        break;
      }
    }
    if (!use_gpu) {
      plan.changes.push_back(fmt::format(
          "the GPU's {} free cannot hold the attention weights and KV cache even at 4 bits: "
          "everything runs on the CPU",
          gib(gpu->free_bytes)));
    } else if (gpu_fmt != WeightFormat::Bf16 && gpu_fmt != WeightFormat::Native) {
      plan.changes.push_back(fmt::format("GPU weights stored as {} so they fit in {} of VRAM",
                                         format_name(gpu_fmt), gib(gpu->free_bytes)));
    }
    if (use_gpu) gpu_experts = size_gpu_experts(context);
  }
  plan.uses_gpu = use_gpu;
  plan.gpu_name = gpu != nullptr ? gpu->name : "";

  // The CPU's KV cache (without a GPU): 8 bits where the CPU engine takes the model's widths
  // and it pays, chosen for speed (below) or to fit.
  const bool int8_kv_takes = !use_gpu && m.kv_elements_per_token > 0 &&
                             kernels::int8_cache_takes(m.kv_key_width) &&
                             kernels::int8_cache_takes(m.kv_value_width);
  // Faster where its kernels sum the bytes' products in integers: VPDPBUSD with AVX-512 VNNI,
  // VPMADDWD on CPUs with AVX2 alone (at depth 8192 on Zen 3, a decoded token 1.23-1.35x as
  // fast as with BF16's cache in three rounds, prompts as fast; docs/benchmarks.md). An AVX-512
  // CPU without VNNI runs the Portable fp32 kernel, slower than BF16's.
  const bool int8_kv_faster =
      (usable.avx512f && usable.avx512bw && usable.avx512vl && usable.avx512_vnni) ||
      (usable.avx2 && usable.fma && !usable.avx512f);
  bool int8_kv = int8_kv_takes && int8_kv_faster && wishes.quality == Quality::Speed;
  const bool int8_kv_for_speed = int8_kv;

  // RAM: make it fit by an 8-bit KV cache (which costs the least accuracy), smaller CPU
  // formats, then a shorter context.
  auto ram_needed = [&] {
    return sum(layout(m, use_gpu, cpu, gpu_fmt, gpu_experts, context, 0, int8_kv, cpu_chunk).ram);
  };
  if (int8_kv_takes && ram_needed() > plan.ram_budget) int8_kv = true;
  const WeightFormat wished_cpu = cpu;
  if (!wishes.cpu_format && ram_needed() > plan.ram_budget) {
    // The first smaller format that fits, else the smallest: INT8, then (with routed experts)
    // INT4 with INT8 downs, then INT4. One change, from the wished format to the one taken.
    const bool eight_bits = cpu == WeightFormat::Int8 || cpu == WeightFormat::Int8Rotated;
    std::vector<WeightFormat> smaller;
    if (cpu == WeightFormat::Bf16) smaller.push_back(WeightFormat::Int8);
    if ((cpu == WeightFormat::Bf16 || eight_bits) && moe)
      smaller.push_back(WeightFormat::Int4Down8);
    if (cpu == WeightFormat::Bf16 || eight_bits || cpu == WeightFormat::Int4Down8)
      smaller.push_back(WeightFormat::Int4);
    for (WeightFormat f : smaller) {
      cpu = f;
      if (ram_needed() <= plan.ram_budget) break;
    }
    if (cpu != wished_cpu) {
      plan.changes.push_back(fmt::format("CPU experts as {} instead of {} to fit in {} of RAM",
                                         format_name(cpu), format_name(wished_cpu),
                                         gib(plan.ram_budget)));
      ++plan.cpu_format_changes;
    }
  }
  // Smaller experts may leave room for BF16's cache again.
  if (int8_kv && !int8_kv_for_speed && cpu != wished_cpu) {
    int8_kv = false;
    if (ram_needed() > plan.ram_budget) int8_kv = true;
  }
  if (int8_kv && !int8_kv_for_speed) {
    plan.changes.insert(plan.changes.begin(),
                        fmt::format("KV cache in 8 bits instead of BF16 to fit in {} of RAM",
                                    gib(plan.ram_budget)));
  }
  if (ram_needed() > plan.ram_budget && context > 2048) {
    // A shorter context helps only when the KV cache is what does not fit.
    const std::int64_t wished = context;
    std::int64_t shorter = context;
    while (shorter > 2048) {
      shorter /= 2;
      context = shorter;
      if (ram_needed() <= plan.ram_budget) break;
    }
    if (ram_needed() <= plan.ram_budget) {
      plan.changes.push_back(
          fmt::format("context shortened from {} to {} tokens to fit in RAM", wished, context));
    } else {
      context = wished;
    }
  }
  // A shorter context also frees VRAM for more experts.
  if (use_gpu) gpu_experts = size_gpu_experts(context);

  const Layout final_layout = layout(m, use_gpu, cpu, gpu_fmt, gpu_experts, context,
                                     staging_for(gpu_experts), int8_kv, cpu_chunk);
  plan.kv_cache_int8 = int8_kv;
  plan.ram = final_layout.ram;
  plan.vram = final_layout.vram;
  plan.cpu_format = cpu;
  plan.gpu_format = gpu_fmt;
  plan.gpu_experts_per_layer = gpu_experts;
  plan.context_tokens = context;
  plan.max_positions = m.max_positions;

  if (plan.ram_total() > plan.ram_budget) {
    plan.verdict = Verdict::DoesNotFit;
    plan.verdict_reason =
        cpu == WeightFormat::Native
            ? fmt::format(
                  "needs {} of RAM as the file stores it, but only {} is available; "
                  "choose a smaller quantisation of the model{}",
                  gib(plan.ram_total()), gib(plan.ram_budget), use_gpu ? "" : " or add a GPU")
            : fmt::format(
                  "needs {} of RAM even with 4-bit experts, but only {} is available; "
                  "choose a smaller model{}",
                  gib(plan.ram_total()), gib(plan.ram_budget), use_gpu ? "" : " or add a GPU");
  } else if (!plan.changes.empty()) {
    plan.verdict = Verdict::FitsWithChanges;
    plan.verdict_reason = fmt::format("fits with {} change{}: {}", plan.changes.size(),
                                      plan.changes.size() == 1 ? "" : "s", plan.changes.front());
  } else {
    plan.verdict = Verdict::Fits;
    plan.verdict_reason = fmt::format(
        "fits: {} of {} RAM{}", gib(plan.ram_total()), gib(plan.ram_budget),
        use_gpu ? fmt::format(", {} of {} VRAM", gib(plan.vram_total()), gib(plan.vram_budget))
                : "");
  }

  // The parameters, named as the seeds name them.
  const int cores = std::max(1, hw.topology.physical_cores);
  int pools = 0;
  for (const hw::NumaNode& n : hw.topology.numa_nodes) pools += n.physical_cores > 0 ? 1 : 0;
  pools = std::max(1, pools);
  plan.parameters.push_back(
      {"kt-method", method_name(variant, cpu),
       fmt::format("{} experts with the {} kernels: {}",
                   cpu == WeightFormat::Native ? "GGUF" : format_name(cpu),
                   variant == kernels::CpuVariant::Amx      ? "AMX"
                   : variant == kernels::CpuVariant::Avx512 ? "AVX-512"
                   : variant == kernels::CpuVariant::Avx2   ? "AVX2"
                                                            : "portable",
                   cpu == WeightFormat::Native
                       ? "the file's own block formats, computed as stored: no conversion"
                   : cpu == WeightFormat::Bf16 ? "full precision, twice the memory of INT8"
                   : cpu == WeightFormat::Int8 ? "near-lossless and fast"
                   : cpu == WeightFormat::Int8Rotated
                       ? (variant == kernels::CpuVariant::Amx
                              ? "INT8's memory and about its accuracy; rotated, so that AMX's "
                                "integer tiles multiply whole rows and prompts run up to twice as "
                                "fast as INT8's"
                              : "INT8's memory and about its accuracy; rotated for prompts in "
                                "AMX's integer tiles, which this CPU lacks")
                   : cpu == WeightFormat::Mxfp4
                       ? "the model's own MXFP4 experts, kept exactly at 4.25 bits"
                   : cpu == WeightFormat::Int4Down8 && m.experts > 0
                       ? "gate and up at 5 bits a weight, downs at 8.5: about 73% of the memory "
                         "of INT8, closer to its accuracy than INT4"
                   : m.experts == 0
                       ? "the FFNs' gate and up at 5 bits a weight, their downs at 8.5: about 75% "
                         "of INT8's memory, a little less accurate"
                       : "about 60% of the memory of INT8 (5 bits a weight), a little less "
                         "accurate")});
  plan.parameters.push_back(
      {"cpuinfer", std::to_string(cores), hw.recommendation.cpu_threads.reason});
  plan.parameters.push_back(
      {"threadpool-count", std::to_string(pools), hw.recommendation.thread_pools.reason});
  plan.parameters.push_back(
      {"num-gpu-experts", std::to_string(gpu_experts),
       !use_gpu         ? std::string("no usable GPU: every expert runs on the CPU")
       : m.experts == 0 ? std::string("a dense model has no experts to place")
                        : fmt::format("{} of VRAM left after attention, KV cache and scratch holds "
                                      "{} of {} experts per layer",
                                      gib(plan.vram_budget -
                                          sum(layout(m, true, cpu, gpu_fmt, 0, context).vram)),
                                      gpu_experts, m.experts)});
  const std::int64_t deferred = use_gpu && m.experts_per_token > 2 && gpu_experts < m.experts
                                    ? std::min<std::int64_t>(2, m.experts_per_token - 1)
                                    : 0;
  plan.parameters.push_back(
      {"max-deferred-experts-per-token", std::to_string(deferred),
       deferred > 0
           ? "the lowest-weighted CPU experts of a layer finish during the GPU's next attention"
       : use_gpu ? "all experts are on the GPU or too few are active to defer"
                 : "without a GPU there is nothing to overlap the CPU experts with"});
  const PrefillCost cost = prefill_cost();
  if (use_gpu && moe) plan.bus_prefill_threshold = cost.bus_tokens;
  const std::string copy_rate =
      fmt::format("{} at {:.1f} GB/s, {}", gib(static_cast<std::uint64_t>(cost.layer_bytes)),
                  cost.bytes_per_s / 1e9,
                  cost.bytes_per_s == kStagingWideningBytesPerS
                      ? "as fast as the host widens them to BF16"
                      : (cost.measured ? "the bus measured" : "PCIe 4.0 x16, not measured"));
  if (use_gpu && moe && layerwise) {
    plan.parameters.push_back(
        {"gpu-prefill-token-threshold", std::to_string(cost.tokens),
         fmt::format("above {} prompt tokens, copying a layer's experts to the GPU ({}) is "
                     "faster than running them on the CPU",
                     cost.tokens, copy_rate)});
  } else {
    plan.parameters.push_back(
        {"gpu-prefill-token-threshold", "0",
         !use_gpu || !moe ? std::string("no GPU prefill: the CPU processes prompts")
         : !layerwise_pays
             ? fmt::format("copying a layer's experts to the GPU ({}) pays only from {} tokens, "
                           "more than the {} of a prompt chunk, which copies them again: "
                           "prompts split like decoding",
                           copy_rate, cost.tokens, chunk_tokens)
             : fmt::format("the GPU cannot also hold two layers of the other experts "
                           "({}) to stage them, so prompts split like decoding",
                           gib(schedule::staging_bytes(expert_bytes(), m.experts, 0, strategy)))});
  }
  const std::string strategy_name =
      gpu_experts == 0 ? "uniform" : std::string(schedule::strategy_name(strategy));
  plan.parameters.push_back(
      {"expert-placement-strategy", strategy_name,
       gpu_experts == 0 ? "no experts are placed on the GPU"
       : stats          ? "recorded routing statistics put the most used experts on the GPU"
                        : "no routing statistics for this model yet, so the GPU experts "
                          "are spread evenly (record them with --record-expert-stats; "
                          "front-loading and random are the alternatives)"});
  if (stats && gpu_experts > 0)
    plan.parameters.push_back(
        {"expert-stats", wishes.expert_stats, "what the frequency placement reads"});
  const bool dynamic = gpu_experts > 0 && gpu_experts < m.experts;
  plan.parameters.push_back({"enable-dynamic-expert-update", dynamic ? "true" : "false",
                             dynamic ? "experts that turn hot during use move onto the GPU"
                                     : "nothing to move: the GPU holds all experts or none"});
  plan.parameters.push_back(
      {"context-length", std::to_string(context),
       context != longest ? "shortened so the KV cache fits"
       : past_limit ? (wishes.context_asked ? fmt::format("the most this model takes ({} asked)",
                                                          wishes.context_tokens)
                                            : std::string("all the positions this model takes"))
       : wishes.context_asked
           ? "as asked"
           : "the default, which fits; ask for more or less with the context setting"});
  plan.parameters.push_back(
      {"kv-cache", int8_kv ? "int8" : "bf16",
       use_gpu ? std::string("the GPU keeps its own; this is the CPU's, should it run alone")
       : int8_kv_for_speed
           ? fmt::format("8 bits: long conversations decode faster with {}, in 0.54 of BF16's "
                         "memory, a little less exact",
                         usable.avx512f ? "AVX-512 VNNI" : "AVX2")
       : int8_kv ? std::string("8 bits, so the context fits: 0.54 of BF16's memory, a little "
                               "less exact") +
                       (int8_kv_faster ? "" : ", and slower to compute on this CPU")
       : !int8_kv_takes && m.kv_key_width > 0
           ? fmt::format("BF16: the 8-bit cache takes heads of whole 32s up to {}, not {}",
                         kernels::kInt8MaxDim,
                         m.kv_key_width == m.kv_value_width
                             ? std::to_string(m.kv_key_width)
                             : fmt::format("{} and {}", m.kv_key_width, m.kv_value_width))
           : std::string("BF16: it fits, and keeps the attention closest to the model's")});
  plan.parameters.push_back(
      {"accelerator", use_gpu ? "auto" : "none",
       use_gpu ? fmt::format("the GPU ({}) runs attention, the dense layers and {} experts per "
                             "layer; the CPU the others",
                             plan.gpu_name, gpu_experts)
               : std::string("everything runs on the CPU")});
  return plan;
}

}  // namespace

Plan make_plan(const hw::HardwareReport& hw, const ModelShape& m, const PlanWishes& wishes) {
  const bool routed = m.experts > 0 && m.moe_layers > 0;
  const std::int64_t wide = schedule::cpu_prefill_chunk_tokens(routed);
  Plan plan = plan_for_chunk(hw, m, wishes, wide);
  plan.prefill_chunk_tokens = schedule::kPrefillChunkTokens;
  Parameter chunk{"prefill-chunk", "", ""};
  if (plan.uses_gpu) {
    chunk.reason = "the GPU's scratch is sized for prompts in passes of this many tokens";
  } else if (!routed) {
    chunk.reason = "without routed experts, longer passes would not make prompts faster";
  } else {
    // Longer passes run the experts faster, but not at the cost of anything the user sees.
    Plan narrow = plan_for_chunk(hw, m, wishes, schedule::kPrefillChunkTokens);
    const std::uint64_t more =
        cpu_scratch_bytes(m, wide) - cpu_scratch_bytes(m, schedule::kPrefillChunkTokens);
    if (narrow.cpu_format == plan.cpu_format && narrow.kv_cache_int8 == plan.kv_cache_int8 &&
        narrow.context_tokens == plan.context_tokens && narrow.verdict == plan.verdict) {
      plan.prefill_chunk_tokens = wide;
      chunk.reason = fmt::format(
          "each expert computes more of a prompt's tokens at once, so long prompts run faster, "
          "for {} more scratch than passes of {}",
          gib(more), schedule::kPrefillChunkTokens);
    } else {
      plan = std::move(narrow);
      plan.prefill_chunk_tokens = schedule::kPrefillChunkTokens;
      chunk.reason = fmt::format(
          "passes of {} tokens would make long prompts faster, but their {} more scratch would "
          "not leave room for this plan's format, KV cache and context",
          wide, gib(more));
    }
  }
  chunk.value = std::to_string(plan.prefill_chunk_tokens);
  // Beside the KV cache, before the accelerator, which the plan's parameters end with.
  const auto accelerator = std::find_if(plan.parameters.begin(), plan.parameters.end(),
                                        [](const Parameter& x) { return x.name == "accelerator"; });
  plan.parameters.insert(accelerator, std::move(chunk));
  return plan;
}

nlohmann::json to_json(const Plan& p) {
  nlohmann::json ram = nlohmann::json::array(), vram = nlohmann::json::array(),
                 params = nlohmann::json::array();
  for (const MemoryLine& l : p.ram) ram.push_back({{"category", l.category}, {"bytes", l.bytes}});
  for (const MemoryLine& l : p.vram) vram.push_back({{"category", l.category}, {"bytes", l.bytes}});
  for (const Parameter& x : p.parameters)
    params.push_back({{"name", x.name}, {"value", x.value}, {"reason", x.reason}});
  return {
      {"verdict", verdict_name(p.verdict)},
      {"reason", p.verdict_reason},
      {"changes", p.changes},
      {"memory",
       {{"ram", ram},
        {"ram_total_bytes", p.ram_total()},
        {"ram_budget_bytes", p.ram_budget},
        {"vram", vram},
        {"vram_total_bytes", p.vram_total()},
        {"vram_budget_bytes", p.vram_budget}}},
      {"uses_gpu", p.uses_gpu},
      {"gpu", p.gpu_name},
      {"cpu_format", format_name(p.cpu_format)},
      {"gpu_format", format_name(p.gpu_format)},
      {"gpu_experts_per_layer", p.gpu_experts_per_layer},
      {"context_tokens", p.context_tokens},
      {"max_positions", p.max_positions > 0 ? nlohmann::json(p.max_positions) : nlohmann::json()},
      {"kv_cache", p.kv_cache_int8 ? "int8" : "bf16"},
      {"prefill_chunk", p.prefill_chunk_tokens},
      {"parameters", params}};
}

std::string format_plan(const Plan& p) {
  std::string out = fmt::format("Verdict: {}\n", p.verdict_reason);
  for (const std::string& c : p.changes) out += fmt::format("  - {}\n", c);
  auto section = [&](const char* title, const std::vector<MemoryLine>& lines, std::uint64_t total,
                     std::uint64_t budget) {
    out += fmt::format("\n{} ({} of {})\n", title, gib(total), gib(budget));
    for (const MemoryLine& l : lines)
      out += fmt::format("  {:<28} {:>10}\n", l.category, gib(l.bytes));
  };
  section("RAM", p.ram, p.ram_total(), p.ram_budget);
  if (p.uses_gpu) section(("VRAM on " + p.gpu_name).c_str(), p.vram, p.vram_total(), p.vram_budget);
  out += "\nParameters\n";
  for (const Parameter& x : p.parameters)
    out += fmt::format("  {:<32} {:<12} {}\n", x.name, x.value, x.reason);
  return out;
}

hw::HardwareReport hardware_from_json(const nlohmann::json& j) {
  hw::HardwareReport r;
  const auto& cpu = j.at("cpu");
  r.isa.identity.vendor = cpu.value("vendor", "");
  r.isa.identity.brand = cpu.value("brand", "");
  for (const auto& info : kernels::kIsaFeatureTable) {
    const std::string name(info.name);
    r.isa.usable.*(info.member) = cpu.at("features").value(name, false);
    r.isa.cpuid.*(info.member) = cpu.contains("cpuid_features")
                                     ? cpu["cpuid_features"].value(name, false)
                                     : r.isa.usable.*(info.member);
  }
  // Reports written before BMI2 was listed lack it. Every CPU with AVX2 has BMI2 (Intel since
  // Haswell, AMD since Excavator), and the AVX-512 variant requires it, so such a report's
  // AVX2 stands for it rather than a silent "no" that would plan AVX2 kernels for an AVX-512
  // machine.
  if (!cpu.at("features").contains("bmi2")) {
    r.isa.usable.bmi2 = r.isa.usable.avx2;
    r.isa.cpuid.bmi2 = r.isa.cpuid.avx2;
  }
  const auto& t = j.at("topology");
  r.topology.packages = t.value("packages", 1);
  r.topology.physical_cores = t.value("physical_cores", 1);
  r.topology.hardware_threads = t.value("hardware_threads", r.topology.physical_cores);
  r.topology.l2_cache_bytes = t.value("l2_cache_bytes", 0ull);
  r.topology.l3_cache_bytes = t.value("l3_cache_bytes", 0ull);
  for (const auto& n : t.at("numa_nodes")) {
    hw::NumaNode node;
    node.os_index = n.value("os_index", 0);
    node.cpus = n.value("cpus", std::vector<int>{});
    node.physical_cores = n.value("physical_cores", 0);
    node.memory_bytes = n.value("memory_bytes", 0ull);
    r.topology.numa_nodes.push_back(node);
  }
  r.memory.total_bytes = j.at("memory").value("total_bytes", 0ull);
  r.memory.available_bytes = j.at("memory").value("available_bytes", 0ull);
  const auto& g = j.at("gpus");
  r.gpus.compiled = g.value("cuda_compiled", false);
  for (const auto& d : g.at("devices")) {
    hw::GpuDevice dev;
    dev.index = d.value("index", 0);
    dev.name = d.value("name", "");
    dev.total_bytes = d.value("total_bytes", 0ull);
    dev.free_bytes = d.value("free_bytes", 0ull);
    dev.usable = d.value("usable", false);
    if (d.contains("measured") && d["measured"].is_object()) {
      const auto& m = d["measured"];
      dev.host_to_device_bytes_per_s = m.value("host_to_device_bytes_per_s", 0.0);
      dev.memory_bytes_per_s = m.value("memory_bytes_per_s", 0.0);
      dev.bf16_flops_per_s = m.value("bf16_flops_per_s", 0.0);
    }
    r.gpus.devices.push_back(dev);
  }
  if (g.contains("reason") && g["reason"].is_string())
    r.gpus.reason = g["reason"].get<std::string>();
  r.recommendation = hw::recommend(r.isa, r.topology);
  r.findings = hw::explain(r);
  return r;
}

}  // namespace tandem::plan
