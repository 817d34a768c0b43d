#include "engine/model/model_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <utility>

#include "engine/model/model_error.h"

namespace tandem::model {
namespace {

using nlohmann::json;

struct ArchitectureName {
  const char* name;
  Family family;
  const char* shown;  // as people call the family
};
constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", Family::Llama, "Llama"},
    {"Qwen3ForCausalLM", Family::Qwen3, "Qwen3"},
    {"Qwen3MoeForCausalLM", Family::Qwen3Moe, "Qwen3-MoE"},
    {"MixtralForCausalLM", Family::Mixtral, "Mixtral"},
    {"DeepseekV2ForCausalLM", Family::DeepseekV3, "DeepSeek-V2"},
    {"DeepseekV3ForCausalLM", Family::DeepseekV3, "DeepSeek-V3"},
    {"KimiK2ForCausalLM", Family::DeepseekV3, "Kimi-K2"},
    {"Glm4MoeForCausalLM", Family::Glm4Moe, "GLM-4.5"},
    {"GptOssForCausalLM", Family::GptOss, "gpt-oss"},
    {"Qwen3NextForCausalLM", Family::Qwen3Next, "Qwen3-Next"},
};

class ConfigReader {
 public:
  ConfigReader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}

  std::int64_t integer(const char* key) const {
    if (!j_.contains(key))
      throw ModelError(source_ + ": the required setting \"" + key + "\" is missing.");
    return positive(key, j_[key]);
  }
  std::int64_t integer(const char* key, std::int64_t fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    return positive(key, j_[key]);
  }
  double number(const char* key) const {
    if (!j_.contains(key) || j_[key].is_null())
      throw ModelError(source_ + ": the required setting \"" + key + "\" is missing.");
    return number(key, 0.0);
  }
  bool has(const char* key) const { return j_.contains(key); }
  double number(const char* key, double fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_number()) throw ModelError(source_ + ": \"" + key + "\" must be a number.");
    return j_[key].get<double>();
  }
  bool boolean(const char* key) const {
    if (!j_.contains(key) || j_[key].is_null())
      throw ModelError(source_ + ": the required setting \"" + key + "\" is missing.");
    return boolean(key, false);
  }
  bool boolean(const char* key, bool fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_boolean())
      throw ModelError(source_ + ": \"" + key + "\" must be true or false.");
    return j_[key].get<bool>();
  }
  std::string string(const char* key) const {
    if (!j_.contains(key) || j_[key].is_null())
      throw ModelError(source_ + ": the required setting \"" + key + "\" is missing.");
    return string(key, "");
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!j_.contains(key) || j_[key].is_null()) return fallback;
    if (!j_[key].is_string()) throw ModelError(source_ + ": \"" + key + "\" must be a string.");
    return j_[key].get<std::string>();
  }
  const json& raw() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  std::int64_t positive(const char* key, const json& v) const {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) {
      throw ModelError(source_ + ": \"" + key + "\" must be a non-negative whole number, not " +
                       v.dump() + ".");
    }
    return v.get<std::int64_t>();
  }
  const json& j_;
  std::string source_;
};

std::vector<std::int32_t> token_ids(const json& v) {
  std::vector<std::int32_t> ids;
  if (v.is_number_integer()) ids.push_back(v.get<std::int32_t>());
  if (v.is_array()) {
    for (const auto& e : v) {
      if (e.is_number_integer()) ids.push_back(e.get<std::int32_t>());
    }
  }
  return ids;
}

