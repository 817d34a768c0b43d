#include "engine/model/synthetic_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"
#include "engine/model/safetensors_writer.h"

namespace tandem::model {
namespace {

using nlohmann::ordered_json;

ordered_json qwen3_30b_a3b() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}},
          {"model_type", "qwen3_moe"},
          {"vocab_size", 151936},
          {"hidden_size", 2048},
          {"intermediate_size", 6144},
          {"moe_intermediate_size", 768},
          {"num_hidden_layers", 48},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 4},
          {"head_dim", 128},
          {"num_experts", 128},
          {"num_experts_per_tok", 8},
          {"norm_topk_prob", true},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", ordered_json::array()},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"max_position_embeddings", 40960},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"torch_dtype", "bfloat16"}};
}

ordered_json deepseek_v3() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", 129280},
          {"hidden_size", 7168},
          {"intermediate_size", 18432},
          {"moe_intermediate_size", 2048},
          {"num_hidden_layers", 61},
          {"num_attention_heads", 128},
          {"num_key_value_heads", 128},
          {"q_lora_rank", 1536},
          {"kv_lora_rank", 512},
          {"qk_nope_head_dim", 128},
          {"qk_rope_head_dim", 64},
          {"v_head_dim", 128},
          {"n_routed_experts", 256},
          {"n_shared_experts", 1},
          {"num_experts_per_tok", 8},
          {"n_group", 8},
          {"topk_group", 4},
          {"first_k_dense_replace", 3},
          {"routed_scaling_factor", 2.5},
          {"norm_topk_prob", true},
          {"scoring_func", "sigmoid"},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"rope_scaling",
           {{"type", "yarn"},
            {"factor", 40},
            {"original_max_position_embeddings", 4096},
            {"beta_fast", 32},
            {"beta_slow", 1},
            {"mscale", 1.0},
            {"mscale_all_dim", 1.0}}},
          {"max_position_embeddings", 163840},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"bos_token_id", 0},
          {"eos_token_id", 1},
          {"torch_dtype", "bfloat16"}};
}

struct TensorPlan {
  std::string name;
  std::vector<std::int64_t> shape;
  bool norm = false;   // filled with ones
  float scale = 1.0f;  // times the standard deviation, 1 / sqrt(fan_in)
};

// The scales that keep a random model's tokens apart as they go up the layers, as trained
// models' are, so that their routers spread them over the experts. With every matrix at
// variance 1/fan_in, embeddings are small (RMS 1/sqrt(hidden)) beside what each attention
// adds to the residual stream, and random attention adds almost the same to every token (a
// near-uniform average of the values): from the third layer on, the 8-layer Qwen3-30B-A3B
// shape sent 470-504 of a 512-token prompt's tokens to one expert and none to 74-84 of the
// 128. Embeddings at unit variance, and the matrices that write into the residual stream
// (o_proj, down_proj) scaled by 1 / sqrt(2 * layers) as GPT-2 initialises them, keep each
// token's own embedding in the lead: every layer then gives the median expert 31-32 tokens
// and the busiest 44-50 (docs/benchmarks.md, "A synthetic whose routers spread the tokens").
float embedding_scale(const ModelSpec& s) {
  return static_cast<float>(std::sqrt(static_cast<double>(s.hidden_size)));
}
float residual_scale(const ModelSpec& s) {
  return static_cast<float>(1.0 / std::sqrt(2.0 * static_cast<double>(s.num_layers)));
}

void add_ffn(std::vector<TensorPlan>& out, const std::string& prefix, std::int64_t hidden,
             std::int64_t inner, float residual) {
  out.push_back({prefix + "gate_proj.weight", {inner, hidden}});
  out.push_back({prefix + "up_proj.weight", {inner, hidden}});
  out.push_back({prefix + "down_proj.weight", {hidden, inner}, false, residual});
}

