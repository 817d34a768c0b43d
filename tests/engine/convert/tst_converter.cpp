// tandem convert on the tiny fixtures: a converted folder loads like any model and gives the
// same logits as packing at load time (INT8, INT4: the same bytes), INT4 stays within the
// issue's KL bound of the reference; interruptions resume, damaged files are redone, bad
// inputs are refused with a sentence and leave nothing that looks complete.
#include <sys/resource.h>

#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include "tests/support/logit_divergence.h"

#include "engine/convert/converter.h"
#include "engine/model/model_error.h"
#include "engine/model/safetensors_file.h"
#include "engine/runtime/generator.h"
#include "engine/runtime/loaded_model.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::string fixture(const QString& name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name.toStdString();
}

nlohmann::json expected(const std::string& folder) {
  std::ifstream in(folder + "/expected.json");
  return nlohmann::json::parse(in);
}

// Last-position logits of every fixture prompt.
std::vector<std::vector<float>> logits(const std::string& folder,
                                       const runtime::LoadOptions& options = {}) {
  auto model = runtime::LoadedModel::load(folder, options);
  runtime::NumaPools pool(2, model->pools());
  runtime::Generator generator(*model, pool, 128);
  std::vector<std::vector<float>> out;
  const nlohmann::json cases = expected(folder);
  for (const auto& c : cases["prompts"])
    out.push_back(generator.evaluate(c["ids"].get<std::vector<std::int32_t>>()));
  if (out.empty()) throw std::runtime_error(folder + ": no prompts in expected.json");
  return out;
}

convert::ConvertResult convert_to(
    const std::string& in, const std::string& out, convert::Method method, bool verify = false,
    const std::function<void(const convert::ConvertProgress&)>& progress = {}) {
  convert::ConvertOptions o;
  o.input = in;
  o.output = out;
  o.method = method;
  o.verify = verify;
  o.threads = 2;
  convert::Converter converter(o);
  return converter.run(progress);
}

bool any_temporary_files(const std::string& folder) {
  for (const auto& e : fs::directory_iterator(folder)) {
    if (e.path().extension() == ".tmp") return true;
  }
  return false;
}

}  // namespace