// RoPE as either transformers spells it: 4.x writes "rope_theta" and "rope_scaling" at the top
// level, 5.x one "rope_parameters" object holding the base and the scaling together. The base
// matters (every position depends on it) and must be there in one spelling.
void read_rope(const ConfigReader& c, ModelSpec& s) {
  const json& raw = c.raw();
  const bool v5 = raw.contains("rope_parameters") && !raw["rope_parameters"].is_null();
  if (v5 && !raw["rope_parameters"].is_object())
    throw ModelError(c.source() + ": \"rope_parameters\" must be an object.");
  if (v5 && raw.contains("rope_theta") && !raw["rope_theta"].is_null() &&
      raw["rope_parameters"].contains("rope_theta") &&
      raw["rope_theta"] != raw["rope_parameters"]["rope_theta"]) {
    throw ModelError(c.source() +
                     ": \"rope_theta\" and \"rope_parameters\".\"rope_theta\" disagree; the config "
                     "was edited by hand, so say which base the model uses by keeping one.");
  }
  json params = json::object();
  if (v5) {
    params = raw["rope_parameters"];
    if (!params.contains("rope_theta")) {
      // Per-attention-type parameters ({"full_attention": {...}, ...}) belong to models
      // Tandem does not run yet.
      throw ModelError(c.source() +
                       ": \"rope_parameters\" has no \"rope_theta\"; Tandem reads one set of RoPE "
                       "parameters for all layers.");
    }
  } else {
    if (!raw.contains("rope_theta") || raw["rope_theta"].is_null()) {
      throw ModelError(c.source() +
                       ": the RoPE base is missing: neither \"rope_theta\" (transformers 4) nor "
                       "\"rope_parameters\" (transformers 5) is there.");
    }
    if (raw.contains("rope_scaling") && !raw["rope_scaling"].is_null()) {
      if (!raw["rope_scaling"].is_object())
        throw ModelError(c.source() + ": \"rope_scaling\" must be an object.");
      params = raw["rope_scaling"];
    }
    params["rope_theta"] = raw["rope_theta"];
  }
  const ConfigReader rs(params, c.source() + (v5 ? " (rope_parameters)" : " (rope_scaling)"));
  s.rope.theta = rs.number("rope_theta");
  // The rotated share of each head: top level in transformers 4, in rope_parameters in 5.
  s.rope.partial_rotary_factor =
      v5 ? rs.number("partial_rotary_factor", 0.0) : c.number("partial_rotary_factor", 0.0);
  if (s.rope.theta <= 0) throw ModelError(c.source() + ": the RoPE base must be above zero.");
  const std::string type = rs.string("rope_type", rs.string("type", "default"));
  s.rope.factor = rs.number("factor", 1.0);
  if (type == "default") {
    s.rope.type = RopeType::Default;
  } else if (type == "linear") {
    s.rope.type = RopeType::Linear;
    s.rope.factor = rs.number("factor");
  } else if (type == "yarn") {
    s.rope.type = RopeType::Yarn;
    s.rope.factor = rs.number("factor");
    s.rope.original_max_position =
        rs.integer("original_max_position_embeddings", s.max_position_embeddings);
    s.rope.beta_fast = rs.number("beta_fast", 32.0);
    s.rope.beta_slow = rs.number("beta_slow", 1.0);
    if (s.rope.beta_fast == 0) s.rope.beta_fast = 32.0;
    if (s.rope.beta_slow == 0) s.rope.beta_slow = 1.0;
    s.rope.mscale = rs.number("mscale", 0.0);
    s.rope.mscale_all_dim = rs.number("mscale_all_dim", 0.0);
    s.rope.truncate = rs.boolean("truncate", true);
    auto get_mscale = [](double scale, double m) {
      return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
    };
    if (params.contains("attention_factor") && !params["attention_factor"].is_null()) {
      s.rope.attention_factor = rs.number("attention_factor", 1.0);
    } else if (s.rope.mscale != 0 && s.rope.mscale_all_dim != 0) {
      s.rope.attention_factor = get_mscale(s.rope.factor, s.rope.mscale) /
                                get_mscale(s.rope.factor, s.rope.mscale_all_dim);
    } else {
      s.rope.attention_factor = get_mscale(s.rope.factor, 1.0);
    }
  } else if (type == "llama3") {
    s.rope.type = RopeType::Llama3;
    s.rope.factor = rs.number("factor");
    s.rope.low_freq_factor = rs.number("low_freq_factor");
    s.rope.high_freq_factor = rs.number("high_freq_factor");
    s.rope.original_max_position = rs.integer("original_max_position_embeddings");
  } else {
    throw ModelError(c.source() + ": RoPE scaling \"" + type +
                     "\" is not supported (Tandem supports default, linear, yarn and llama3).");
  }
}

// The rotated share of each head (GLM-4.5, Qwen3-Next), which these families must give.
void read_partial_rotary(const std::string& source, ModelSpec& s) {
  if (s.rope.partial_rotary_factor <= 0 || s.rope.partial_rotary_factor > 1) {
    throw ModelError(source +
                     ": \"partial_rotary_factor\" (in \"rope_parameters\" for configs saved by "
                     "transformers 5) must be given, above 0 and at most 1.");
  }
  const double rotated = static_cast<double>(s.head_dim) * s.rope.partial_rotary_factor;
  s.rotary_dim = static_cast<std::int64_t>(rotated);
  if (static_cast<double>(s.rotary_dim) != rotated || s.rotary_dim % 2 != 0)
    throw ModelError(source + ": head_dim × partial_rotary_factor must be an even whole number.");
}

