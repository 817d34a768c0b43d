// `tandem synth`'s random checkpoints: each matrix's spread as planned (the embeddings at
// unit variance, the matrices that write into the residual stream scaled down by the depth),
// and what that is for: a prompt's tokens spread over the experts in every layer, as a trained
// router spreads them, not all sent to a few experts from the third layer on.
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/generate/generator.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"
#include "engine/model/safetensors_file.h"
#include "engine/model/synthetic_checkpoint.h"
#include "kernels/cpu/dtype.h"

using namespace tandem;

namespace {

constexpr std::int64_t kLayers = 6, kExperts = 32, kTopK = 4, kHidden = 256;

// Qwen3-30B-A3B's layout, small: 6 layers of 32 experts (top 4), hidden 256.
model::SynthOptions small_qwen3_moe(const std::string& out) {
  model::SynthOptions o;
  o.like = "qwen3-30b-a3b";
  o.layers = kLayers;
  o.out = out;
  o.config_overrides = {
      {"hidden_size", kHidden},   {"intermediate_size", 512},     {"moe_intermediate_size", 64},
      {"num_attention_heads", 4}, {"num_key_value_heads", 2},     {"head_dim", 64},
      {"num_experts", kExperts},  {"num_experts_per_tok", kTopK}, {"vocab_size", 2048}};
  return o;
}

// The standard deviation of a BF16 tensor's values.
double spread(const model::SafetensorsFile& file, const std::string& name) {
  const model::TensorInfo* t = file.find(name);
  if (t == nullptr) throw std::runtime_error(name + " is missing");
  const auto* v = static_cast<const std::uint16_t*>(file.data(*t));
  double sum = 0, squares = 0;
  const std::int64_t n = t->elements();
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = kernels::bf16_to_f32(v[i]);
    sum += x;
    squares += x * x;
  }
  const double mean = sum / static_cast<double>(n);
  return std::sqrt(squares / static_cast<double>(n) - mean * mean);
}

}  // namespace

class TestSyntheticCheckpoint : public QObject {
  Q_OBJECT

 private slots:
  void spreadsAsPlanned() {
    QTemporaryDir dir;
    model::write_synthetic_checkpoint(small_qwen3_moe(dir.path().toStdString()));
    const model::SafetensorsFile base(
        dir.filePath("model-00001-of-00007.safetensors").toStdString());
    const model::SafetensorsFile layer(
        dir.filePath("model-00002-of-00007.safetensors").toStdString());
    const auto near = [](double got, double want) { return std::abs(got / want - 1.0) < 0.03; };
    const double residual = 1.0 / std::sqrt(2.0 * kLayers);
    const std::vector<std::pair<double, double>> checks = {
        {spread(base, "model.embed_tokens.weight"), 1.0},
        {spread(base, "lm_head.weight"), 1.0 / std::sqrt(kHidden)},
        {spread(layer, "model.layers.0.self_attn.q_proj.weight"), 1.0 / std::sqrt(kHidden)},
        {spread(layer, "model.layers.0.self_attn.o_proj.weight"), residual / std::sqrt(256.0)},
        {spread(layer, "model.layers.0.mlp.gate.weight"), 1.0 / std::sqrt(kHidden)},
        {spread(layer, "model.layers.0.mlp.experts.3.up_proj.weight"), 1.0 / std::sqrt(kHidden)},
        {spread(layer, "model.layers.0.mlp.experts.3.down_proj.weight"), residual / 8.0},
    };
    for (std::size_t i = 0; i < checks.size(); ++i) {
      QVERIFY2(near(checks[i].first, checks[i].second),
               qPrintable(QStringLiteral("check %1: %2 against %3")
                              .arg(i)
                              .arg(checks[i].first)
                              .arg(checks[i].second)));
    }
  }

