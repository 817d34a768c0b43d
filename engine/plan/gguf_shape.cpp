#include "engine/plan/gguf_shape.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "engine/model/model_spec.h"

namespace tandem::plan {
namespace {

std::int64_t meta_int(const model::GgufSet& f, const std::string& key, std::int64_t fallback) {
  const model::GgufValue* v = f.find(key);
  if (v == nullptr) return fallback;
  if (v->is_integer()) return v->as_int();
  if (v->type() == model::GgufType::kArray) {
    // Per-layer values (some models vary the KV heads by layer): the largest is the bound.
    std::int64_t best = fallback;
    for (const model::GgufValue& e : v->as_array().elements) {
      if (e.is_integer()) best = std::max(best, e.as_int());
    }
    return best;
  }
  return fallback;
}

int block_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  try {
    return std::stoi(name.substr(4, name.find('.', 4) - 4));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

ModelShape model_shape_from_gguf(const model::GgufSet& f) {
  const model::GgufValue* arch_value = f.find("general.architecture");
  if (arch_value == nullptr || arch_value->type() != model::GgufType::kString) {
    throw std::runtime_error(
        f.path() + ": the GGUF file does not say its architecture (general.architecture).");
  }
  const std::string arch = arch_value->as_string();
  ModelShape s;
  s.architecture = "gguf:" + arch;
  // Next-token-prediction layers (GLM-4.5's) are counted in block_count but not run.
  s.layers = meta_int(f, arch + ".block_count", 0) - meta_int(f, arch + ".nextn_predict_layers", 0);
  s.hidden = meta_int(f, arch + ".embedding_length", 0);
  if (s.layers <= 0 || s.hidden <= 0) {
    throw std::runtime_error(f.path() + ": " + arch + ".block_count or " + arch +
                             ".embedding_length is missing.");
  }
  s.experts = meta_int(f, arch + ".expert_count", 0);
  s.experts_per_token = meta_int(f, arch + ".expert_used_count", 0);

  std::int64_t routed = 0;
  std::uint64_t routed_bytes = 0;
  std::set<int> moe_blocks;
  ModelShape::StoredBytes& b = s.stored;
  b.known = true;
  for (const auto& [name, t] : f.tensors()) {
    if (block_index(name) >= s.layers) continue;  // a prediction layer
    const auto n = static_cast<std::int64_t>(t.info->element_count());
    const std::uint64_t size = t.info->size_bytes;
    if (name == "token_embd.weight") {
      s.embedding_params += n;
      b.embedding += size;
    } else if (name == "output.weight") {
      s.output_params += n;
      b.output += size;
    } else if (name.find("_exps.") != std::string::npos) {
      routed += n;
      routed_bytes += size;
      moe_blocks.insert(block_index(name));
    } else if (name.find("_shexp.") != std::string::npos) {
      s.shared_expert_params += n;
      b.shared_experts += size;
    } else if (name.find("ffn_gate_inp.") != std::string::npos ||
               name.find("exp_probs_b") != std::string::npos) {
      s.router_params += n;
      b.router += size;
    } else if (name.find(".ffn_gate.") != std::string::npos ||
               name.find(".ffn_up.") != std::string::npos ||
               name.find(".ffn_down.") != std::string::npos) {
      s.dense_ffn_params += n;
      b.dense_ffn += size;
    } else {
      s.attention_params += n;  // attention projections and every norm
      b.attention += size;
    }
  }
  s.moe_layers = static_cast<std::int64_t>(moe_blocks.size());
  if (s.experts > 0 && s.moe_layers > 0) {
    s.expert_params = routed / (s.experts * s.moe_layers);
    b.expert = routed_bytes / static_cast<std::uint64_t>(s.experts * s.moe_layers);
  }

  const std::int64_t kv_lora = meta_int(f, arch + ".attention.kv_lora_rank", 0);
  const std::int64_t heads = meta_int(f, arch + ".attention.head_count", 1);
  const std::int64_t key =
      meta_int(f, arch + ".attention.key_length", s.hidden / std::max<std::int64_t>(1, heads));
  const std::int64_t value = meta_int(f, arch + ".attention.value_length", key);
  s.attention_width = heads * std::max(key, value);
  if (kv_lora > 0) {
    s.mla = true;
    const std::int64_t rope = meta_int(f, arch + ".rope.dimension_count", 64);
    s.kv_elements_per_token = s.layers * (kv_lora + rope);
    s.kv_key_width = kv_lora + rope;
    s.kv_value_width = kv_lora;
    s.attention_extra_width = meta_int(f, arch + ".attention.q_lora_rank", 0);
  } else {
    const std::int64_t kv_heads = meta_int(f, arch + ".attention.head_count_kv", heads);
    s.kv_elements_per_token = s.layers * kv_heads * (key + value);
    s.kv_key_width = key;
    s.kv_value_width = value;
  }
  // The positions it takes: its context length, stretched by YaRN or linear RoPE scaling.
  const model::GgufValue* scaling = f.find(arch + ".rope.scaling.type");
  const std::string scaling_type = scaling != nullptr && scaling->type() == model::GgufType::kString
                                       ? scaling->as_string()
                                       : std::string("none");
  const model::GgufValue* factor = f.find(arch + ".rope.scaling.factor");
  s.max_positions = model::position_limit(
      meta_int(f, arch + ".context_length", 0),
      scaling_type == "yarn"     ? model::RopeType::Yarn
      : scaling_type == "linear" ? model::RopeType::Linear
                                 : model::RopeType::Default,
      factor != nullptr && (factor->is_float() || factor->is_integer()) ? factor->as_float() : 1.0,
      meta_int(f, arch + ".rope.scaling.original_context_length", 0));
  return s;
}

}  // namespace tandem::plan