// Qwen3-MoE's and Qwen3-Next's MoE layers: every decoder_sparse_step-th layer but those in
// mlp_only_layers.
void read_sparse_layers(const ConfigReader& c, const json& config, ModelSpec& s) {
  const std::int64_t step = std::max<std::int64_t>(1, c.integer("decoder_sparse_step", 1));
  std::vector<std::int64_t> dense_layers;
  if (config.contains("mlp_only_layers") && config["mlp_only_layers"].is_array()) {
    for (const auto& l : config["mlp_only_layers"]) dense_layers.push_back(l.get<std::int64_t>());
  }
  for (std::int64_t l = 0; l < s.num_layers; ++l) {
    const bool dense = std::find(dense_layers.begin(), dense_layers.end(), l) != dense_layers.end();
    s.layer_is_moe[l] = !dense && s.num_experts > 0 && (l + 1) % step == 0;
  }
}

// Which layers attend through a sliding window, and how wide, as transformers decides it:
// "layer_types" where the config lists them; otherwise Mixtral slides every layer when
// "sliding_window" is set, Qwen3 the layers from "max_window_layers" on and Qwen3-MoE every
// layer when "use_sliding_window" is true, and gpt-oss alternates (sliding first).
void read_windows(const ConfigReader& c, ModelSpec& s) {
  const json& raw = c.raw();
  const auto layers = static_cast<std::size_t>(s.num_layers);
  s.layer_window.assign(layers, 0);
  std::vector<bool> sliding(layers, false);
  const bool use_flag = c.boolean("use_sliding_window", false);
  if (raw.contains("layer_types") && !raw["layer_types"].is_null()) {
    const json& types = raw["layer_types"];
    if (!types.is_array() || types.size() != layers) {
      throw ModelError(c.source() + ": \"layer_types\" must list one type per layer (" +
                       std::to_string(s.num_layers) + ").");
    }
    for (std::size_t l = 0; l < layers; ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : "";
      if (t == "sliding_attention") {
        sliding[l] = true;
      } else if (t == "linear_attention" && s.family == Family::Qwen3Next) {
        // a gated DeltaNet layer (layer_is_linear)
      } else if (t != "full_attention") {
        throw ModelError(c.source() + ": layer " + std::to_string(l) + " is of type \"" + t +
                         "\"; Tandem runs full_attention and sliding_attention layers.");
      }
    }
  } else if (s.family == Family::GptOss) {
    for (std::size_t l = 0; l < layers; ++l) sliding[l] = l % 2 == 0;
  } else if (s.family == Family::Mixtral) {
    const bool set = raw.contains("sliding_window") && !raw["sliding_window"].is_null();
    sliding.assign(layers, set);
  } else if (s.family == Family::Qwen3 && use_flag) {
    const std::int64_t from = c.integer("max_window_layers");
    for (std::size_t l = 0; l < layers; ++l) sliding[l] = static_cast<std::int64_t>(l) >= from;
  } else if (s.family == Family::Qwen3Moe && use_flag) {
    sliding.assign(layers, true);
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) return;
  if (s.mla) throw ModelError(c.source() + ": sliding-window attention with MLA is not supported.");
  const std::int64_t window = c.integer("sliding_window");
  if (window == 0) throw ModelError(c.source() + ": \"sliding_window\" must be above zero.");
  for (std::size_t l = 0; l < layers; ++l) s.layer_window[l] = sliding[l] ? window : 0;
}

// A setting transformers 5 renamed: the one given, in either spelling; both given must agree.
std::int64_t renamed_integer(const ConfigReader& c, const char* old_name, const char* new_name) {
  const bool has_old = c.has(old_name) && !c.raw()[old_name].is_null();
  const bool has_new = c.has(new_name) && !c.raw()[new_name].is_null();
  if (!has_old && !has_new) {
    throw ModelError(c.source() + ": the required setting \"" + old_name + "\" (\"" + new_name +
                     "\" in configs saved by transformers 5) is missing.");
  }
  if (has_old && has_new && c.integer(old_name) != c.integer(new_name)) {
    throw ModelError(c.source() + ": \"" + old_name + "\" and \"" + new_name +
                     "\" disagree; keep the one the model was trained with.");
  }
  return c.integer(has_new ? new_name : old_name);
}

// A [rows, cols] block shape from the config, both at least 1.
std::pair<std::int64_t, std::int64_t> block_shape(const json& v, const std::string& what,
                                                  const std::string& source) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer() ||
      v[0].get<std::int64_t>() < 1 || v[1].get<std::int64_t>() < 1) {
    throw ModelError(source + ": " + what + " must be two whole numbers [rows, columns], not " +
                     v.dump() + ".");
  }
  return {v[0].get<std::int64_t>(), v[1].get<std::int64_t>()};
}

