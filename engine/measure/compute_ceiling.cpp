#include "engine/measure/compute_ceiling.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::measure {
namespace {

struct Counter {
  PromptWork& work;
  const kernels::IsaFeatures& usable;

  void add(kernels::ProductInstruction instruction, double multiply_adds) {
    for (ProductWork& p : work.products) {
      if (p.instruction == instruction) {
        p.multiply_adds += multiply_adds;
        return;
      }
    }
    work.products.push_back({instruction, multiply_adds});
  }
  void uncounted(const std::string& what) {
    if (work.uncounted.empty()) work.uncounted = what;
  }
  // `tokens`: how many tokens one product of the matrix takes (a prompt's, an expert's share
  // of it, the output head's one), which decides AMX's instruction.
  void packed(const kernels::PackedMatrix& m, kernels::CpuVariant variant, double times,
              std::int64_t tokens) {
    const auto instruction = kernels::packed_product_instruction(m.format, variant, usable, tokens);
    if (!instruction) {
      uncounted(fmt::format("the {} kernels have no single product instruction to bound them",
                            kernels::variant_name(variant)));
      return;
    }
    add(*instruction, times * static_cast<double>(m.rows) * static_cast<double>(m.cols));
  }
  void matrix(const kernels::WeightMatrix& m, double times, std::int64_t tokens) {
    if (m.data == nullptr) return;
    if (m.packed == nullptr) {
      uncounted("matrices multiplied as stored, GGUF blocks or fp32, are not counted");
      return;
    }
    packed(*m.packed, m.packed_variant, times, tokens);
  }
  void feed_forward(const model::FeedForwardWeights& f, double times, std::int64_t tokens) {
    if (f.slices.empty()) {
      for (const kernels::WeightMatrix* m : {&f.gate, &f.up, &f.down}) matrix(*m, times, tokens);
      return;
    }
    for (const model::ExpertSlice& s : f.slices)
      for (const kernels::PackedMatrix* m : {s.gate, s.up, s.down})
        if (m != nullptr) packed(*m, s.variant, times, tokens);
  }
};

}  // namespace

PromptWork prompt_work_per_token(const model::LoadedModel& model, std::int64_t prompt_tokens,
                                 std::int64_t depth,
                                 std::optional<kernels::ProductInstruction> attention) {
  PromptWork work;
  Counter count{work, kernels::detect_isa().usable};
  const model::ModelSpec& spec = model.spec();
  const model::ModelWeights& w = model.weights();
  if (spec.mla || spec.has_linear_layers())
    count.uncounted("latent and linear attention are not counted");
  if (!attention) count.uncounted("attention's own products are not counted on this CPU");
  // Positions a prompt token sees, on average: the depth, then itself and those before it.
  const double seen = static_cast<double>(depth) + static_cast<double>(prompt_tokens + 1) / 2;
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const model::LayerWeights& layer = w.layers[l];
    const model::AttentionWeights& a = layer.attention;
    for (const kernels::WeightMatrix* m :
         {&a.q, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b, &a.k_b, &a.v_b})
      count.matrix(*m, 1.0, prompt_tokens);
    if (attention && !layer.linear && !spec.mla) {
      const std::int64_t window =
          l < spec.layer_window.size() ? spec.layer_window[l] : std::int64_t{0};
      const double positions = window > 0 ? std::min(seen, static_cast<double>(window)) : seen;
      // q . k and the weighted values: head_dim each per head and position.
      count.add(*attention, positions * static_cast<double>(spec.num_heads) * 2.0 *
                                static_cast<double>(spec.head_dim));
    }
    if (layer.moe) {
      // A routed expert takes its share of the prompt's tokens, on average.
      const std::int64_t routed = std::max<std::int64_t>(
          1, prompt_tokens * spec.experts_per_token / std::max<std::int64_t>(1, spec.num_experts));
      if (!layer.experts.experts.empty())
        count.feed_forward(layer.experts.experts[0], static_cast<double>(spec.experts_per_token),
                           routed);
      if (layer.experts.shared) count.feed_forward(*layer.experts.shared, 1.0, prompt_tokens);
    } else {
      count.feed_forward(layer.dense, 1.0, prompt_tokens);
    }
  }
  count.matrix(w.output, 1.0 / static_cast<double>(std::max<std::int64_t>(1, prompt_tokens)), 1);
  return work;
}

double prompt_ceiling_tokens_per_s(
    const PromptWork& work,
    const std::function<double(kernels::ProductInstruction)>& peak_multiply_adds) {
  double seconds = 0;
  for (const ProductWork& p : work.products) {
    const double peak = peak_multiply_adds(p.instruction);
    if (peak <= 0) return 0;
    seconds += p.multiply_adds / peak;
  }
  return seconds > 0 ? 1.0 / seconds : 0;
}

}  // namespace tandem::measure
