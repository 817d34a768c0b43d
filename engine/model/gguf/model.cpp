#include "engine/model/gguf/model.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "engine/model/checkpoint.h"
#include "engine/model/ggml_type.h"
#include "engine/model/model_error.h"

namespace tandem::model {
namespace {

using nlohmann::json;

// The architectures read from GGUF, with the Hugging Face class each becomes (llama with
// experts becomes Mixtral, as llama.cpp's converter writes Mixtral).
struct GgufArchitecture {
  const char* name;
  const char* dense;
  const char* with_experts;  // nullptr: the architecture has none, or always has them
};
constexpr GgufArchitecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", "MixtralForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM", nullptr},
    {"qwen3moe", "Qwen3MoeForCausalLM", nullptr},
    {"deepseek2", "DeepseekV3ForCausalLM", nullptr},
    {"glm4moe", "Glm4MoeForCausalLM", nullptr},
};

const GgufArchitecture* find_architecture(const std::string& name) {
  for (const GgufArchitecture& a : kArchitectures) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// Reads metadata values of one architecture ("qwen3moe.block_count"), every failure a
// sentence naming the file and the key.
class Metadata {
 public:
  Metadata(const GgufSet& set, std::string arch) : set_(set), arch_(std::move(arch)) {}

  const std::string& path() const { return set_.path(); }
  std::string key(const char* suffix) const { return arch_ + "." + suffix; }
  const GgufValue* find(const std::string& key) const { return set_.find(key); }

  [[noreturn]] void missing(const std::string& key) const {
    throw ModelError(path() + ": the metadata key " + key +
                     " is missing, and Tandem needs it to run the model; the file was written by "
                     "a converter that leaves it out, or is damaged. Download the file again, or "
                     "one converted by a current llama.cpp.");
  }
  // A whole number >= 0; a per-layer array is accepted when every layer has the same value.
  std::optional<std::int64_t> whole(const std::string& key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      if (v->type() == GgufType::kArray) {
        const GgufArray& a = v->as_array();
        if (a.elements.empty()) throw std::runtime_error("empty");
        const std::int64_t first = a.elements.front().as_int();
        for (const GgufValue& e : a.elements) {
          if (e.as_int() != first) {
            throw ModelError(path() + ": " + key +
                             " differs between layers, which Tandem does not run for " + arch_ +
                             ".");
          }
        }
        return checked(key, first);
      }
      return checked(key, v->as_int());
    } catch (const ModelError&) {
      throw;
    } catch (const std::exception&) {
      throw ModelError(path() + ": the metadata key " + key + " should be a whole number but is " +
                       gguf_type_name(v->type()) + "; the file is damaged.");
    }
  }
  std::int64_t required_whole(const std::string& key) const {
    const auto v = whole(key);
    if (!v) missing(key);
    return *v;
  }
  std::optional<double> number(const std::string& key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      return v->as_float();
    } catch (const std::exception&) {
      throw ModelError(path() + ": the metadata key " + key + " should be a number but is " +
                       gguf_type_name(v->type()) + "; the file is damaged.");
    }
  }
  double required_number(const std::string& key) const {
    const auto v = number(key);
    if (!v) missing(key);
    return *v;
  }
  std::optional<std::string> text(const std::string& key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      return v->as_string();
    } catch (const std::exception&) {
      throw ModelError(path() + ": the metadata key " + key + " should be a string but is " +
                       gguf_type_name(v->type()) + "; the file is damaged.");
    }
  }
  std::optional<bool> flag(const std::string& key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return std::nullopt;
    try {
      return v->as_bool();
    } catch (const std::exception&) {
      throw ModelError(path() + ": the metadata key " + key + " should be true or false but is " +
                       gguf_type_name(v->type()) + "; the file is damaged.");
    }
  }

 private:
  std::int64_t checked(const std::string& key, std::int64_t v) const {
    if (v < 0) throw ModelError(path() + ": the metadata key " + key + " is negative.");
    return v;
  }
  const GgufSet& set_;
  std::string arch_;
};