std::vector<TensorPlan> layer_tensors(const ModelSpec& s, std::int64_t l) {
  std::vector<TensorPlan> out;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const std::int64_t h = s.hidden_size;
  const float residual = residual_scale(s);
  out.push_back({p + "input_layernorm.weight", {h}, true});
  out.push_back({p + "post_attention_layernorm.weight", {h}, true});
  const std::string a = p + "self_attn.";
  if (s.mla) {
    const std::int64_t qk = s.qk_head_dim();
    if (s.q_lora_rank > 0) {
      out.push_back({a + "q_a_proj.weight", {s.q_lora_rank, h}});
      out.push_back({a + "q_a_layernorm.weight", {s.q_lora_rank}, true});
      out.push_back({a + "q_b_proj.weight", {s.num_heads * qk, s.q_lora_rank}});
    } else {
      out.push_back({a + "q_proj.weight", {s.num_heads * qk, h}});
    }
    out.push_back({a + "kv_a_proj_with_mqa.weight", {s.kv_lora_rank + s.qk_rope_head_dim, h}});
    out.push_back({a + "kv_a_layernorm.weight", {s.kv_lora_rank}, true});
    out.push_back({a + "kv_b_proj.weight",
                   {s.num_heads * (s.qk_nope_head_dim + s.v_head_dim), s.kv_lora_rank}});
    out.push_back({a + "o_proj.weight", {h, s.num_heads * s.v_head_dim}, false, residual});
  } else {
    out.push_back({a + "q_proj.weight", {s.num_heads * s.head_dim, h}});
    out.push_back({a + "k_proj.weight", {s.num_kv_heads * s.head_dim, h}});
    out.push_back({a + "v_proj.weight", {s.num_kv_heads * s.head_dim, h}});
    out.push_back({a + "o_proj.weight", {h, s.num_heads * s.head_dim}, false, residual});
    if (s.qk_norm) {
      out.push_back({a + "q_norm.weight", {s.head_dim}, true});
      out.push_back({a + "k_norm.weight", {s.head_dim}, true});
    }
  }
  if (s.layer_is_moe[static_cast<std::size_t>(l)]) {
    out.push_back({p + "mlp.gate.weight", {s.num_experts, h}});
    // Zero, as a model's selection bias starts before training balances it: random biases
    // of about 0.3 outweighed the sigmoid scores' differences and sent most tokens to the
    // experts they favoured.
    if (s.score_correction_bias)
      out.push_back({p + "mlp.gate.e_score_correction_bias", {s.num_experts}, false, 0.0f});
    for (std::int64_t e = 0; e < s.num_experts; ++e)
      add_ffn(out, p + "mlp.experts." + std::to_string(e) + ".", h, s.moe_intermediate_size,
              residual);
    if (s.shared_expert_intermediate_size > 0)
      add_ffn(out, p + "mlp.shared_experts.", h, s.shared_expert_intermediate_size, residual);
  } else {
    add_ffn(out, p + "mlp.", h, s.intermediate_size, residual);
  }
  return out;
}

// splitmix64: fast, good enough for benchmark weights.
struct Random {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

void write_shard(const std::string& path, const std::vector<TensorPlan>& plan, Random& rng,
                 std::uint64_t& done, std::uint64_t total,
                 const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  std::vector<SafetensorsWriter::Declared> declared;
  for (const TensorPlan& t : plan) declared.push_back({t.name, kernels::DType::BF16, t.shape});
  SafetensorsWriter writer(path, declared,
                           {{"format", "pt"}, {"source", "tandem synth: random weights"}});
  std::vector<std::uint16_t> buffer;
  for (const TensorPlan& t : plan) {
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) n *= d;
    buffer.resize(static_cast<std::size_t>(n));
    if (t.norm) {
      std::fill(buffer.begin(), buffer.end(), kernels::f32_to_bf16(1.0f));
    } else {
      // Uniform in [-a, a] with a = scale * sqrt(3 / fan_in): variance scale^2 / fan_in.
      const float a = t.scale * std::sqrt(3.0f / static_cast<float>(t.shape.back()));
      for (auto& v : buffer) {
        const float u = static_cast<float>(rng.next() >> 40) / static_cast<float>(1ull << 24);
        v = kernels::f32_to_bf16((2.0f * u - 1.0f) * a);
      }
    }
    writer.write(buffer.data(), buffer.size() * 2);
    done += buffer.size() * 2;
    if (progress) progress(done, total);
  }
  writer.finish();
}

}  // namespace

