// GGUF models run as they are stored, against the independent oracle (transformers computing
// with gguf-py's dequantisation of the same blocks, tests/tools/make_gguf_model_fixtures.py):
// last-position logits within 2% of the logit range and KL 1e-3 (8-bit activations, as in
// llama.cpp) and the same greedy tokens up to a near tie, the
// file's own tokenizer giving the prompt's ids; the spec read from the metadata; packing the
// blocks at load; and a sentence for what is missing or not supported.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/forward/device_weights.h"
#include "engine/generate/generator.h"
#include "engine/model/gguf/model.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"
#include "tests/support/logit_divergence.h"

using namespace tandem;

namespace {

std::string fixture_path(const std::string& name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + name;
}

nlohmann::json expected_of(const std::string& name) {
  std::ifstream in(fixture_path(name + ".json"));
  if (!in) return nullptr;
  return nlohmann::json::parse(in);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The fixture with `from` (which must occur once) replaced by `to` of the same length.
std::string patched(const QTemporaryDir& dir, const std::string& name, const std::string& from,
                    const std::string& to) {
  std::string bytes = read_bytes(fixture_path(name + ".gguf"));
  const std::size_t at = bytes.find(from);
  if (at == std::string::npos || bytes.find(from, at + 1) != std::string::npos ||
      from.size() != to.size())
    return {};
  bytes.replace(at, from.size(), to);
  const std::string path = dir.filePath(QString::fromStdString(name + ".gguf")).toStdString();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

float relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  float worst = 0.0f;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst / (*hi - *lo);
}

// The fixtures tests/tools/make_gguf_model_fixtures.py writes.
constexpr const char* kFixtures[] = {
    "qwen3moe-q8_0",   "qwen3moe-mixed", "llama-mixed",  "qwen3-f16",     "mixtral-q4_k",
    "deepseek2-split", "deepseek2-kv_b", "deepseek2-v2", "glm4moe-mixed", "qwen3moe-iq",
};

}  // namespace

class TestGgufModel : public QObject {
  Q_OBJECT
 private slots:
  void matchesOracle_data() {
    QTest::addColumn<QString>("fixture");
    for (const char* f : kFixtures) QTest::newRow(f) << QString::fromLatin1(f);
  }