std::string architecture_of(const GgufSet& set) {
  const GgufValue* v = set.find("general.architecture");
  if (v == nullptr) {
    throw ModelError(set.path() +
                     ": the metadata key general.architecture is missing, so the model's type "
                     "is unknown; the file is damaged or is not a model.");
  }
  if (v->type() != GgufType::kString)
    throw ModelError(set.path() +
                     ": general.architecture should be a string; the file is damaged.");
  return v->as_string();
}

// The names in a converted folder's base.gguf of the source's tensors it does not hold.
std::vector<std::string> omitted_tensors(const GgufSet& set) {
  std::vector<std::string> names;
  const GgufValue* v = set.find(kGgufOmittedTensorsKey);
  if (v == nullptr) return names;
  try {
    for (const GgufValue& e : v->as_array().elements) names.push_back(e.as_string());
  } catch (const std::exception&) {
    throw ModelError(set.path() + ": " + kGgufOmittedTensorsKey +
                     " should be a list of tensor names; the converted folder is damaged, convert "
                     "the model again.");
  }
  return names;
}

// Whether the model has tensor `name`: in the file, or (a converted folder) in its source.
bool has_tensor(const GgufSet& set, const std::string& name) {
  if (set.tensors().count(name) != 0) return true;
  const std::vector<std::string> omitted = omitted_tensors(set);
  return std::find(omitted.begin(), omitted.end(), name) != omitted.end();
}

// The rows of a 2-D tensor as stored (ggml's dims are innermost first), or -1.
std::int64_t stored_rows(const GgufSet& set, const std::string& name) {
  const auto it = set.tensors().find(name);
  if (it == set.tensors().end() || it->second.info->dims.size() != 2) return -1;
  return static_cast<std::int64_t>(it->second.info->dims[1]);
}

// The token ids (one or several keys) that end a reply.
void read_special_tokens(const Metadata& m, json& config) {
  json eos = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (const auto id = m.whole(key)) {
      if (std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
    }
  }
  if (!eos.empty()) config["eos_token_id"] = eos;
  if (const auto bos = m.whole("tokenizer.ggml.bos_token_id")) config["bos_token_id"] = *bos;
}

void read_rope_scaling(const Metadata& m, json& config) {
  std::string type = m.text(m.key("rope.scaling.type")).value_or("");
  std::optional<double> factor = m.number(m.key("rope.scaling.factor"));
  if (type.empty()) {
    // Files from before rope.scaling.type said linear scaling this way.
    if (const auto linear = m.number(m.key("rope.scale_linear")); linear && *linear != 1.0) {
      type = "linear";
      factor = linear;
    } else {
      type = "none";
    }
  }
  if (type == "none") return;
  if (type != "linear" && type != "yarn") {
    throw ModelError(m.path() + ": " + m.key("rope.scaling.type") + " is \"" + type +
                     "\"; Tandem reads none, linear and yarn.");
  }
  if (!factor) m.missing(m.key("rope.scaling.factor"));
  json scaling = {{"rope_type", type}, {"factor", *factor}};
  if (type == "yarn") {
    scaling["original_max_position_embeddings"] =
        m.required_whole(m.key("rope.scaling.original_context_length"));
    if (const auto v = m.number(m.key("rope.scaling.yarn_beta_fast"))) scaling["beta_fast"] = *v;
    if (const auto v = m.number(m.key("rope.scaling.yarn_beta_slow"))) scaling["beta_slow"] = *v;
  }
  config["rope_scaling"] = scaling;
}

// Whether layer 0 holds `tensor` ("attn_q_norm.weight"): llama.cpp reads some features from
// the tensors a file has, not from a key.
bool layer_has(const GgufSet& set, const char* tensor) {
  return has_tensor(set, std::string("blk.0.") + tensor);
}

