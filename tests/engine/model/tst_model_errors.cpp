// Every bad input a user can hand the loader gets a sentence that names the file (and the
// tensor) and says what to do; none crashes.
#include <sys/wait.h>
#include <unistd.h>
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>
#include "engine/model/mapped_file.h"

#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"

using namespace tandem;
using nlohmann::json;

namespace {

const QString kFixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");

QString copyFixture(const QTemporaryDir& dir, const QString& from = kFixture) {
  const QString to = dir.path() + "/model";
  QDir().mkpath(to);
  for (const QString& f : QDir(from).entryList(QDir::Files))
    QFile::copy(from + "/" + f, to + "/" + f);
  for (const QString& f : QDir(to).entryList(QDir::Files))
    QFile(to + "/" + f).setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner);
  return to;
}

QString loadError(const QString& folder) {
  try {
    model::LoadedModel::load(folder.toStdString());
  } catch (const model::ModelError& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

// The safetensors header of `file` as JSON, and the byte offset where data begins.
json readHeader(const QString& file, qint64& dataStart) {
  QFile f(file);
  f.open(QIODevice::ReadOnly);
  const QByteArray all = f.readAll();
  quint64 n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(all[i]);
  dataStart = 8 + static_cast<qint64>(n);
  return json::parse(all.mid(8, static_cast<qsizetype>(n)).toStdString());
}

// Rewrites the header of `file` (keeping the data bytes) after `edit` changes it.
void editHeader(const QString& file, const std::function<void(json&)>& edit) {
  qint64 start = 0;
  json header = readHeader(file, start);
  edit(header);
  QFile f(file);
  f.open(QIODevice::ReadOnly);
  const QByteArray data = f.readAll().mid(start);
  f.close();
  const std::string text = header.dump();
  QByteArray out(8, '\0');
  quint64 n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += QByteArray::fromStdString(text);
  out += data;
  f.open(QIODevice::WriteOnly | QIODevice::Truncate);
  f.write(out);
}

void editConfig(const QString& folder, const std::function<void(json&)>& edit) {
  QFile f(folder + "/config.json");
  f.open(QIODevice::ReadOnly);
  json config = json::parse(f.readAll().toStdString());
  f.close();
  edit(config);
  f.open(QIODevice::WriteOnly | QIODevice::Truncate);
  f.write(QByteArray::fromStdString(config.dump(2)));
}

void writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  f.open(QIODevice::WriteOnly | QIODevice::Truncate);
  f.write(bytes);
}

}  // namespace