  // 384 random tokens through every layer: each MoE layer's busiest expert takes at most
  // 2.5x its share (48 of 384 * 4 / 32) and at most two experts are left without a token. The
  // plain 1/fan_in spread sent most tokens to one expert from the third layer on.
  void routersSpreadTheTokens_data() {
    QTest::addColumn<bool>("deepseek");
    QTest::newRow("qwen3-30b-a3b") << false;
    QTest::newRow("deepseek-v3") << true;  // latent attention, sigmoid routing in groups
  }
  void routersSpreadTheTokens() {
    QFETCH(bool, deepseek);
    QTemporaryDir dir;
    model::SynthOptions o = small_qwen3_moe(dir.path().toStdString());
    if (deepseek) {
      o.like = "deepseek-v3";
      o.config_overrides = {{"hidden_size", kHidden},
                            {"intermediate_size", 512},
                            {"moe_intermediate_size", 64},
                            {"num_attention_heads", 4},
                            {"num_key_value_heads", 4},
                            {"q_lora_rank", 64},
                            {"kv_lora_rank", 32},
                            {"qk_nope_head_dim", 32},
                            {"qk_rope_head_dim", 16},
                            {"v_head_dim", 32},
                            {"n_routed_experts", kExperts},
                            {"num_experts_per_tok", kTopK},
                            {"n_group", 4},
                            {"topk_group", 2},
                            {"first_k_dense_replace", 1},
                            {"vocab_size", 2048}};
    }
    model::write_synthetic_checkpoint(o);
    const auto loaded = model::LoadedModel::load(dir.path().toStdString());
    backend::NumaPools pools(2, loaded->pools(), /*pin=*/false);
    generate::Generator generator(*loaded, pools, 512);
    constexpr std::int64_t kTokens = 384;
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::int32_t> token(0, 2047);
    std::vector<std::int32_t> prompt(kTokens);
    for (auto& t : prompt) t = token(rng);
    generator.evaluate(prompt);
    const measure::MetricsSnapshot snap = generator.metrics()->snapshot();
    QCOMPARE(snap.hits.size(), static_cast<std::size_t>(kLayers * kExperts));
    const double share = static_cast<double>(kTokens * kTopK) / kExperts;
    int moe_layers = 0;
    for (std::int64_t l = 0; l < kLayers; ++l) {
      const auto begin = snap.hits.begin() + l * kExperts;
      const std::uint64_t busiest = *std::max_element(begin, begin + kExperts);
      if (busiest == 0) continue;  // a dense layer
      ++moe_layers;
      const auto idle = std::count(begin, begin + kExperts, 0u);
      QVERIFY2(static_cast<double>(busiest) <= 2.5 * share && idle <= 2,
               qPrintable(QStringLiteral("layer %1: busiest expert %2 tokens (share %3), %4 "
                                         "without any")
                              .arg(l)
                              .arg(busiest)
                              .arg(share)
                              .arg(idle)));
    }
    QCOMPARE(moe_layers, deepseek ? kLayers - 1 : kLayers);
  }

  // Fewer routed experts than the real model's, each of its shape: config.json says how many
  // and the layers hold that many; fewer than a token takes (DeepSeek-V3: than its groups
  // need) is refused with a sentence.
  void fewerExperts() {
    QTemporaryDir dir;
    model::SynthOptions o = small_qwen3_moe(dir.path().toStdString());
    o.layers = 1;
    o.config_overrides.erase(
        std::remove_if(o.config_overrides.begin(), o.config_overrides.end(),
                       [](const auto& kv) { return kv.first == "num_experts"; }),
        o.config_overrides.end());
    o.experts = 6;
    model::write_synthetic_checkpoint(o);
    QFile config(dir.filePath("config.json"));
    QVERIFY(config.open(QIODevice::ReadOnly));
    QCOMPARE(QJsonDocument::fromJson(config.readAll()).object().value("num_experts").toInt(), 6);
    const model::SafetensorsFile layer(
        dir.filePath("model-00002-of-00002.safetensors").toStdString());
    QVERIFY(layer.find("model.layers.0.mlp.experts.5.down_proj.weight") != nullptr);
    QVERIFY(layer.find("model.layers.0.mlp.experts.6.down_proj.weight") == nullptr);
    QCOMPARE(layer.find("model.layers.0.mlp.gate.weight")->shape[0], std::int64_t{6});

    const auto refused = [](model::SynthOptions options, const std::string& want) {
      try {
        model::write_synthetic_checkpoint(options);
      } catch (const model::ModelError& e) {
        return std::string(e.what()).find(want) != std::string::npos;
      }
      return false;
    };
    QTemporaryDir other;
    o.out = other.path().toStdString();
    o.experts = 3;  // each token takes 4
    QVERIFY(refused(o, "needs at least 4 routed experts (each token takes 4)"));
    o.like = "deepseek-v3";
    o.config_overrides.clear();
    o.experts = 12;  // 8 groups, a token's best 4 of them holding its 8
    QVERIFY(refused(o, "needs at least 16 routed experts, a multiple of its 8 groups"));
    o.experts = 20;
    QVERIFY(refused(o, "a multiple of its 8 groups"));
  }

  void unknownShapeIsRefused() {
    QTemporaryDir dir;
    model::SynthOptions o;
    o.like = "qwen9";
    o.out = dir.path().toStdString();
    try {
      model::write_synthetic_checkpoint(o);
      QFAIL("an unknown shape was accepted");
    } catch (const model::ModelError& e) {
      QVERIFY2(std::string(e.what()).find("qwen3-30b-a3b or deepseek-v3") != std::string::npos,
               e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestSyntheticCheckpoint)
#include "tst_synthetic_checkpoint.moc"