// The router of DeepSeek-V3 and GLM-4.5: sigmoid scores with a correction bias, experts in
// groups, a scaled sum. llama.cpp groups experts only where the file says so. DeepSeek-V2
// reads the same keys and changes the scoring.
void read_sigmoid_router(const Metadata& m, json& c) {
  c["n_routed_experts"] = m.required_whole(m.key("expert_count"));
  c["num_experts_per_tok"] = m.required_whole(m.key("expert_used_count"));
  c["moe_intermediate_size"] = m.required_whole(m.key("expert_feed_forward_length"));
  c["n_shared_experts"] = m.required_whole(m.key("expert_shared_count"));
  c["routed_scaling_factor"] = m.required_number(m.key("expert_weights_scale"));
  // Absent, llama.cpp does not renormalise the chosen experts' weights.
  c["norm_topk_prob"] = m.flag(m.key("expert_weights_norm")).value_or(false);
  c["n_group"] = m.whole(m.key("expert_group_count")).value_or(1);
  c["topk_group"] = m.whole(m.key("expert_group_used_count")).value_or(1);
  c["scoring_func"] = "sigmoid";
}

// llama.cpp's expert_gating_func values.
constexpr std::int64_t kGatingSoftmax = 1, kGatingSigmoid = 2;

// DeepSeek-V3, Kimi-K2 and their kin (multi-head latent attention).
void deepseek2_config(const Metadata& m, std::int64_t layers, json& c) {
  const std::string& path = m.path();
  std::int64_t gating = m.whole(m.key("expert_gating_func")).value_or(0);
  // Files of DeepSeek-V2 and V2.5 predate the key (softmax); so do some of GLM-4.7-Flash,
  // which llama.cpp tells by its 47 layers (48 with the prediction layer): sigmoid.
  if (gating == 0) gating = layers == 47 || layers == 48 ? kGatingSigmoid : kGatingSoftmax;
  if (gating == kGatingSoftmax) {
    // DeepSeek-V2, V2-Lite, V2.5: softmax scores, no correction bias. Conversions do not
    // write expert groups for them (llama.cpp then chooses among all experts, as V2-Lite
    // does); where a file has groups, they are DeepSeek-V2's: a group scores its best expert.
    read_sigmoid_router(m, c);
    c["architectures"] = json::array({"DeepseekV2ForCausalLM"});
    c["scoring_func"] = "softmax";
    c["topk_method"] = c["n_group"].get<std::int64_t>() > 1 ? "group_limited_greedy" : "greedy";
  } else if (gating == kGatingSigmoid) {
    read_sigmoid_router(m, c);
  } else {
    throw ModelError(path + ": its experts are chosen by gating function " +
                     std::to_string(gating) +
                     ", which Tandem does not know; DeepSeek-V2 uses softmax (1), V3, R1 and "
                     "Kimi-K2 sigmoid (2).");
  }
  c["intermediate_size"] = m.required_whole(m.key("feed_forward_length"));
  c["first_k_dense_replace"] = m.required_whole(m.key("leading_dense_block_count"));
  const std::int64_t latent = m.required_whole(m.key("attention.kv_lora_rank"));
  const std::int64_t rope = m.required_whole(m.key("rope.dimension_count"));
  // Current conversions describe the attention as the multi-query attention it is computed
  // as (one head of latent + rotary key, values the latent), and give the per-head sizes in
  // the _mla keys; older ones give the per-head sizes as key_length and value_length.
  const std::int64_t heads = c["num_attention_heads"];
  const std::int64_t kv_heads = m.whole(m.key("attention.head_count_kv")).value_or(heads);
  const bool mqa = kv_heads == 1 && heads > 1;
  const std::string k_key = m.key(mqa ? "attention.key_length_mla" : "attention.key_length");
  const std::string v_key = m.key(mqa ? "attention.value_length_mla" : "attention.value_length");
  const std::int64_t qk = m.required_whole(k_key);
  const std::int64_t v = m.required_whole(v_key);
  if (rope == 0 || rope >= qk || latent == 0 || v == 0) {
    throw ModelError(path + ": " + m.key("rope.dimension_count") + " (" + std::to_string(rope) +
                     ") must be above zero and below " + k_key + " (" + std::to_string(qk) +
                     "), and " + m.key("attention.kv_lora_rank") + " and " + v_key +
                     " above zero; the file is damaged.");
  }
  c["num_key_value_heads"] = heads;
  c["kv_lora_rank"] = latent;
  c["q_lora_rank"] = nullptr;
  if (const auto q = m.whole(m.key("attention.q_lora_rank")); q && *q > 0) c["q_lora_rank"] = *q;
  c["qk_rope_head_dim"] = rope;
  c["qk_nope_head_dim"] = qk - rope;
  c["v_head_dim"] = v;
  c["head_dim"] = rope;
  // ggml turns adjacent pairs for this architecture, on the weights as Hugging Face stores
  // them: the interleaved rotary embedding of DeepSeek's own code.
  c["rope_interleave"] = true;
  if (c.contains("rope_scaling") && c["rope_scaling"]["rope_type"] == "yarn") {
    // llama.cpp scales cos and sin back to magnitude 1 and the softmax by the square of
    // 1 + log_multiplier ln(factor): DeepSeek's YaRN with mscale equal to mscale_all_dim
    // (as every release has it), the multiplier being 0.1 mscale_all_dim.
    const double mscale = m.number(m.key("rope.scaling.yarn_log_multiplier")).value_or(0.0) / 0.1;
    c["rope_scaling"]["mscale"] = mscale;
    c["rope_scaling"]["mscale_all_dim"] = mscale;
    c["rope_scaling"]["attention_factor"] = 1.0;
  }
}