class TestConverter : public QObject {
  Q_OBJECT
 private slots:
  void convertedMatchesLoadTimePacking_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<int>("method");
    // qwen3 ties its output head to the embedding: the head is packed, the embedding kept.
    for (const char* f :
         {"qwen3-moe", "qwen3-moe-bf16-sharded", "mixtral", "mixtral-f16", "deepseek-v3",
          "deepseek-v3-no-q-lora", "deepseek-v3-fp8", "qwen3", "llama"}) {
      QTest::newRow(qPrintable(QStringLiteral("%1 int8").arg(f)))
          << f << int(convert::Method::Int8);
      QTest::newRow(qPrintable(QStringLiteral("%1 int4").arg(f)))
          << f << int(convert::Method::Int4);
      QTest::newRow(qPrintable(QStringLiteral("%1 bf16").arg(f)))
          << f << int(convert::Method::Bf16);
    }
  }

  // The converted folder holds the very bytes load-time packing makes, so the logits are equal.
  void convertedMatchesLoadTimePacking() {
    QFETCH(QString, fixture);
    QFETCH(int, method);
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/converted";
    const convert::ConvertResult r = convert_to(::fixture(fixture), out, convert::Method(method));
    QVERIFY(!r.resumed);
    QVERIFY(r.bytes_written > 0);
    QVERIFY(r.peak_memory_bytes > 0);
    QVERIFY(!any_temporary_files(out));
    auto model = runtime::LoadedModel::load(out);
    QVERIFY(model->converted());
    runtime::LoadOptions packed;
    packed.cpu_format = method == int(convert::Method::Int8)   ? runtime::CpuFormat::Int8
                        : method == int(convert::Method::Int4) ? runtime::CpuFormat::Int4
                                                               : runtime::CpuFormat::Bf16;
    QCOMPARE(model->cpu_format(), packed.cpu_format);
    QCOMPARE(model->packed_bytes(),
             runtime::LoadedModel::load(::fixture(fixture), packed)->packed_bytes());
    model.reset();
    const auto got = logits(out);
    const auto want = logits(::fixture(fixture), packed);
    QCOMPARE(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) QCOMPARE(got[i], want[i]);
  }

  void convertedStaysCloseToReference_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<int>("method");
    QTest::addColumn<double>("maxMeanKl");
    for (const char* f : {"qwen3-moe", "mixtral", "deepseek-v3", "llama"}) {
      QTest::newRow(qPrintable(QStringLiteral("%1 int8").arg(f)))
          << f << int(convert::Method::Int8) << 0.01;
      QTest::newRow(qPrintable(QStringLiteral("%1 int4").arg(f)))
          << f << int(convert::Method::Int4) << 0.05;
    }
  }

  // The accuracy targets: mean KL of next-token distributions against the source.
  void convertedStaysCloseToReference() {
    QFETCH(QString, fixture);
    QFETCH(int, method);
    QFETCH(double, maxMeanKl);
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/converted";
    convert_to(::fixture(fixture), out, convert::Method(method));
    const auto reference = logits(::fixture(fixture));
    const auto got = logits(out);
    double sum = 0;
    QCOMPARE(got.size(), reference.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      sum += tandem::test::kl_divergence_of_logits(reference[i], got[i]);
    }
    const double mean = sum / static_cast<double>(got.size());
    qInfo("mean KL %.6f", mean);
    QVERIFY2(mean <= maxMeanKl, qPrintable(QString::number(mean)));
  }

  void manifestDescribesEveryPackedTensor() {
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/converted";
    convert_to(fixture("qwen3-moe"), out, convert::Method::Int4);
    const convert::Manifest m = convert::read_manifest(out);
    QVERIFY(m.complete);
    QCOMPARE(m.method, convert::Method::Int4);
    QCOMPARE(m.group, kernels::kDefaultInt4Group);
    QCOMPARE(m.pools, 1);
    QCOMPARE(m.source_files.size(), std::size_t(1));
    QCOMPARE(m.source_files[0].header_sha256.size(), std::size_t(64));
    QCOMPARE(m.files.size(), std::size_t(5));  // base, three layers, output head
    int int4 = 0;
    for (const auto& [name, t] : m.tensors) {
      const model::SafetensorsFile file(out + "/" + t.file);
      const auto& info = file.tensors().at(name + std::string(model::kPackedTensorSuffix));
      QCOMPARE(info.begin, t.offset);
      QCOMPARE(info.end - info.begin, t.size);
      const auto& scale = file.tensors().at(name + std::string(model::kPackedScaleSuffix));
      QCOMPARE(scale.begin, t.scale_offset);
      // Routed experts are INT4; attention and the output head INT8.
      const bool expert = name.find(".experts.") != std::string::npos;
      QCOMPARE(t.format, expert ? kernels::PackedFormat::Int4 : kernels::PackedFormat::Int8);
      int4 += expert;
    }
    QVERIFY(int4 > 0);
    for (const char* copied :
         {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
      QVERIFY2(fs::exists(out + "/" + copied), copied);
    }
  }

  void verifyReportsEveryTensor_data() {
    QTest::addColumn<int>("method");
    QTest::addColumn<double>("maxError");
    QTest::newRow("int8") << int(convert::Method::Int8) << 0.01;
    QTest::newRow("int4") << int(convert::Method::Int4) << 0.15;
    QTest::newRow("bf16") << int(convert::Method::Bf16) << 0.005;
  }

  void verifyReportsEveryTensor() {
    QFETCH(int, method);
    QFETCH(double, maxError);
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/converted";
    const auto r = convert_to(fixture("mixtral"), out, convert::Method(method), true);
    QCOMPARE(r.verification.size(), convert::read_manifest(out).tensors.size());
    for (const auto& c : r.verification) {
      QVERIFY2(c.relative_error > 0 && c.relative_error < maxError,
               qPrintable(QString::fromStdString(c.name)));
    }
  }

  void progressCountsEveryByte() {
    QTemporaryDir dir;
    std::uint64_t last = 0, total = 0;
    int calls = 0;
    convert_to(fixture("deepseek-v3"), dir.path().toStdString() + "/c", convert::Method::Int8,
               false, [&](const convert::ConvertProgress& p) {
                 QVERIFY(p.bytes_done >= last);
                 QCOMPARE(p.layers, 3);
                 QVERIFY(p.layer >= 0 && p.layer < 3);
                 QVERIFY(!p.tensor.empty());
                 last = p.bytes_done;
                 total = p.bytes_total;
                 ++calls;
               });
    QVERIFY(calls > 10);
    QCOMPARE(last, total);
  }

  // Cancelled midway: nothing looks complete and the loader says so; the next run keeps the
  // finished files, redoes a damaged one and gives the same folder as an uninterrupted run.
  void cancelThenResume() {
    QTemporaryDir dir;
    const std::string whole = dir.path().toStdString() + "/whole";
    const std::string out = dir.path().toStdString() + "/resumed";
    convert_to(fixture("qwen3-moe"), whole, convert::Method::Int8);

    convert::ConvertOptions o;
    o.input = fixture("qwen3-moe");
    o.output = out;
    o.method = convert::Method::Int8;
    {
      convert::Converter converter(o);
      int tensors = 0;
      QVERIFY_THROWS_EXCEPTION(convert::ConvertCancelled,
                               converter.run([&](const convert::ConvertProgress& p) {
                                 if (p.layer == 1 && ++tensors == 2) converter.cancel();
                               }));
    }
    QVERIFY(!any_temporary_files(out));
    QVERIFY(!convert::read_manifest(out).complete);
    try {
      runtime::LoadedModel::load(out);
      QFAIL("an unfinished conversion loaded");
    } catch (const model::ModelError& e) {
      QVERIFY2(std::string(e.what()).find("did not finish") != std::string::npos, e.what());
    }
    const auto finished = convert::read_manifest(out).files;
    QCOMPARE(finished.size(), std::size_t(2));  // base and layer 0
    {
      // Damage the finished layer file: the resume must notice and redo it.
      std::fstream f(out + "/layer-00000.safetensors",
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-1, std::ios::end);
      f.put('\x5a');
    }
    const auto r = convert::Converter(o).run({});
    QVERIFY(r.resumed);
    QVERIFY(convert::read_manifest(out).complete);
    for (const char* name : {"base.safetensors", "layer-00000.safetensors",
                             "layer-00001.safetensors", "output.safetensors"}) {
      std::ifstream a(whole + "/" + name, std::ios::binary), b(out + "/" + name, std::ios::binary);
      QVERIFY2(
          std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b), {}),
          name);
    }
    QCOMPARE(logits(out), logits(whole));
  }

  void badInputsAreRefusedWithASentence_data() {
    QTest::addColumn<QString>("input");
    QTest::addColumn<int>("method");
    QTest::addColumn<int>("group");
    QTest::addColumn<int>("pools");
    QTest::addColumn<QString>("says");
    const QString model = QString::fromStdString(fixture("qwen3-moe"));
    QTest::newRow("missing folder") << QStringLiteral("/nonexistent/model")
                                    << int(convert::Method::Int8) << 0 << 1 << "not a folder";
    QTest::newRow("no config.json") << QString::fromStdString(std::string(TANDEM_TEST_DATA_DIR))
                                    << int(convert::Method::Int8) << 0 << 1 << "not a model folder";
    QTest::newRow("pools") << model << int(convert::Method::Int8) << 0 << 2 << "--pools 1";
    QTest::newRow("group for int8")
        << model << int(convert::Method::Int8) << 64 << 1 << "int8 and bf16";
    QTest::newRow("group not a multiple of 8")
        << model << int(convert::Method::Int4) << 12 << 1 << "multiple of 8";
  }

  void badInputsAreRefusedWithASentence() {
    QFETCH(QString, input);
    QFETCH(int, method);
    QFETCH(int, group);
    QFETCH(int, pools);
    QFETCH(QString, says);
    QTemporaryDir dir;
    convert::ConvertOptions o;
    o.input = input.toStdString();
    o.output = dir.path().toStdString() + "/out";
    o.method = convert::Method(method);
    o.group = group;
    o.pools = pools;
    for (int attempt = 0; attempt < 2; ++attempt) {
      try {
        if (attempt == 0) {
          convert::estimate_conversion(o);
        } else {
          convert::Converter(o).run({});
        }
        QFAIL("accepted");
      } catch (const convert::ConvertError& e) {
        QVERIFY2(QString::fromUtf8(e.what()).contains(says), e.what());
        QVERIFY2(QString::fromUtf8(e.what()).endsWith(QLatin1Char('.')), e.what());
      }
    }
    QVERIFY(!fs::exists(o.output));
  }

  // A write that fails midway (here a file-size limit standing in for a full disk): a
  // sentence, no temporary file left, and a manifest that does not say complete.
  void failedWriteLeavesNothingThatLooksComplete() {
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/c";
    rlimit saved{};
    QVERIFY(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    std::signal(SIGXFSZ, SIG_IGN);  // fail the write with EFBIG instead of killing the test
    rlimit small = saved;
    small.rlim_cur = 100 * 1024;  // the manifest fits, a layer file (126 KB) does not
    QVERIFY(setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      convert_to(fixture("qwen3-moe"), out, convert::Method::Int8);
    } catch (const model::ModelError& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, SIG_DFL);
    QVERIFY2(message.find("the disk may be full") != std::string::npos, message.c_str());
    QVERIFY(!any_temporary_files(out));
    QVERIFY(!convert::read_manifest(out).complete);
    // With room again, the same command finishes the job.
    QVERIFY(convert_to(fixture("qwen3-moe"), out, convert::Method::Int8).resumed);
    QVERIFY(runtime::LoadedModel::load(out)->converted());
  }

  void refusesAFolderThatIsNotEmpty() {
    QTemporaryDir dir;
    std::ofstream(dir.path().toStdString() + "/notes.txt") << "mine";
    convert::ConvertOptions o;
    o.input = fixture("qwen3-moe");
    o.output = dir.path().toStdString();
    try {
      convert::Converter(o).run({});
      QFAIL("accepted");
    } catch (const convert::ConvertError& e) {
      QVERIFY2(std::string(e.what()).find("not empty") != std::string::npos, e.what());
    }
    QVERIFY(!fs::exists(dir.path().toStdString() + "/" + convert::kManifestName));
  }

  void refusesToResumeWithOtherSettings() {
    QTemporaryDir dir;
    const std::string out = dir.path().toStdString() + "/c";
    convert_to(fixture("qwen3-moe"), out, convert::Method::Int8);
    try {
      convert_to(fixture("qwen3-moe"), out, convert::Method::Int4);
      QFAIL("accepted");
    } catch (const convert::ConvertError& e) {
      QVERIFY2(std::string(e.what()).find("other settings") != std::string::npos, e.what());
    }
    QVERIFY(convert::read_manifest(out).complete);
    QCOMPARE(convert::read_manifest(out).method, convert::Method::Int8);
  }
};

QTEST_GUILESS_MAIN(TestConverter)
#include "tst_converter.moc"