class TestModelErrors : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString folder_;
  QString weights_;

 private slots:
  void init() {
    QDir(dir_.path() + "/model").removeRecursively();
    folder_ = copyFixture(dir_);
    weights_ = folder_ + "/model.safetensors";
  }

  void theFixtureLoads() { QCOMPARE(loadError(folder_), QString()); }

  // A mapped file cut short under Tandem: reading past its new end ends the process with a
  // sentence naming the file and status 74, not a crash (SIGBUS caught).
  void aFileCutShortWhileMappedIsSaidNotCrashed() {
    QTemporaryDir dir;
    const QString path = dir.filePath("weights.bin");
    {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(QByteArray(1 << 20, 'w'));
    }
    tandem::model::MappedFile mapped(path.toStdString());
    QCOMPARE(mapped.size_bytes(), std::size_t{1} << 20);
    QVERIFY(::truncate(path.toUtf8().constData(), 0) == 0);
    int err[2];
    QVERIFY(::pipe(err) == 0);
    const pid_t child = ::fork();
    if (child == 0) {
      ::dup2(err[1], STDERR_FILENO);
      volatile const std::byte* p = mapped.bytes().data();
      volatile std::byte sum = p[(1 << 20) - 1];  // past the end now: SIGBUS
      (void)sum;
      ::_exit(0);
    }
    ::close(err[1]);
    std::string said;
    char buffer[512];
    for (ssize_t n; (n = ::read(err[0], buffer, sizeof buffer)) > 0;) said.append(buffer, n);
    ::close(err[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    QVERIFY2(WIFEXITED(status), "the process crashed instead of saying why");
    QCOMPARE(WEXITSTATUS(status), tandem::model::kMappedFileChangedExit);
    QVERIFY2(said.find(path.toStdString()) != std::string::npos &&
                 said.find("cut short") != std::string::npos,
             said.c_str());
  }

  void unsupportedArchitecture() {
    editConfig(folder_, [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("config.json") && e.contains("GPT2LMHeadModel is not supported"),
             qPrintable(e));
    QVERIFY(e.contains("Qwen3MoeForCausalLM") && e.contains("DeepseekV3ForCausalLM") &&
            e.contains("MixtralForCausalLM"));
  }

  void invalidConfigJson() {
    writeFile(folder_ + "/config.json", "{\"architectures\": [\"Qwen3MoeForCausalLM\"");
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("config.json: not valid JSON"), qPrintable(e));
  }

  void missingConfig() {
    QFile::remove(folder_ + "/config.json");
    QVERIFY2(loadError(folder_).contains("config.json: missing"), qPrintable(loadError(folder_)));
  }

  void badConfigValue() {
    editConfig(folder_, [](json& c) { c["num_key_value_heads"] = 3; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("multiple of num_key_value_heads"), qPrintable(e));
  }

  // A layer count no model comes near is a damaged file, refused before anything is sized by
  // it (found by fuzzing the GGUF loader, which builds the same spec).
  void absurdLayerCount() {
    editConfig(folder_, [](json& c) { c["num_hidden_layers"] = 536870913; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("num_hidden_layers is 536870913") && e.contains("damaged"), qPrintable(e));
  }

  // Settings that matter are read in either transformers spelling and never guessed: what is
  // missing or contradictory gets a sentence naming the setting.
  void settingsThatMatter_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("edit");
    QTest::addColumn<QString>("words");
    QTest::newRow("no rope base (4.x)") << "qwen3-moe"
                                        << "drop rope_theta"
                                        << "\"rope_parameters\" (transformers 5)";
    QTest::newRow("no rope base (5.x)") << "qwen3-moe-tf5"
                                        << "drop rope_parameters.rope_theta"
                                        << "has no \"rope_theta\"";
    QTest::newRow("spellings disagree") << "qwen3-moe-tf5"
                                        << "add rope_theta 5"
                                        << "disagree";
    QTest::newRow("experts in neither spelling") << "qwen3-moe-tf5"
                                                 << "drop num_local_experts"
                                                 << "\"num_experts\" (\"num_local_experts\"";
    QTest::newRow("experts disagree") << "qwen3-moe-tf5"
                                      << "add num_experts 5"
                                      << "disagree";
    QTest::newRow("no rms eps") << "qwen3-moe"
                                << "drop rms_norm_eps"
                                << "\"rms_norm_eps\" is missing";
    QTest::newRow("no head_dim for Qwen3") << "qwen3-tf5"
                                           << "drop head_dim"
                                           << "\"head_dim\" is missing";
    QTest::newRow("no q_lora_rank") << "deepseek-v3-tf5"
                                    << "drop q_lora_rank"
                                    << "null for none";
    QTest::newRow("no n_group") << "deepseek-v3"
                                << "drop n_group"
                                << "\"n_group\" is missing";
    // DeepSeek-V2's router: how experts are chosen and whether weights are renormalised;
    // DeepSeek-V3's is sigmoid whatever a config says.
    QTest::newRow("DeepSeek-V2 without topk_method") << "deepseek-v2"
                                                     << "drop topk_method"
                                                     << "\"topk_method\" is missing";
    QTest::newRow("DeepSeek-V2 with V3's topk_method") << "deepseek-v2-tf5"
                                                       << "set topk_method noaux_tc"
                                                       << "\"greedy\" or \"group_limited_greedy\"";
    QTest::newRow("DeepSeek-V2 without norm_topk_prob") << "deepseek-v2"
                                                        << "drop norm_topk_prob"
                                                        << "\"norm_topk_prob\" is missing";
    QTest::newRow("DeepSeek-V2 with sigmoid scores") << "deepseek-v2"
                                                     << "set scoring_func sigmoid"
                                                     << "scores experts by softmax";
    QTest::newRow("DeepSeek-V2 with experts every other layer") << "deepseek-v2"
                                                                << "add moe_layer_freq 2"
                                                                << "moe_layer_freq is 2";
    QTest::newRow("DeepSeek-V3 with softmax scores") << "deepseek-v3"
                                                     << "set scoring_func softmax"
                                                     << "scores experts by sigmoid";
    // Qwen3-Next: the routing's renormalisation and which layers are linear.
    QTest::newRow("Qwen3-Next without norm_topk_prob") << "qwen3-next"
                                                       << "drop norm_topk_prob"
                                                       << "\"norm_topk_prob\" is missing";
    QTest::newRow("Qwen3-Next without layer kinds") << "qwen3-next-tf5"
                                                    << "drop layer_types"
                                                    << "\"full_attention_interval\" is missing";
    QTest::newRow("Qwen3-Next with too few layer kinds") << "qwen3-next"
                                                         << "trim layer_types"
                                                         << "lists 3 layers but the model has 4";
    QTest::newRow("unknown rope type") << "llama-tf5"
                                       << "rope type ntk"
                                       << "\"ntk\" is not supported";
  }
  void settingsThatMatter() {
    QFETCH(QString, fixture);
    QFETCH(QString, edit);
    QFETCH(QString, words);
    QTemporaryDir dir;
    const QString folder =
        copyFixture(dir, QStringLiteral(TANDEM_TEST_DATA_DIR "/models/") + fixture);
    QCOMPARE(loadError(folder), QString());  // the fixture as saved loads
    editConfig(folder, [&](json& c) {
      const QStringList parts = edit.split(QLatin1Char(' '));
      const std::string key = parts[1].toStdString();
      if (parts[0] == QLatin1String("drop") && key == "rope_parameters.rope_theta")
        c["rope_parameters"].erase("rope_theta");
      else if (parts[0] == QLatin1String("drop"))
        c.erase(key);
      else if (parts[0] == QLatin1String("add"))
        c[key] = parts[2].toInt();
      else if (parts[0] == QLatin1String("set"))
        c[key] = parts[2].toStdString();
      else if (parts[0] == QLatin1String("trim"))
        c[key].erase(c[key].size() - 1);
      else
        c["rope_parameters"]["rope_type"] = parts[2].toStdString();
    });
    const QString e = loadError(folder);
    QVERIFY2(e.contains(words) && e.contains(QLatin1String("config.json")), qPrintable(e));
  }

  // A checkpoint quantized some other way must be refused by name: its packed integers read
  // as weights would give fluent nonsense.
  void quantizationsNotRead_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("quantization");
    QTest::addColumn<QString>("words");
    QTest::newRow("gptq") << "glm4-moe-fp8"
                          << R"({"quant_method": "gptq", "bits": 4})"
                          << "quantized with \"gptq\"";
    QTest::newRow("mxfp4") << "glm4-moe-fp8"
                           << R"({"quant_method": "mxfp4"})"
                           << "quantized with \"mxfp4\"";
    QTest::newRow("unnamed") << "glm4-moe-fp8"
                             << R"({"bits": 4})"
                             << "an unnamed method";
    QTest::newRow("int4 compressed-tensors")
        << "glm4-moe-fp8"
        << R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups":
              {"group_0": {"weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}})"
        << "\"pack-quantized\"";
    QTest::newRow("per-tensor compressed-tensors")
        << "glm4-moe-fp8"
        << R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups":
              {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}}}})"
        << "by \"tensor\"";
    QTest::newRow("per-tensor fp8") << "deepseek-v3-fp8"
                                    << R"({"quant_method": "fp8"})"
                                    << "one scale per tensor";
    QTest::newRow("e5m2")
        << "deepseek-v3-fp8"
        << R"({"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [32, 32]})"
        << "e4m3 only";
    // The config and the tensors disagree: the block fixture's scales under a channel config.
    QTest::newRow("channel config, block scales")
        << "deepseek-v3-fp8"
        << R"({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups":
              {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})"
        << "_scale) are missing";
    QTest::newRow("wrong block size")
        << "deepseek-v3-fp8"
        << R"({"quant_method": "fp8", "weight_block_size": [128, 128]})"
        << "in blocks of 128x128";
  }
  void quantizationsNotRead() {
    QFETCH(QString, fixture);
    QFETCH(QString, quantization);
    QFETCH(QString, words);
    QTemporaryDir dir;
    const QString folder =
        copyFixture(dir, QStringLiteral(TANDEM_TEST_DATA_DIR "/models/") + fixture);
    QCOMPARE(loadError(folder), QString());
    editConfig(folder, [&](json& c) {
      c["quantization_config"] = json::parse(quantization.toStdString());
    });
    const QString e = loadError(folder);
    QVERIFY2(e.contains(words), qPrintable(e));
  }

  // Where each FP8 layout puts its scales: channel scales span the whole row, whatever its
  // width (the fixtures' rows are narrower than one 128 block, so this is asserted here).
  void fp8ScaleLayouts_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("quantization");  // empty: as saved
    QTest::addColumn<QString>("suffix");
    QTest::addColumn<int>("blockRows");
    QTest::addColumn<int>("blockCols");
    QTest::newRow("block fp8") << "deepseek-v3-fp8"
                               << ""
                               << "_scale_inv" << 32 << 32;
    QTest::newRow("channel fp8") << "glm4-moe-fp8"
                                 << ""
                                 << "_scale" << 1 << 0;
    QTest::newRow("compressed-tensors blocks")
        << "glm4-moe-fp8"
        << R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"format": "float-quantized",
              "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 64]}}}})"
        << "_scale" << 128 << 64;
    QTest::newRow("not quantized") << "glm4-moe"
                                   << ""
                                   << "_scale_inv" << 128 << 128;
  }
  void fp8ScaleLayouts() {
    QFETCH(QString, fixture);
    QFETCH(QString, quantization);
    QFETCH(QString, suffix);
    QFETCH(int, blockRows);
    QFETCH(int, blockCols);
    QFile f(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/") + fixture + "/config.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    json config = json::parse(f.readAll().toStdString());
    if (!quantization.isEmpty())
      config["quantization_config"] = json::parse(quantization.toStdString());
    const model::ModelSpec spec = model::parse_model_spec(config, "config.json");
    QCOMPARE(QString::fromStdString(spec.fp8.suffix), suffix);
    QCOMPARE(spec.fp8.block_rows, blockRows);
    QCOMPARE(spec.fp8.block_cols, blockCols);
  }

  // Qwen3-Next's fused projections in FP8 blocks that straddle their parts: regrouping the
  // rows would need other scales, so the load says so instead of computing wrong numbers.
  void qwen3NextFp8BlocksThatStraddleParts() {
    QDir(dir_.path() + "/model").removeRecursively();
    const QString folder =
        copyFixture(dir_, QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-next-fp8"));
    QCOMPARE(loadError(folder), QString());
    editConfig(folder, [](json& c) { c["quantization_config"]["weight_block_size"] = {32, 32}; });
    const QString e = loadError(folder);
    QVERIFY2(e.contains("in_proj_qkvz.weight is FP8 in blocks of 32 rows, which do not line up "
                        "with its parts"),
             qPrintable(e));
    QVERIFY2(e.contains("Use the BF16 release."), qPrintable(e));
  }

  void missingTensor() {
    editHeader(weights_, [](json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("tensor model.layers.1.mlp.up_proj.weight is missing"), qPrintable(e));
  }

  void wrongShape() {
    editConfig(folder_, [](json& c) { c["moe_intermediate_size"] = 44; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("model.safetensors: tensor model.layers.0.mlp.experts.0.gate_proj.weight "
                        "has shape [40, 96] "
                        "but config.json implies [44, 96]"),
             qPrintable(e));
  }

  void unsupportedDtype() {
    editHeader(weights_, [](json& h) { h["model.norm.weight"]["dtype"] = "F64"; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("model.safetensors: tensor model.norm.weight has dtype F64") &&
                 e.contains("BF16"),
             qPrintable(e));
  }

  void headerLengthBeyondFile() {
    QFile f(weights_);
    f.open(QIODevice::ReadWrite);
    const quint64 huge = 1ull << 40;
    QByteArray len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((huge >> (8 * i)) & 0xff);
    f.write(len);
    f.close();
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("model.safetensors: the header claims") && e.contains("truncated"),
             qPrintable(e));
  }

  void invalidHeaderJson() {
    QFile f(weights_);
    f.open(QIODevice::ReadWrite);
    f.seek(8);
    f.write("#");
    f.close();
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("model.safetensors: the header is not valid JSON"), qPrintable(e));
  }

  void offsetsOutOfRange() {
    editHeader(weights_, [](json& h) {
      auto& t = h["model.norm.weight"];
      const std::uint64_t size =
          t["data_offsets"][1].get<std::uint64_t>() - t["data_offsets"][0].get<std::uint64_t>();
      t["data_offsets"] = {100000000ull, 100000000ull + size};
    });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("tensor model.norm.weight lies at bytes") && e.contains("outside"),
             qPrintable(e));
  }

  void overlappingTensors() {
    editHeader(weights_, [](json& h) {
      const auto a = h["model.norm.weight"]["data_offsets"];
      h["model.layers.0.input_layernorm.weight"]["data_offsets"] = a;
    });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("overlap"), qPrintable(e));
  }

  void sizeNotMatchingShape() {
    editHeader(weights_, [](json& h) { h["model.norm.weight"]["shape"] = {95}; });
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("tensor model.norm.weight has 384 bytes but shape [95]"), qPrintable(e));
  }

  void truncatedFile() {
    QFile f(weights_);
    QVERIFY(f.resize(f.size() - 1000));
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("model.safetensors") && e.contains("truncated"), qPrintable(e));
  }

  void tinyFile() {
    writeFile(weights_, "abc");
    QVERIFY2(loadError(folder_).contains("too short to be a safetensors file"),
             qPrintable(loadError(folder_)));
  }

  void pickleCheckpointRefused() {
    QFile::remove(weights_);
    writeFile(folder_ + "/pytorch_model.bin", QByteArray("\x80\x02}q\x00.", 6));
    const QString e = loadError(folder_);
    QVERIFY2(e.contains("pytorch_model.bin: this is a PyTorch pickle checkpoint") &&
                 e.contains("arbitrary code") && e.contains("safetensors"),
             qPrintable(e));
  }

  void noWeightsAtAll() {
    QFile::remove(weights_);
    QVERIFY2(loadError(folder_).contains("no .safetensors weights in this folder"),
             qPrintable(loadError(folder_)));
  }

  void missingShard() {
    QTemporaryDir other;
    const QString sharded =
        copyFixture(other, QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe-bf16-sharded"));
    QVERIFY(QFile::remove(sharded + "/model-00002-of-00005.safetensors"));
    const QString e = loadError(sharded);
    QVERIFY2(e.contains("model-00002-of-00005.safetensors: this shard is listed in "
                        "model.safetensors.index.json but missing"),
             qPrintable(e));
  }

  void notAFolder() {
    QVERIFY2(loadError(dir_.path() + "/nowhere").contains("no such model folder"),
             qPrintable(loadError(dir_.path() + "/nowhere")));
  }
};

QTEST_GUILESS_MAIN(TestModelErrors)
#include "tst_model_errors.moc"