std::vector<std::string> synth_shapes() {
  return {"qwen3-30b-a3b", "deepseek-v3"};
}

void write_synthetic_checkpoint(const SynthOptions& options,
                                const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  ordered_json config;
  if (options.like == "qwen3-30b-a3b")
    config = qwen3_30b_a3b();
  else if (options.like == "deepseek-v3")
    config = deepseek_v3();
  else
    throw ModelError("there is no model shape called \"" + options.like +
                     "\"; choose qwen3-30b-a3b or deepseek-v3.");
  if (options.layers > 0) config["num_hidden_layers"] = options.layers;
  for (const auto& [key, value] : options.config_overrides) config[key] = value;
  if (options.experts > 0) {
    const bool deepseek = config.contains("n_routed_experts");
    const std::int64_t per_token = config["num_experts_per_tok"].get<std::int64_t>();
    // DeepSeek-V3 routes a token to its best groups of experts first, each group's best two
    // scored together: every group needs two experts, and the chosen groups a token's eight.
    const std::int64_t groups = deepseek ? config["n_group"].get<std::int64_t>() : 1;
    const std::int64_t least =
        deepseek
            ? std::max(2 * groups, per_token * groups / config["topk_group"].get<std::int64_t>())
            : per_token;
    if (options.experts < least || options.experts % groups != 0) {
      throw ModelError("--experts " + std::to_string(options.experts) + ": a " + options.like +
                       "-shaped model needs at least " + std::to_string(least) + " routed experts" +
                       (groups > 1 ? ", a multiple of its " + std::to_string(groups) + " groups"
                                   : std::string()) +
                       " (each token takes " + std::to_string(per_token) + ").");
    }
    config[deepseek ? "n_routed_experts" : "num_experts"] = options.experts;
  }
  const ModelSpec spec = parse_model_spec(nlohmann::json::parse(config.dump()), "synthetic config");

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(options.out, ec);
  if (ec) throw ModelError(options.out + ": cannot create the folder (" + ec.message() + ").");

  std::vector<std::vector<TensorPlan>> shards;
  shards.push_back({{"model.embed_tokens.weight",
                     {spec.vocab_size, spec.hidden_size},
                     false,
                     embedding_scale(spec)},
                    {"model.norm.weight", {spec.hidden_size}, true},
                    {"lm_head.weight", {spec.vocab_size, spec.hidden_size}}});
  for (std::int64_t l = 0; l < spec.num_layers; ++l) shards.push_back(layer_tensors(spec, l));
  std::uint64_t total = 0;
  for (const auto& shard : shards) {
    for (const TensorPlan& t : shard) {
      std::uint64_t n = 2;
      for (std::int64_t d : t.shape) n *= static_cast<std::uint64_t>(d);
      total += n;
    }
  }
  const std::uint64_t free = fs::space(options.out, ec).available;
  if (!ec && free < total + (total >> 6)) {
    throw ModelError(options.out + ": the checkpoint needs " + std::to_string(total >> 20) +
                     " MiB but only " + std::to_string(free >> 20) +
                     " MiB are free; choose fewer layers or another folder.");
  }

  Random rng{options.seed};
  std::uint64_t done = 0;
  ordered_json weight_map = ordered_json::object();
  const std::size_t count = shards.size();
  for (std::size_t i = 0; i < count; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, count);
    write_shard((fs::path(options.out) / name).string(), shards[i], rng, done, total, progress);
    for (const TensorPlan& t : shards[i]) weight_map[t.name] = name;
  }
  std::ofstream((fs::path(options.out) / "model.safetensors.index.json").string())
      << ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
  std::ofstream((fs::path(options.out) / "config.json").string()) << config.dump(2);
  std::ofstream((fs::path(options.out) / "generation_config.json").string()) << ordered_json{
      {"bos_token_id", config["bos_token_id"]},
      {"eos_token_id", config["eos_token_id"]}}.dump(2);
}

}  // namespace tandem::model