// How the checkpoint's FP8 weights are scaled, from its quantization_config. Any other
// quantization is refused by name: reading its packed integers as plain weights would give
// text that looks like a model's and is not.
Fp8Scales fp8_scales(const json& q, const std::string& source, bool mxfp4_allowed, bool& mxfp4) {
  const std::string where = source + ": quantization_config";
  if (!q.is_object()) throw ModelError(where + " must be an object.");
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string()
                                 ? q["quant_method"].get<std::string>()
                                 : "";
  const std::string other_release =
      " Download the model's BF16 release, or its FP8 release with block or per-channel scales.";
  if (method == "mxfp4" && mxfp4_allowed) {
    mxfp4 = true;
    return {};
  }
  if (method == "fp8") {
    if (q.contains("fmt") && q["fmt"].is_string() && q["fmt"] != "e4m3") {
      throw ModelError(where + " stores FP8 as " + q["fmt"].get<std::string>() +
                       "; Tandem reads e4m3 only." + other_release);
    }
    if (!q.contains("weight_block_size") || q["weight_block_size"].is_null()) {
      throw ModelError(where +
                       " says FP8 with one scale per tensor (no weight_block_size), which Tandem "
                       "does not read." +
                       other_release);
    }
    const auto [rows, cols] = block_shape(q["weight_block_size"], "weight_block_size", where);
    return {"_scale_inv", rows, cols};
  }
  if (method == "compressed-tensors") {
    if (!q.contains("config_groups") || !q["config_groups"].is_object() ||
        q["config_groups"].empty()) {
      throw ModelError(where +
                       " (compressed-tensors) has no config_groups saying how the "
                       "weights were quantized.");
    }
    const std::string top_format =
        q.contains("format") && q["format"].is_string() ? q["format"].get<std::string>() : "";
    std::optional<Fp8Scales> found;
    for (const auto& [group_name, group] : q["config_groups"].items()) {
      const std::string g = where + ".config_groups." + group_name;
      std::string format = top_format;
      if (group.is_object() && group.contains("format") && group["format"].is_string())
        format = group["format"].get<std::string>();
      if (format != "float-quantized") {
        throw ModelError(g + " stores its weights as \"" + (format.empty() ? "?" : format) +
                         "\"; Tandem reads compressed-tensors FP8 (\"float-quantized\") only." +
                         other_release);
      }
      const json* w = group.is_object() && group.contains("weights") ? &group["weights"] : nullptr;
      if (w == nullptr || !w->is_object()) throw ModelError(g + " does not describe its weights.");
      const std::string type = w->value("type", std::string());
      const std::int64_t bits = w->value("num_bits", std::int64_t{0});
      if (type != "float" || bits != 8) {
        throw ModelError(g + " quantizes weights to " + std::to_string(bits) + "-bit " + type +
                         "; Tandem reads 8-bit float (FP8 e4m3) only." + other_release);
      }
      const std::string strategy = w->value("strategy", std::string());
      Fp8Scales f{"_scale", 1, 0};
      if (strategy == "block") {
        if (!w->contains("block_structure"))
          throw ModelError(g + ": block quantization without block_structure.");
        std::tie(f.block_rows, f.block_cols) =
            block_shape((*w)["block_structure"], "block_structure", g);
      } else if (strategy != "channel") {
        throw ModelError(g + " scales FP8 weights by \"" + strategy +
                         "\"; Tandem reads per-channel and block scales only." + other_release);
      }
      if (found && (found->block_rows != f.block_rows || found->block_cols != f.block_cols)) {
        throw ModelError(where +
                         " mixes FP8 scale layouts across config_groups, which Tandem "
                         "does not read.");
      }
      found = f;
    }
    return *found;
  }
  throw ModelError(where + " says the weights are quantized with \"" +
                   (method.empty() ? "an unnamed method" : method) +
                   "\", which Tandem does not read." + other_release);
}

}  // namespace

std::string_view family_name(Family f) {
  switch (f) {
    case Family::Llama:
      return "llama";
    case Family::Qwen3:
      return "qwen3";
    case Family::Qwen3Moe:
      return "qwen3_moe";
    case Family::Mixtral:
      return "mixtral";
    case Family::DeepseekV3:
      return "deepseek_v3";
    case Family::Glm4Moe:
      return "glm4_moe";
    case Family::GptOss:
      return "gpt_oss";
    case Family::Qwen3Next:
      return "qwen3_next";
  }
  return "?";
}