// Grouped-query attention, as the llama, qwen3, qwen3moe and glm4moe files describe it.
void attention_config(const Metadata& m, const std::string& arch, std::int64_t hidden,
                      std::int64_t heads, json& c) {
  const std::string& path = m.path();
  const std::int64_t kv_heads = m.whole(m.key("attention.head_count_kv")).value_or(heads);
  const std::int64_t head_dim = m.whole(m.key("attention.key_length")).value_or(hidden / heads);
  const std::int64_t value_dim = m.whole(m.key("attention.value_length")).value_or(head_dim);
  if (value_dim != head_dim) {
    throw ModelError(path + ": its keys and values differ in length (" +
                     m.key("attention.key_length") + " " + std::to_string(head_dim) + ", " +
                     m.key("attention.value_length") + " " + std::to_string(value_dim) +
                     "), which Tandem does not run for " + arch + ".");
  }
  const auto rotated = m.whole(m.key("rope.dimension_count"));
  if (arch == "glm4moe") {
    // GLM turns the first part of each head (half, in every release).
    if (rotated && (*rotated == 0 || *rotated > head_dim || *rotated % 2 != 0)) {
      throw ModelError(path + ": " + m.key("rope.dimension_count") + " is " +
                       std::to_string(*rotated) + ", which is no even part of its " +
                       std::to_string(head_dim) + "-dimension heads; the file is damaged.");
    }
    c["partial_rotary_factor"] =
        static_cast<double>(rotated.value_or(head_dim)) / static_cast<double>(head_dim);
  } else if (rotated && *rotated != head_dim) {
    throw ModelError(path + ": " + m.key("rope.dimension_count") + " is " +
                     std::to_string(*rotated) + ", so rotary embeddings turn only part of each " +
                     std::to_string(head_dim) + "-dimension head, which Tandem does not run for " +
                     arch + ".");
  }
  c["num_key_value_heads"] = kv_heads;
  c["head_dim"] = head_dim;
}