  void matchesOracle() {
    QFETCH(QString, fixture);
    const std::string name = fixture.toStdString();
    const auto expected = expected_of(name);
    QVERIFY2(!expected.is_null(), "run tests/tools/make_gguf_model_fixtures.py");
    auto model = model::LoadedModel::load(fixture_path(name + ".gguf"));
    const auto tokenizer = text::load_tokenizer(fixture_path(name + ".gguf"));
    backend::NumaPools pool(2, 1, /*pin=*/false);
    generate::Generator generator(*model, pool, 128);
    // llama.cpp's logits, where its build read the file and computes the architecture right.
    const nlohmann::json& llama = expected["llama_cpp"];
    QVERIFY2(llama.is_object(), "run tests/tools/make_gguf_model_fixtures.py --llama-cpp");
    if (!llama.contains("logits") || llama.contains("not_an_oracle")) {
      qInfo("%s: no llama.cpp oracle: %s", name.c_str(),
            llama.value("refused", llama.value("not_an_oracle", std::string())).c_str());
    }
    std::size_t prompt = 0;
    for (const auto& case_ : expected["prompts"]) {
      const auto ids = case_["ids"].get<std::vector<std::int32_t>>();
      QCOMPARE(tokenizer->encode(case_["text"].get<std::string>(), false), ids);
      const auto want = case_["logits"].get<std::vector<float>>();
      const std::vector<float>& got = generator.evaluate(ids);
      QCOMPARE(got.size(), want.size());
      // The block kernels quantise activations to 8 bits per 32 values, as llama.cpp does:
      // the logits move by up to about 2% of their range (deepseek2-v2: 2.03%, where
      // llama.cpp itself is 1.7% from transformers), their distribution barely.
      const float relative = relative_difference(got, want);
      const double kl = test::kl_divergence_of_logits(want, got);
      QVERIFY2(relative <= 2.5e-2f && kl <= 1e-3,
               qPrintable(QStringLiteral("relative difference %1, KL %2").arg(relative).arg(kl)));
      // And to llama.cpp's logits on the same file: within Tandem's distance from
      // transformers plus llama.cpp's own (each quantises activations its own way).
      if (llama.contains("logits") && !llama.contains("not_an_oracle")) {
        const auto theirs = llama["logits"][prompt].get<std::vector<float>>();
        const double apart = llama["relative_to_transformers"][prompt].get<double>();
        const float off = relative_difference(got, theirs);
        QVERIFY2(off <= 2.5e-2 + apart,
                 qPrintable(QStringLiteral("%1 from llama.cpp's logits (it is %2 from "
                                           "transformers')")
                                .arg(off)
                                .arg(apart)));
      }
      ++prompt;

      generate::GenerationOptions options;
      options.sampling = generate::SamplingParams::greedy();
      options.max_tokens = 16;
      options.stop_at_eos = false;
      std::vector<std::int32_t> tokens;
      generator.reset();
      generator.generate(ids, options, [&](std::int32_t t) {
        tokens.push_back(t);
        return true;
      });
      // The oracle's tokens, up to its first near tie: two logits each off by the prompt's
      // measured difference (a share of the range) can swap when their margin is below
      // twice that, or below 1%, wherever the activations' rounding may tip the choice.
      const auto greedy = case_["greedy"].get<std::vector<std::int32_t>>();
      const auto margins = case_["greedy_margins"].get<std::vector<double>>();
      QCOMPARE(tokens.size(), greedy.size());
      const double tie = std::max(0.01, 2.0 * relative);
      std::size_t clear = 0;
      while (clear < greedy.size() && margins[clear] >= tie) ++clear;
      for (std::size_t i = 0; i < clear; ++i)
        QVERIFY2(tokens[i] == greedy[i], qPrintable(QStringLiteral("token %1").arg(i)));
    }
  }

  // Every block format the fixtures hold is one Tandem computes with, and together they
  // hold all of them.
  void fixturesCoverEveryFormat() {
    std::set<std::string> formats;
    for (const char* f : kFixtures) {
      const auto expected = expected_of(f);
      for (const auto& t : expected["formats"]) formats.insert(t.get<std::string>());
    }
    for (const char* t :
         {"Q4_0",  "Q4_1",  "Q5_0",   "Q5_1",   "Q8_0",    "Q2_K",   "Q3_K",  "Q4_K",
          "Q5_K",  "Q6_K",  "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS",
          "IQ3_S", "IQ1_S", "IQ1_M",  "F16",    "BF16",    "F32"})
      QVERIFY2(formats.count(t) == 1, t);
  }