std::string supported_architectures() {
  std::string out;
  for (const auto& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

std::string architecture_display_name(std::string_view architecture) {
  for (const auto& a : kArchitectures) {
    if (architecture == a.name) return a.shown;
  }
  return std::string(architecture);
}

bool is_supported_architecture(std::string_view architecture) {
  for (const auto& a : kArchitectures) {
    if (architecture == a.name) return true;
  }
  return false;
}

ModelSpec parse_model_spec(const json& config, const std::string& source) {
  if (!config.is_object()) throw ModelError(source + ": expected a JSON object.");
  const ConfigReader c(config, source);
  ModelSpec s;
  if (!config.contains("architectures") || !config["architectures"].is_array() ||
      config["architectures"].empty() || !config["architectures"][0].is_string()) {
    throw ModelError(source +
                     ": \"architectures\" is missing, so the model type is unknown. Supported: " +
                     supported_architectures() + ".");
  }
  s.architecture = config["architectures"][0].get<std::string>();
  bool known = false;
  for (const auto& a : kArchitectures) {
    if (s.architecture == a.name) {
      s.family = a.family;
      known = true;
    }
  }
  if (!known) {
    throw ModelError(source + ": the architecture " + s.architecture +
                     " is not supported. Tandem runs " + supported_architectures() + ".");
  }

  s.vocab_size = c.integer("vocab_size");
  s.hidden_size = c.integer("hidden_size");
  s.num_layers = c.integer("num_hidden_layers");
  s.num_heads = c.integer("num_attention_heads");
  // transformers derives a missing num_key_value_heads from the heads for Llama only; the
  // other families' classes have defaults of their own, so the setting must be given.
  s.num_kv_heads = s.family == Family::Llama ? c.integer("num_key_value_heads", s.num_heads)
                                             : c.integer("num_key_value_heads");
  if (s.num_heads == 0 || s.hidden_size == 0 || s.num_layers == 0 || s.vocab_size == 0) {
    throw ModelError(
        source +
        ": hidden_size, num_hidden_layers, num_attention_heads and vocab_size must be above zero.");
  }
  // Per-layer settings are held in vectors of this length: a count no model comes near is a
  // damaged file, not a reason to allocate gigabytes.
  constexpr std::int64_t kMaxLayers = 4096;
  if (s.num_layers > kMaxLayers) {
    throw ModelError(source + ": num_hidden_layers is " + std::to_string(s.num_layers) +
                     "; models have at most a few hundred layers (Tandem reads up to " +
                     std::to_string(kMaxLayers) + "), so the file is damaged.");
  }
  if (s.num_kv_heads == 0 || s.num_heads % s.num_kv_heads != 0) {
    throw ModelError(source + ": num_attention_heads (" + std::to_string(s.num_heads) +
                     ") must be a multiple of num_key_value_heads (" +
                     std::to_string(s.num_kv_heads) + ").");
  }
  // Llama and Mixtral derive a missing head_dim from the hidden size, as transformers does;
  // Qwen3's class default (128) is not derived, so there it must be given.
  const bool derived_head_dim =
      s.family == Family::Llama || s.family == Family::Mixtral || s.family == Family::DeepseekV3;
  s.head_dim =
      derived_head_dim ? c.integer("head_dim", s.hidden_size / s.num_heads) : c.integer("head_dim");
  s.intermediate_size = c.integer("intermediate_size", 0);
  s.rms_norm_eps = c.number("rms_norm_eps");
  s.max_position_embeddings = c.integer("max_position_embeddings");
  s.tie_word_embeddings = c.boolean("tie_word_embeddings", false);
  s.attention_bias = c.boolean("attention_bias", false);
  if (s.attention_bias && s.family != Family::Glm4Moe && s.family != Family::GptOss) {
    throw ModelError(source + ": attention projections with bias terms are not supported for " +
                     s.architecture + ".");
  }
  const std::string act = c.string("hidden_act", "silu");
  if (act != "silu")
    throw ModelError(source + ": the activation \"" + act + "\" is not supported (only silu).");
  read_rope(c, s);
  s.layer_is_moe.assign(static_cast<std::size_t>(s.num_layers), false);

  switch (s.family) {
    case Family::Llama:
      break;
    case Family::Qwen3:
      s.qk_norm = true;
      break;
    case Family::Qwen3Moe: {
      s.qk_norm = true;
      s.num_experts = renamed_integer(c, "num_experts", "num_local_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = c.integer("moe_intermediate_size");
      s.norm_topk_prob = c.boolean("norm_topk_prob", false);  // transformers' own default
      read_sparse_layers(c, config, s);
      break;
    }
    case Family::Qwen3Next: {
      // Qwen3-Next: gated DeltaNet layers with one gated full-attention layer among every few
      // (layer_types, else every full_attention_interval-th), partial RoPE, q/k norms, norms
      // stored as w for 1 + w, Qwen3-MoE's router and a sigmoid-gated shared expert.
      s.qk_norm = true;
      s.norm_plus_one = true;
      s.attention_output_gate = true;
      read_partial_rotary(source, s);
      s.num_experts = renamed_integer(c, "num_experts", "num_local_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = c.integer("moe_intermediate_size");
      s.shared_expert_intermediate_size = c.integer("shared_expert_intermediate_size");
      s.shared_expert_gate = s.shared_expert_intermediate_size > 0;
      // Whether the top-k routing weights are renormalised: required, as config.json
      // always writes it, since either value gives plausible but different text.
      s.norm_topk_prob = c.boolean("norm_topk_prob");
      read_sparse_layers(c, config, s);
      s.linear_key_heads = c.integer("linear_num_key_heads");
      s.linear_value_heads = c.integer("linear_num_value_heads");
      s.linear_key_dim = c.integer("linear_key_head_dim");
      s.linear_value_dim = c.integer("linear_value_head_dim");
      s.linear_conv_kernel = c.integer("linear_conv_kernel_dim");
      if (s.linear_key_heads == 0 || s.linear_value_heads % s.linear_key_heads != 0 ||
          s.linear_key_dim == 0 || s.linear_value_dim == 0 || s.linear_conv_kernel == 0) {
        throw ModelError(source +
                         ": the linear-attention settings must be above zero, with "
                         "linear_num_value_heads a multiple of linear_num_key_heads.");
      }
      s.layer_is_linear.assign(static_cast<std::size_t>(s.num_layers), false);
      // Which layers are linear: layer_types, one entry per layer, else every
      // full_attention_interval-th layer is full attention; neither is an error.
      if (config.contains("layer_types") && config["layer_types"].is_array()) {
        const json& types = config["layer_types"];
        if (types.size() != s.layer_is_linear.size()) {
          throw ModelError(source + ": \"layer_types\" lists " + std::to_string(types.size()) +
                           " layers but the model has " + std::to_string(s.num_layers) + ".");
        }
        for (std::size_t l = 0; l < types.size(); ++l) {
          if (types[l] != "linear_attention" && types[l] != "full_attention") {
            throw ModelError(source + ": layer " + std::to_string(l) + " of \"layer_types\" is " +
                             types[l].dump() +
                             "; Qwen3-Next's are linear_attention or full_attention.");
          }
          s.layer_is_linear[l] = types[l] == "linear_attention";
        }
      } else {
        const std::int64_t interval = c.integer("full_attention_interval");
        for (std::int64_t l = 0; l < s.num_layers; ++l)
          s.layer_is_linear[l] = (l + 1) % interval != 0;
      }
      break;
    }
    case Family::Mixtral: {
      s.num_experts = c.integer("num_local_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = s.intermediate_size;
      s.norm_topk_prob = true;
      s.layer_is_moe.assign(static_cast<std::size_t>(s.num_layers), true);
      break;
    }
    case Family::GptOss: {
      // gpt-oss-20b/120b: grouped-query attention with biases everywhere and a sink logit
      // per head, sliding-window layers between full ones (layer_types), a biased router
      // whose top-k logits are softmaxed (the same as softmax then renormalising over the
      // top k), and experts with biases and a clamped SwiGLU.
      if (!s.attention_bias)
        throw ModelError(source +
                         ": gpt-oss's attention has biases; \"attention_bias\" must be true.");
      s.output_bias = true;
      s.attention_sinks = true;
      s.num_experts = c.integer("num_local_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = s.intermediate_size;
      s.norm_topk_prob = true;
      s.router_bias = true;
      s.expert_bias = true;
      // transformers 4 fixes these in the model (7 and 1.702) and does not save them; 5
      // saves them in the config.
      s.swiglu_limit = c.number("swiglu_limit", 7.0);
      s.swiglu_alpha = c.number("swiglu_alpha", 1.702);
      if (s.swiglu_limit <= 0 || s.swiglu_alpha <= 0)
        throw ModelError(source + ": swiglu_limit and swiglu_alpha must be above zero.");
      if (s.moe_intermediate_size == 0)
        throw ModelError(source + ": the required setting \"intermediate_size\" is missing.");
      s.layer_is_moe.assign(static_cast<std::size_t>(s.num_layers), true);
      break;
    }
    case Family::Glm4Moe: {
      // GLM-4.5/4.6/4.7: standard grouped-query attention (q, k and v with biases, per-head
      // q/k norms where use_qk_norm says so, RoPE over the first part of each head), and the
      // sigmoid router of DeepSeek-V3 with its correction bias, groups and scaling.
      s.qk_norm = c.boolean("use_qk_norm", false);
      read_partial_rotary(source, s);
      s.num_experts = c.integer("n_routed_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = c.integer("moe_intermediate_size");
      s.shared_expert_intermediate_size = s.moe_intermediate_size * c.integer("n_shared_experts");
      s.norm_topk_prob = c.boolean("norm_topk_prob", true);  // transformers' own default
      s.scoring = RouterScoring::Sigmoid;
      s.n_group = std::max<std::int64_t>(1, c.integer("n_group"));
      s.topk_group = std::max<std::int64_t>(1, c.integer("topk_group"));
      s.routed_scaling_factor = c.number("routed_scaling_factor");
      s.score_correction_bias = true;
      if (s.num_experts % s.n_group != 0 || s.topk_group > s.n_group) {
        throw ModelError(source +
                         ": n_routed_experts must split evenly into n_group groups, and topk_group "
                         "cannot exceed n_group.");
      }
      const std::int64_t first_dense = c.integer("first_k_dense_replace");
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        s.layer_is_moe[l] = l >= first_dense && s.num_experts > 0;
      break;
    }
    case Family::DeepseekV3: {
      s.mla = true;
      // null means "no low-rank query"; absent would mean transformers' default (1536), so
      // the setting must be there, as every DeepSeek-V3 and Kimi-K2 config has it.
      if (!c.has("q_lora_rank"))
        throw ModelError(source +
                         ": the required setting \"q_lora_rank\" is missing (null for none).");
      s.q_lora_rank = c.integer("q_lora_rank", 0);
      s.kv_lora_rank = c.integer("kv_lora_rank");
      s.qk_nope_head_dim = c.integer("qk_nope_head_dim");
      s.qk_rope_head_dim = c.integer("qk_rope_head_dim");
      s.v_head_dim = c.integer("v_head_dim");
      if (s.qk_rope_head_dim % 2 != 0)
        throw ModelError(source + ": qk_rope_head_dim must be even.");
      s.head_dim = s.qk_rope_head_dim;
      s.rope.interleaved = c.boolean("rope_interleave", true);
      s.num_experts = c.integer("n_routed_experts");
      s.experts_per_token = c.integer("num_experts_per_tok");
      s.moe_intermediate_size = c.integer("moe_intermediate_size");
      s.shared_expert_intermediate_size = s.moe_intermediate_size * c.integer("n_shared_experts");
      s.routed_scaling_factor = c.number("routed_scaling_factor");
      if (s.architecture == "DeepseekV2ForCausalLM") {
        // DeepSeek-V2, V2-Lite, V2.5: softmax scores, no correction bias; V2 and V2.5 keep
        // the experts of the topk_group groups whose best expert scores highest
        // ("group_limited_greedy"), V2-Lite chooses among all ("greedy").
        const std::string scoring = c.string("scoring_func", "softmax");
        if (scoring != "softmax") {
          throw ModelError(source + ": scoring_func is \"" + scoring +
                           "\", but DeepSeek-V2's router scores experts by softmax.");
        }
        s.scoring = RouterScoring::Softmax;
        s.norm_topk_prob = c.boolean("norm_topk_prob");
        const std::string method = c.string("topk_method");
        if (method == "greedy") {
          s.n_group = 1;
          s.topk_group = 1;
        } else if (method == "group_limited_greedy") {
          s.n_group = c.integer("n_group");
          s.topk_group = c.integer("topk_group");
          if (s.n_group < 1 || s.topk_group < 1) {
            throw ModelError(source +
                             ": n_group and topk_group must be at least 1 for "
                             "group_limited_greedy.");
          }
        } else {
          throw ModelError(source + ": topk_method is \"" + method +
                           "\"; DeepSeek-V2 chooses experts by \"greedy\" or "
                           "\"group_limited_greedy\".");
        }
        s.score_correction_bias = false;
      } else {
        // DeepSeek-V3's router is sigmoid whatever else a config says (as transformers'),
        // with the correction bias, over the best topk_group groups by their top two.
        const std::string scoring = c.string("scoring_func", "sigmoid");
        if (scoring != "sigmoid") {
          throw ModelError(source + ": scoring_func is \"" + scoring + "\", but " + s.architecture +
                           "'s router scores experts by sigmoid.");
        }
        s.scoring = RouterScoring::Sigmoid;
        s.norm_topk_prob = c.boolean("norm_topk_prob", true);
        s.n_group = std::max<std::int64_t>(1, c.integer("n_group"));
        s.topk_group = std::max<std::int64_t>(1, c.integer("topk_group"));
        s.score_correction_bias = true;
      }
      if (s.num_experts % s.n_group != 0 || s.topk_group > s.n_group) {
        throw ModelError(
            source +
            ": n_routed_experts must split evenly into n_group groups, and topk_group cannot "
            "exceed n_group.");
      }
      // DeepSeek's own code makes every moe_layer_freq-th layer after the dense ones MoE, and
      // its released configs say 1. A config transformers wrote has no such setting (its
      // classes make every layer after first_k_dense_replace MoE), so absent is not unknown:
      // it means that. Any other frequency is refused, not read as 1.
      if (c.raw().contains("moe_layer_freq")) {
        const std::int64_t frequency = c.integer("moe_layer_freq");
        if (frequency != 1) {
          throw ModelError(source + ": moe_layer_freq is " + std::to_string(frequency) +
                           "; Tandem runs DeepSeek models whose layers after "
                           "first_k_dense_replace all have experts (1).");
        }
      }
      const std::int64_t first_dense = c.integer("first_k_dense_replace");
      for (std::int64_t l = 0; l < s.num_layers; ++l)
        s.layer_is_moe[l] = l >= first_dense && s.num_experts > 0;
      // The YaRN "all dimensions" magnitude correction enters the softmax scale squared.
      double scale = 1.0 / std::sqrt(static_cast<double>(s.qk_head_dim()));
      if (s.rope.type == RopeType::Yarn && s.rope.mscale_all_dim != 0 && s.rope.factor > 1) {
        const double m = 0.1 * s.rope.mscale_all_dim * std::log(s.rope.factor) + 1.0;
        scale *= m * m;
      }
      s.attention_scale = scale;
      break;
    }
  }
  if (s.is_moe() && (s.experts_per_token == 0 || s.experts_per_token > s.num_experts)) {
    throw ModelError(source + ": num_experts_per_tok must be between 1 and the number of experts.");
  }
  if (s.attention_scale == 0.0)
    s.attention_scale = 1.0 / std::sqrt(static_cast<double>(s.qk_head_dim()));

  if (config.contains("quantization_config") && !config["quantization_config"].is_null()) {
    s.fp8 = fp8_scales(config["quantization_config"], source, s.family == Family::GptOss,
                       s.mxfp4_experts);
  }
  read_windows(c, s);

  if (config.contains("eos_token_id")) s.eos_token_ids = token_ids(config["eos_token_id"]);
  if (config.contains("bos_token_id") && config["bos_token_id"].is_number_integer()) {
    s.bos_token_id = config["bos_token_id"].get<std::int32_t>();
  }
  return s;
}

ModelSpec load_model_spec(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw ModelError(folder +
                     ": no such model folder; give the folder that holds config.json and the "
                     ".safetensors files.");
  }
  const fs::path path = fs::path(folder) / "config.json";
  std::ifstream in(path);
  if (!in) {
    throw ModelError(path.string() +
                     ": missing. A model folder needs the config.json that describes the model; "
                     "download it with the weights.");
  }
  json config;
  try {
    config = json::parse(in);
  } catch (const json::parse_error& e) {
    throw ModelError(path.string() + ": not valid JSON (" + e.what() + "); download it again.");
  }
  ModelSpec spec = parse_model_spec(config, path.string());
  const fs::path gen = fs::path(folder) / "generation_config.json";
  if (fs::exists(gen)) {
    std::ifstream g(gen);
    try {
      const json gj = json::parse(g);
      if (gj.contains("eos_token_id")) {
        for (std::int32_t id : token_ids(gj["eos_token_id"])) {
          if (std::find(spec.eos_token_ids.begin(), spec.eos_token_ids.end(), id) ==
              spec.eos_token_ids.end()) {
            spec.eos_token_ids.push_back(id);
          }
        }
      }
    } catch (const json::parse_error& e) {
      throw ModelError(gen.string() + ": not valid JSON (" + e.what() + "); download it again.");
    }
  }
  return spec;
}

std::int64_t position_limit(std::int64_t max_position_embeddings, RopeType type, double factor,
                            std::int64_t original) {
  if (type != RopeType::Yarn && type != RopeType::Linear) return max_position_embeddings;
  const std::int64_t trained = original > 0 ? original : max_position_embeddings;
  return std::max(max_position_embeddings,
                  static_cast<std::int64_t>(std::llround(factor * static_cast<double>(trained))));
}

std::int64_t ModelSpec::position_limit() const {
  return model::position_limit(max_position_embeddings, rope.type, rope.factor,
                               rope.original_max_position);
}

}  // namespace tandem::model