// The Hugging Face config.json the metadata amounts to, so that one parser checks both.
json config_of(const GgufSet& set, const std::string& arch, const GgufArchitecture& a) {
  const Metadata m(set, arch);
  json c;
  const std::int64_t hidden = m.required_whole(m.key("embedding_length"));
  const std::int64_t blocks = m.required_whole(m.key("block_count"));
  const std::int64_t heads = m.required_whole(m.key("attention.head_count"));
  if (hidden == 0 || blocks == 0 || heads == 0) {
    throw ModelError(set.path() + ": " + m.key("embedding_length") + ", " + m.key("block_count") +
                     " and " + m.key("attention.head_count") + " must be above zero.");
  }
  // Every layer holds tensors of its own.
  const std::uint64_t tensors = set.tensors().size() + omitted_tensors(set).size();
  if (static_cast<std::uint64_t>(blocks) > tensors) {
    throw ModelError(set.path() + ": " + m.key("block_count") + " says " + std::to_string(blocks) +
                     " layers but the file holds only " + std::to_string(tensors) +
                     " tensors; the file is damaged.");
  }
  // GLM-4.5's (and others') next-token-prediction layers are counted in block_count and
  // stored after the others; Tandem does not run them.
  const std::int64_t predict = m.whole(m.key("nextn_predict_layers")).value_or(0);
  if (predict >= blocks) {
    throw ModelError(set.path() + ": " + m.key("nextn_predict_layers") + " (" +
                     std::to_string(predict) + ") leaves no layers of the " +
                     std::to_string(blocks) + " in " + m.key("block_count") +
                     "; the file is damaged.");
  }
  const std::int64_t layers = blocks - predict;
  if (has_tensor(set, "rope_freqs.weight")) {
    throw ModelError(set.path() +
                     ": it scales its rotary frequencies with a stored table (rope_freqs.weight, "
                     "as Llama 3.1 and later are converted), which Tandem does not read from GGUF "
                     "yet; run the model's Hugging Face folder instead.");
  }
  const std::int64_t vocab = stored_rows(set, "token_embd.weight");
  if (vocab <= 0) {
    throw ModelError(set.path() +
                     ": the token embedding (token_embd.weight) is missing or not a matrix; the "
                     "file is damaged or incomplete.");
  }
  if (const auto said = m.whole(m.key("vocab_size")); said && *said != vocab) {
    throw ModelError(set.path() + ": " + m.key("vocab_size") + " says " + std::to_string(*said) +
                     " tokens but token_embd.weight has " + std::to_string(vocab) +
                     " rows; the file is damaged.");
  }
  const std::int64_t experts = m.whole(m.key("expert_count")).value_or(0);
  const bool moe = a.with_experts != nullptr && experts > 0;
  c["architectures"] = json::array({moe ? a.with_experts : a.dense});
  c["vocab_size"] = vocab;
  c["hidden_size"] = hidden;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["rms_norm_eps"] = m.required_number(m.key("attention.layer_norm_rms_epsilon"));
  c["max_position_embeddings"] = m.required_whole(m.key("context_length"));
  c["rope_theta"] = m.number(m.key("rope.freq_base")).value_or(10000.0);
  c["tie_word_embeddings"] = !has_tensor(set, "output.weight");
  read_rope_scaling(m, c);
  if (arch == "deepseek2") {
    deepseek2_config(m, blocks, c);
  } else {
    attention_config(m, arch, hidden, heads, c);
  }
  if (arch == "qwen3moe") {
    c["num_experts"] = m.required_whole(m.key("expert_count"));
    c["num_experts_per_tok"] = m.required_whole(m.key("expert_used_count"));
    c["moe_intermediate_size"] = m.required_whole(m.key("expert_feed_forward_length"));
    if (const auto dense = m.whole(m.key("feed_forward_length"))) c["intermediate_size"] = *dense;
    // llama.cpp renormalises Qwen3-MoE's top-k weights unless the file says otherwise, as
    // every released Qwen3-MoE config does.
    c["norm_topk_prob"] = m.flag(m.key("expert_weights_norm")).value_or(true);
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
  } else if (arch == "glm4moe") {
    if (const auto gating = m.whole(m.key("expert_gating_func"));
        gating && *gating != kGatingSigmoid) {
      throw ModelError(set.path() + ": " + m.key("expert_gating_func") + " is " +
                       std::to_string(*gating) +
                       ", but GLM-4.5's experts are chosen by sigmoid scores (2); the file is "
                       "damaged or was written wrongly.");
    }
    read_sigmoid_router(m, c);
    c["intermediate_size"] = m.required_whole(m.key("feed_forward_length"));
    c["first_k_dense_replace"] = m.whole(m.key("leading_dense_block_count")).value_or(0);
    // As llama.cpp does, per-head q/k norms and q/k/v biases where the file has them.
    c["use_qk_norm"] = layer_has(set, "attn_q_norm.weight");
    c["attention_bias"] = layer_has(set, "attn_q.bias");
  } else if (moe) {  // Mixtral
    c["num_local_experts"] = experts;
    c["num_experts_per_tok"] = m.required_whole(m.key("expert_used_count"));
    c["intermediate_size"] = m.required_whole(m.key("feed_forward_length"));
  } else if (arch != "deepseek2") {
    c["intermediate_size"] = m.required_whole(m.key("feed_forward_length"));
  }
  read_special_tokens(m, c);
  return c;
}