  // The settings come from the metadata, as llama.cpp's converter writes them.
  void specFromMetadata() {
    const model::GgufSet moe(fixture_path("qwen3moe-q8_0.gguf"));
    const model::ModelSpec s = model::gguf_model_spec(moe);
    QCOMPARE(s.family, model::Family::Qwen3Moe);
    QCOMPARE(s.hidden_size, std::int64_t{256});
    QCOMPARE(s.num_layers, std::int64_t{2});
    QCOMPARE(s.num_heads, std::int64_t{4});
    QCOMPARE(s.num_kv_heads, std::int64_t{2});
    QCOMPARE(s.head_dim, std::int64_t{64});
    QCOMPARE(s.num_experts, std::int64_t{4});
    QCOMPARE(s.experts_per_token, std::int64_t{2});
    QCOMPARE(s.moe_intermediate_size, std::int64_t{256});
    QVERIFY(s.norm_topk_prob);
    QVERIFY(s.qk_norm);
    QVERIFY(!s.tie_word_embeddings);
    QCOMPARE(s.rope.theta, 1000000.0);
    QVERIFY(!s.rope.interleaved);
    QCOMPARE(s.vocab_size, std::int64_t{173});
    QCOMPARE(s.eos_token_ids, std::vector<std::int32_t>{172});
    QCOMPARE(s.bos_token_id, 170);
    QCOMPARE(s.layer_is_moe, std::vector<bool>(2, true));

    const model::GgufSet llama(fixture_path("llama-mixed.gguf"));
    const model::ModelSpec l = model::gguf_model_spec(llama);
    QCOMPARE(l.family, model::Family::Llama);
    QVERIFY(l.tie_word_embeddings);
    QVERIFY(l.rope.interleaved);  // the converter reordered q and k for ggml's rotary mode
    QCOMPARE(l.rope.theta, 500000.0);
    QCOMPARE(l.intermediate_size, std::int64_t{512});

    const model::GgufSet mixtral(fixture_path("mixtral-q4_k.gguf"));
    QCOMPARE(model::gguf_model_spec(mixtral).family, model::Family::Mixtral);

    // DeepSeek-V3 as current llama.cpp describes it: multi-query sizes, the per-head ones in
    // the _mla keys.
    const model::GgufSet split(fixture_path("deepseek2-split.gguf"));
    const model::ModelSpec d = model::gguf_model_spec(split);
    QCOMPARE(d.family, model::Family::DeepseekV3);
    QVERIFY(d.mla);
    QCOMPARE(d.q_lora_rank, std::int64_t{128});
    QCOMPARE(d.kv_lora_rank, std::int64_t{512});
    QCOMPARE(d.qk_nope_head_dim, std::int64_t{64});
    QCOMPARE(d.qk_rope_head_dim, std::int64_t{64});
    QCOMPARE(d.v_head_dim, std::int64_t{64});
    QVERIFY(d.rope.interleaved);
    QVERIFY(d.rope.type == model::RopeType::Yarn);
    QCOMPARE(d.rope.attention_factor, 1.0);
    // 1/sqrt(128) times (1 + 0.1 ln 4) squared.
    QVERIFY(std::abs(d.attention_scale - std::pow(1 + 0.1 * std::log(4.0), 2) / std::sqrt(128.0)) <
            1e-9);
    QCOMPARE(d.scoring, model::RouterScoring::Sigmoid);
    QVERIFY(d.score_correction_bias);
    QCOMPARE(d.n_group, std::int64_t{1});
    QCOMPARE(d.routed_scaling_factor, 2.5);
    QCOMPARE(d.shared_expert_intermediate_size, std::int64_t{256});
    QCOMPARE(d.layer_is_moe, (std::vector<bool>{false, true, true}));
    // Older files: per-head sizes in key_length and value_length, no low-rank query; the
    // expert groups where the file gives them.
    const model::GgufSet whole(fixture_path("deepseek2-kv_b.gguf"));
    const model::ModelSpec o = model::gguf_model_spec(whole);
    QCOMPARE(o.q_lora_rank, std::int64_t{0});
    QCOMPARE(o.qk_nope_head_dim, std::int64_t{64});
    QCOMPARE(o.v_head_dim, std::int64_t{64});
    QCOMPARE(o.n_group, std::int64_t{4});
    QCOMPARE(o.topk_group, std::int64_t{2});
    QVERIFY(!o.norm_topk_prob);
    QCOMPARE(o.rope.type, model::RopeType::Default);

    // GLM-4.5: its next-token-prediction layer is counted in block_count but not run.
    const model::GgufSet glm(fixture_path("glm4moe-mixed.gguf"));
    const model::ModelSpec g = model::gguf_model_spec(glm);
    QCOMPARE(g.family, model::Family::Glm4Moe);
    QCOMPARE(g.num_layers, std::int64_t{2});
    QCOMPARE(g.rope_dim(), std::int64_t{32});
    QVERIFY(!g.rope.interleaved);
    QVERIFY(g.qk_norm);
    QVERIFY(g.attention_bias);
    QCOMPARE(g.layer_is_moe, (std::vector<bool>{false, true}));
  }