// How a GGUF tensor name maps to the Hugging Face names bind_weights reads.
struct LayerName {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after "model.layers.N."
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},  // GLM-4.5's name
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    // Multi-head latent attention.
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
    {"attn_k_b.weight", "self_attn.k_b_proj.weight"},  // kv_b's key part, split per head
    {"attn_v_b.weight", "self_attn.v_b_proj.weight"},  // and its value part
    // The shared experts and the router's correction bias (DeepSeek-V3, GLM-4.5).
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
};
constexpr LayerName kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// The three expert matrices: GGUF's fused tensor (or a per-expert one, as early Mixtral
// files store them) and the Hugging Face name of one expert's part.
struct ExpertPart {
  const char* fused;    // "ffn_gate_exps.weight"
  const char* single;   // "ffn_gate" (then ".E.weight")
  const char* hf;       // Qwen3-MoE's "gate_proj"
  const char* mixtral;  // Mixtral's "w1"
};
constexpr ExpertPart kExpertParts[] = {
    {"ffn_gate_exps.weight", "ffn_gate", "gate_proj", "w1"},
    {"ffn_up_exps.weight", "ffn_up", "up_proj", "w3"},
    {"ffn_down_exps.weight", "ffn_down", "down_proj", "w2"},
};

std::string ggml_type_phrase(std::uint32_t type) {
  const auto layout = ggml_type_layout(type);
  return layout ? std::string(layout->name) : "ggml type " + std::to_string(type);
}

std::string computable_types() {
  std::string out;
  for (std::uint32_t t = 0; t < 64; ++t) {
    kernels::DType d;
    if (!kernels::dtype_from_ggml_type(t, d)) continue;
    out += (out.empty() ? "" : ", ") + std::string(kernels::dtype_name(d));
  }
  return out;
}

// llama.cpp's file types (general.file_type), by number, as its quantiser names them.
constexpr const char* kFileTypes[] = {
    "F32",   "F16",     "Q4_0",   "Q4_1",   nullptr,  nullptr,   nullptr,  "Q8_0",   "Q5_0",
    "Q5_1",  "Q2_K",    "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",  "Q4_K_M", "Q5_K_S", "Q5_K_M",
    "Q6_K",  "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS", "IQ3_XXS", "IQ1_S",  "IQ4_NL", "IQ3_S",
    "IQ3_M", "IQ2_S",   "IQ2_M",  "IQ4_XS", "IQ1_M",  "BF16",
};

}  // namespace

GgufSummary summarize_gguf(const std::string& path) {
  const GgufSet set(path);
  GgufSummary s;
  for (std::size_t i = 0; i < set.part_count(); ++i) s.parts.push_back(set.part(i).path());
  s.bytes = set.file_bytes();
  const std::string arch = architecture_of(set);
  s.family = arch;
  if (const GgufArchitecture* a = find_architecture(arch)) {
    const GgufValue* experts = set.find(arch + ".expert_count");
    const bool with_experts = a->with_experts != nullptr && experts != nullptr &&
                              experts->is_integer() && experts->as_int() > 0;
    s.family = architecture_display_name(with_experts ? a->with_experts : a->dense);
  }
  const GgufValue* type = set.find("general.file_type");
  if (type != nullptr && type->is_integer() && type->as_int() >= 0 &&
      type->as_int() < static_cast<std::int64_t>(std::size(kFileTypes)) &&
      kFileTypes[type->as_int()] != nullptr) {
    s.format = kFileTypes[type->as_int()];
  } else {
    std::map<std::uint32_t, std::uint64_t> by_type;
    for (const auto& [name, t] : set.tensors()) by_type[t.info->ggml_type] += t.info->size_bytes;
    std::uint64_t most = 0;
    for (const auto& [t, bytes] : by_type) {
      if (bytes > most) {
        most = bytes;
        s.format = ggml_type_phrase(t);
      }
    }
  }
  return s;
}

bool is_listed_gguf(const std::string& path) {
  if (!is_gguf_path(path)) return false;
  const auto split = parse_gguf_split_name(path);
  return !split || split->number == 1;
}

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

std::string gguf_supported_architectures() {
  std::string out;
  for (const GgufArchitecture& a : kArchitectures)
    out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

nlohmann::json gguf_model_config(const GgufSet& set) {
  const std::string arch = architecture_of(set);
  const GgufArchitecture* a = find_architecture(arch);
  if (a == nullptr) {
    throw ModelError(set.path() + ": its architecture is " + arch +
                     ", which Tandem does not run from GGUF yet; it runs " +
                     gguf_supported_architectures() + ".");
  }
  return config_of(set, arch, *a);
}

ModelSpec gguf_model_spec(const GgufSet& set) {
  const std::string arch = architecture_of(set);
  ModelSpec spec = parse_model_spec(gguf_model_config(set), set.path());
  // llama.cpp's converter reorders Llama's query and key rows so that rotary embeddings
  // turn adjacent pairs (ggml's "normal" mode); Qwen3 keeps the two halves ("neox").
  if (arch == "llama") spec.rope.interleaved = true;
  return spec;
}

Checkpoint::Checkpoint(std::unique_ptr<GgufSet> set, const ModelSpec& spec)
    : folder_(set->path()), gguf_(std::move(set)) {
  const bool mixtral = spec.family == Family::Mixtral;
  const GgufSet& g = *gguf_;

  // Adds the tensor `hf` for `stored_name`'s bytes from `offset`, in the tensor's format.
  auto add = [&](const std::string& hf, const std::string& stored_name, const GgufSet::Tensor& t,
                 std::vector<std::int64_t> shape, std::uint64_t offset) {
    kernels::DType dtype;
    if (!kernels::dtype_from_ggml_type(t.info->ggml_type, dtype)) {
      throw ModelError(t.file->path() + ": tensor " + t.info->name + " is stored as " +
                       ggml_type_phrase(t.info->ggml_type) +
                       ", which Tandem does not compute with yet; it reads " + computable_types() +
                       ". Choose another quantisation of this model.");
    }
    // A row is whole blocks (ggml requires it); any other file would be read past its rows.
    const kernels::DTypeBlock block = kernels::dtype_block(dtype);
    if (shape.empty() || shape.back() % block.elements != 0) {
      throw ModelError(t.file->path() + ": tensor " + t.info->name + " has rows of " +
                       std::to_string(shape.empty() ? 0 : shape.back()) + " weights, not whole " +
                       ggml_type_phrase(t.info->ggml_type) + " blocks of " +
                       std::to_string(block.elements) + "; the file is damaged.");
    }
    auto info = std::make_unique<TensorInfo>();
    info->name = hf;
    info->dtype = dtype;
    info->shape = std::move(shape);
    const std::uint64_t bytes = kernels::dtype_bytes(dtype, info->elements());
    const std::span<const std::byte> data = g.tensor_data(t);
    if (offset + bytes > data.size()) {
      throw ModelError(t.file->path() + ": tensor " + t.info->name +
                       " is shorter than its shape says; the file is damaged.");
    }
    info->begin = t.file->data_offset_bytes() + t.info->offset_bytes + offset;
    info->end = info->begin + bytes;
    const auto [it, inserted] =
        index_.emplace(hf, TensorRef{&t.file->path(), info.get(), data.data() + offset});
    if (!inserted) {
      throw ModelError(folder_ + ": tensor " + stored_name + " appears twice (as " + hf +
                       "); the file is damaged.");
    }
    gguf_infos_.push_back(std::move(info));
    gguf_tensors_.emplace(hf, stored_name);
  };
  auto shape_of = [](const GgufTensorInfo& info) {
    std::vector<std::int64_t> shape;
    for (auto it = info.dims.rbegin(); it != info.dims.rend(); ++it)
      shape.push_back(static_cast<std::int64_t>(*it));
    return shape;
  };
  auto expert_name = [&](std::int64_t layer, std::int64_t e, const ExpertPart& part) {
    return "model.layers." + std::to_string(layer) + (mixtral ? ".block_sparse_moe" : ".mlp") +
           ".experts." + std::to_string(e) + "." + (mixtral ? part.mixtral : part.hf) + ".weight";
  };

  // The stored names of everything bind_weights may ask for, so that a missing tensor is
  // named as the file would name it.
  for (const LayerName& n : kGlobalNames) stored_names_[n.hf] = n.gguf;
  for (std::int64_t l = 0; l < spec.num_layers; ++l) {
    const std::string blk = "blk." + std::to_string(l) + ".";
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    for (const LayerName& n : kLayerNames) {
      // The first name for a tensor is the one messages use, except where GLM-4.5 has its own.
      if (stored_names_.count(hf + n.hf) != 0 &&
          !(spec.family == Family::Glm4Moe &&
            std::strcmp(n.gguf, "post_attention_norm.weight") == 0))
        continue;
      stored_names_[hf + n.hf] = blk + n.gguf;
    }
    stored_names_[hf + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight")] =
        blk + "ffn_gate_inp.weight";
    for (std::int64_t e = 0; e < spec.num_experts; ++e) {
      for (const ExpertPart& part : kExpertParts) {
        stored_names_[expert_name(l, e, part)] =
            blk + part.fused + " (expert " + std::to_string(e) + ")";
      }
    }
  }

  for (const auto& [name, t] : g.tensors()) {
    const std::vector<std::int64_t> shape = shape_of(*t.info);
    bool mapped = false;
    for (const LayerName& n : kGlobalNames) {
      if (name == n.gguf) {
        add(n.hf, name, t, shape, 0);
        mapped = true;
      }
    }
    if (mapped || name.rfind("blk.", 0) != 0) continue;
    const std::size_t dot = name.find('.', 4);
    if (dot == std::string::npos) continue;
    std::int64_t layer = -1;
    try {
      layer = std::stoll(name.substr(4, dot - 4));
    } catch (const std::exception&) {
      continue;
    }
    if (layer < 0 || layer >= spec.num_layers) continue;  // e.g. a next-token-prediction layer
    const std::string rest = name.substr(dot + 1);
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    for (const LayerName& n : kLayerNames) {
      if (rest != n.gguf) continue;
      // attn_k_b and attn_v_b are [heads][rows][cols] in current conversions: as matrices,
      // the heads' rows one after the other.
      std::vector<std::int64_t> rows_cols = shape;
      if (rows_cols.size() == 3) rows_cols = {shape[0] * shape[1], shape[2]};
      add(hf + n.hf, name, t, rows_cols, 0);
    }
    if (rest == "ffn_gate_inp.weight") {
      add(hf + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight"), name, t, shape, 0);
    }
    for (const ExpertPart& part : kExpertParts) {
      if (rest == part.fused) {
        // [experts, rows, cols]: expert e's matrix is the e-th whole slab.
        if (shape.size() != 3 || shape[0] != spec.num_experts) {
          throw ModelError(t.file->path() + ": tensor " + name + " has shape " +
                           shape_string(shape) + " but the metadata says " +
                           std::to_string(spec.num_experts) +
                           " experts; the file is damaged or was written wrongly.");
        }
        kernels::DType dtype;
        const std::uint64_t slab = kernels::dtype_from_ggml_type(t.info->ggml_type, dtype)
                                       ? kernels::dtype_bytes(dtype, shape[1] * shape[2])
                                       : 0;
        for (std::int64_t e = 0; e < shape[0]; ++e)
          add(expert_name(layer, e, part), name, t, {shape[1], shape[2]},
              static_cast<std::uint64_t>(e) * slab);
      } else if (rest.rfind(std::string(part.single) + ".", 0) == 0 &&
                 rest.size() > std::strlen(part.single) + 8 &&
                 rest.compare(rest.size() - 7, 7, ".weight") == 0) {
        // Early Mixtral files: blk.N.ffn_gate.E.weight, one tensor per expert.
        const std::string number =
            rest.substr(std::strlen(part.single) + 1, rest.size() - std::strlen(part.single) - 8);
        if (number.empty() || !std::all_of(number.begin(), number.end(),
                                           [](char ch) { return ch >= '0' && ch <= '9'; }))
          continue;
        add(expert_name(layer, std::stoll(number), part), name, t, shape, 0);
      }
    }
  }
}

}  // namespace tandem::model