  // A file that splits MLA's kv_b per head (attn_k_b, attn_v_b) is computed on the split
  // matrices as stored, in their block formats (no joined copy in memory); joined for a
  // backend that reads kv_b whole, every value lands where kv_b has it.
  void splitLatentProjectionsStayAsStored() {
    const auto m = model::LoadedModel::load(fixture_path("deepseek2-split.gguf"));
    const model::ModelSpec& s = m->spec();
    const model::AttentionWeights& a = m->weights().layers[1].attention;
    QVERIFY(a.kv_b.data == nullptr);
    QVERIFY(a.k_b.data != nullptr && a.v_b.data != nullptr);
    QVERIFY(a.k_b.dtype == kernels::DType::Q8_0);  // as the fixture stores it
    QVERIFY(a.v_b.dtype == kernels::DType::Q4_0);
    const std::int64_t heads = s.num_heads, nope = s.qk_nope_head_dim, vd = s.v_head_dim;
    const std::int64_t latent = s.kv_lora_rank;
    const std::vector<float> joined = forward::join_latent_projections(a, heads, nope, vd, latent);
    QCOMPARE(joined.size(), static_cast<std::size_t>(heads * (nope + vd) * latent));
    std::vector<float> k_row(static_cast<std::size_t>(nope)),
        v_row(static_cast<std::size_t>(latent));
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t j = 0; j < latent; ++j) {
        a.k_b.row_f32(h * latent + j, k_row.data());
        for (std::int64_t i = 0; i < nope; ++i)
          QCOMPARE(joined[static_cast<std::size_t>((h * (nope + vd) + i) * latent + j)],
                   k_row[static_cast<std::size_t>(i)]);
      }
      for (std::int64_t i = 0; i < vd; ++i) {
        a.v_b.row_f32(h * vd + i, v_row.data());
        for (std::int64_t j = 0; j < latent; ++j)
          QCOMPARE(joined[static_cast<std::size_t>((h * (nope + vd) + nope + i) * latent + j)],
                   v_row[static_cast<std::size_t>(j)]);
      }
    }
  }

  // DeepSeek-V2's softmax router: no correction bias, every expert eligible (conversions
  // write no groups), the weights scaled, not renormalised. A file without
  // expert_gating_func (older conversions of V2 and V2.5) means the same.
  void softmaxRouterOfDeepSeekV2() {
    for (const bool without_key : {false, true}) {
      QTemporaryDir dir;
      const std::string path = without_key
                                   ? patched(dir, "deepseek2-v2", "deepseek2.expert_gating_func",
                                             "deepseek2.expert_gating_fUnc")
                                   : fixture_path("deepseek2-v2.gguf");
      QVERIFY(!path.empty());
      const auto m = model::LoadedModel::load(path);
      const model::ModelSpec& s = m->spec();
      QCOMPARE(s.architecture, std::string("DeepseekV2ForCausalLM"));
      QVERIFY(s.mla);
      QVERIFY(s.scoring == model::RouterScoring::Softmax);
      QVERIFY(!s.score_correction_bias);
      QVERIFY(!s.norm_topk_prob);
      QCOMPARE(s.n_group, std::int64_t{1});
      QCOMPARE(s.routed_scaling_factor, 1.5);
    }
  }

  // The chat template and the special tokens come from the file too.
  void chatTemplateFromMetadata() {
    const std::string path = fixture_path("qwen3moe-mixed.gguf");
    const ChatTemplate t = ChatTemplate::from_model_folder(path);
    QVERIFY(t.source().find("<|im_start|>") != std::string::npos);
    const auto tokens = read_special_tokens_from_model_folder(path);
    QCOMPARE(tokens["bos_token"].get<std::string>(), std::string("<|endoftext|>"));
    QCOMPARE(tokens["eos_token"].get<std::string>(), std::string("<|im_end|>"));
  }

  // The blocks packed at load into Tandem's formats keep the model's predictions.
  void packedAtLoad_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("format");
    QTest::addColumn<double>("limit");
    QTest::newRow("q8_0 as int8") << "qwen3moe-q8_0"
                                  << "int8" << 0.02;
    QTest::newRow("mixed as int8") << "qwen3moe-mixed"
                                   << "int8" << 0.02;
    QTest::newRow("mixed as bf16") << "qwen3moe-mixed"
                                   << "bf16" << 0.005;
    QTest::newRow("llama as int4") << "llama-mixed"
                                   << "int4" << 0.1;
    QTest::newRow("latent attention as bf16") << "deepseek2-split"
                                              << "bf16" << 0.005;
    QTest::newRow("iq as int8") << "qwen3moe-iq"
                                << "int8" << 0.02;
  }

  void packedAtLoad() {
    QFETCH(QString, fixture);
    QFETCH(QString, format);
    QFETCH(double, limit);
    const std::string name = fixture.toStdString();
    model::LoadOptions options;
    QVERIFY(model::parse_cpu_format(format.toStdString(), options.cpu_format));
    options.threads = 2;
    auto model = model::LoadedModel::load(fixture_path(name + ".gguf"), options);
    QVERIFY(model->packed_bytes() > 0);
    backend::NumaPools pool(2, 1, /*pin=*/false);
    generate::Generator generator(*model, pool, 128);
    const auto expected = expected_of(name);
    for (const auto& case_ : expected["prompts"]) {
      const auto ids = case_["ids"].get<std::vector<std::int32_t>>();
      const auto want = case_["logits"].get<std::vector<float>>();
      const double kl = test::kl_divergence_of_logits(want, generator.evaluate(ids));
      QVERIFY2(kl <= limit, qPrintable(QStringLiteral("KL %1").arg(kl)));
    }
  }

  // A file used as stored is mapped into the process at load (a stage of its own), so that
  // the first prompts do not fault its pages in one by one: right after the load, the pages
  // of the file that hold its matrices are resident in this process.
  void storedWeightsAreMappedIn() {
    const std::string path = fixture_path("qwen3moe-q8_0.gguf");
    std::vector<model::LoadProgress> seen;
    std::mutex lock;
    model::LoadOptions options;
    options.threads = 2;
    options.on_progress = [&](const model::LoadProgress& p) {
      const std::lock_guard guard(lock);
      seen.push_back(p);
    };
    auto model = model::LoadedModel::load(path, options);
    QVERIFY(!seen.empty());
    QCOMPARE(seen.front().stage, std::string("reading the weights"));
    QCOMPARE(seen.back().stage, std::string("reading the weights"));
    QCOMPARE(seen.back().done, seen.back().total);
    // The resident kilobytes of this file's mappings, from /proc/self/smaps.
    std::ifstream smaps("/proc/self/smaps");
    std::uint64_t resident_kb = 0;
    bool ours = false;
    for (std::string line; std::getline(smaps, line);) {
      std::string range;
      std::istringstream(line) >> range;
      const bool header = range.find('-') != std::string::npos &&
                          range.find_first_not_of("0123456789abcdef-") == std::string::npos;
      if (header)
        ours = line.size() >= path.size() &&
               line.compare(line.size() - path.size(), path.size(), path) == 0;
      else if (ours && line.rfind("Rss:", 0) == 0)
        resident_kb += std::stoull(line.substr(4));
    }
    std::uint64_t matrices = 0;
    for (const model::PackableMatrix& p :
         model::packable_matrices(const_cast<model::ModelWeights&>(model->weights())))
      matrices += kernels::dtype_bytes(p.matrix->dtype, p.matrix->rows * p.matrix->cols);
    QVERIFY2(resident_kb * 1024 >= matrices,
             qPrintable(QStringLiteral("%1 KiB resident, %2 KiB of matrices")
                            .arg(resident_kb)
                            .arg(matrices / 1024)));
  }

  void absentSettingIsNamed() {
    QTemporaryDir dir;
    const std::string path =
        patched(dir, "qwen3moe-q8_0", "qwen3moe.expert_used_count", "qwen3moe.expert_used_cOunt");
    QVERIFY(!path.empty());
    try {
      model::LoadedModel::load(path);
      QFAIL("loaded without expert_used_count");
    } catch (const model::ModelError& e) {
      const std::string why = e.what();
      QVERIFY2(why.find("qwen3moe.expert_used_count is missing") != std::string::npos, e.what());
    }
  }

  // More layers than the file has tensors: refused before anything is sized by the count.
  void layerCountBeyondTheTensors() {
    QTemporaryDir dir;
    std::string bytes = read_bytes(fixture_path("qwen3moe-q8_0.gguf"));
    const std::string key = "qwen3moe.block_count";
    const std::size_t at = bytes.find(key);
    QVERIFY(at != std::string::npos);
    const std::size_t value_at = at + key.size() + 4;  // after the key, its type (uint32)
    std::uint32_t layers = 0;
    std::memcpy(&layers, bytes.data() + value_at, 4);
    QCOMPARE(layers, 2u);
    layers = 536870913;
    std::memcpy(bytes.data() + value_at, &layers, 4);
    const std::string path = dir.filePath("layers.gguf").toStdString();
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      model::LoadedModel::load(path);
      QFAIL("loaded with half a billion layers");
    } catch (const model::ModelError& e) {
      QVERIFY2(std::string(e.what()).find("says 536870913 layers but the file holds only") !=
                   std::string::npos,
               e.what());
    }
  }

  void otherArchitectureIsRefused() {
    QTemporaryDir dir;
    // general.architecture's value (the keys spell "qwen3moe." with a dot after it).
    std::string bytes = read_bytes(fixture_path("qwen3moe-q8_0.gguf"));
    const std::string value = std::string("\x08\0\0\0\0\0\0\0qwen3moe", 16);
    const std::size_t at = bytes.find(value);
    QVERIFY(at != std::string::npos);
    bytes.replace(at + 8, 8, "qwen2moe");
    const std::string path = dir.filePath("other.gguf").toStdString();
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      model::LoadedModel::load(path);
      QFAIL("loaded another architecture");
    } catch (const model::ModelError& e) {
      const std::string why = e.what();
      QVERIFY2(why.find("its architecture is qwen2moe") != std::string::npos &&
                   why.find("qwen3moe") != std::string::npos,
               e.what());
    }
  }

  void missingTensorIsNamedAsStored() {
    QTemporaryDir dir;
    const std::string path =
        patched(dir, "qwen3moe-q8_0", "blk.1.ffn_up_exps.weight", "blk.1.ffn_up_exps.wEight");
    QVERIFY(!path.empty());
    try {
      model::LoadedModel::load(path);
      QFAIL("loaded without an expert tensor");
    } catch (const model::ModelError& e) {
      const std::string why = e.what();
      QVERIFY2(why.find("blk.1.ffn_up_exps.weight") != std::string::npos &&
                   why.find("is missing") != std::string::npos,
               e.what());
    }
  }

  // A format Tandem does not compute with yet is refused at load, naming the tensor and type.
  void unsupportedFormatIsNamed() {
    QTemporaryDir dir;
    std::string bytes = read_bytes(fixture_path("qwen3moe-q8_0.gguf"));
    const std::string name = "blk.0.ffn_down_exps.weight";
    const std::size_t at = bytes.find(name);
    QVERIFY(at != std::string::npos);
    // The tensor's entry: its name, 3 dims, then its ggml type (8, Q8_0) -> 34 (TQ1_0).
    const std::size_t type_at = at + name.size() + 4 + 3 * 8;
    std::uint32_t type = 0;
    std::memcpy(&type, bytes.data() + type_at, 4);
    QCOMPARE(type, 8u);
    type = 34;
    std::memcpy(bytes.data() + type_at, &type, 4);
    const std::string path = dir.filePath("tq1.gguf").toStdString();
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      model::LoadedModel::load(path);
      QFAIL("loaded a TQ1_0 tensor");
    } catch (const model::ModelError& e) {
      const std::string why = e.what();
      QVERIFY2(why.find(name + " is stored as TQ1_0") != std::string::npos &&
                   why.find("Q4_K") != std::string::npos,
               e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestGgufModel)
#include "tst_gguf_model.moc"
