// `tandem recommend -m ORG/NAME` as a user runs it: catalog repositories answered with no
// network at all, any other repository from a local stand-in Hub (its config.json and file
// list, nothing else, nothing written), and a sentence for each failure a user can cause.
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/plan/model_shape.h"
#include "hub_fixture_server.h"
#include "tests/support/tandem_process.h"

using tandem::test::HubFixtureServer;
using tandem::test::Run;

namespace {

const QString kMixtral = QStringLiteral("mistralai/Mixtral-8x7B-Instruct-v0.1");
const QString kBert = QStringLiteral("google-bert/bert-base-uncased");
// Nothing listens there: a command that used the network would fail.
const QString kUnreachable = QStringLiteral("http://127.0.0.1:1");

std::string hub_config_text(const char* name) {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hub/" + name + ".json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

QString hardware(const char* name) {
  return QStringLiteral(TANDEM_TEST_DATA_DIR "/hardware/") + QLatin1String(name) +
         QStringLiteral(".json");
}

QStringList files_under(const QString& dir) {
  QStringList found;
  QDirIterator it(dir, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
  while (it.hasNext()) found << it.next();
  return found;
}

nlohmann::json json_of(const Run& r) {
  return nlohmann::json::parse(r.out.toStdString(), nullptr, false);
}

}  // namespace

class TestRecommendCli : public QObject {
  Q_OBJECT
  std::unique_ptr<QTemporaryDir> home_;
  std::unique_ptr<HubFixtureServer> server_;
  std::uint64_t mixtral_weights_ = 0;

  QProcessEnvironment env(const QString& endpoint, const QString& token = {}) const {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert(QStringLiteral("HOME"), home_->path());
    e.insert(QStringLiteral("XDG_DATA_HOME"), home_->path() + "/data");
    e.insert(QStringLiteral("XDG_CONFIG_HOME"), home_->path() + "/config");
    e.insert(QStringLiteral("XDG_CACHE_HOME"), home_->path() + "/cache");
    e.insert(QStringLiteral("TANDEM_LOG_TO_FILE"), QStringLiteral("0"));
    e.insert(QStringLiteral("HF_ENDPOINT"), endpoint);
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "http_proxy", "https_proxy",
                          "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
      e.remove(QString::fromLatin1(v));
    }
    e.insert(QStringLiteral("no_proxy"), QStringLiteral("127.0.0.1"));
    if (!token.isEmpty()) e.insert(QStringLiteral("HF_TOKEN"), token);
    return e;
  }
  QString hub() const { return QString::fromStdString(server_->endpoint()); }
  Run recommend(const QStringList& args, const QProcessEnvironment& e,
                const QString& working_directory = {}) const {
    return tandem::test::run_tandem(QStringList{QStringLiteral("recommend")} + args, e,
                                    working_directory);
  }

 private slots:
  void init() {
    home_ = std::make_unique<QTemporaryDir>();
    server_ = std::make_unique<HubFixtureServer>();
    const std::string mixtral = hub_config_text("mixtral-8x7b-instruct");
    mixtral_weights_ = 2 * static_cast<std::uint64_t>(tandem::plan::model_shape_from_config(
                                                          nlohmann::json::parse(mixtral), "test")
                                                          .total_params());
    server_->add_model_repo(kMixtral.toStdString(), mixtral, mixtral_weights_, 19);
    server_->add_model_repo(kBert.toStdString(), hub_config_text("bert-base-uncased"),
                            440'000'000ull, 3);
  }
  void cleanup() {
    server_.reset();
    home_.reset();
  }

  void catalogRepositoryWithoutAnyNetwork() {
    const Run r = recommend(
        {"-m", "Qwen/Qwen3-30B-A3B", "--hardware", hardware("ryzen-avx512-16gb"), "--json"},
        env(kUnreachable));
    QCOMPARE(r.code, 0);
    const auto doc = json_of(r);
    QVERIFY2(doc.is_object(), qPrintable(r.out + r.err));
    QCOMPARE(doc["verdict"].get<std::string>(), std::string("fits"));
    QCOMPARE(doc["source"]["origin"].get<std::string>(), std::string("catalog"));
    QCOMPARE(doc["source"]["catalog_id"].get<std::string>(), std::string("qwen3-30b-a3b"));
    QCOMPARE(doc["source"]["repo"].get<std::string>(), std::string("Qwen/Qwen3-30B-A3B"));
    QCOMPARE(doc["architecture"].get<std::string>(), std::string("Qwen3MoeForCausalLM"));

    // Any case; the text says where the answer came from.
    const Run lower =
        recommend({"-m", "qwen/qwen3-30b-a3b", "--hardware", hardware("ryzen-avx512-16gb")},
                  env(kUnreachable));
    QCOMPARE(lower.code, 0);
    QVERIFY2(lower.out.contains(QLatin1String(
                 "Qwen/Qwen3-30B-A3B: catalog entry qwen3-30b-a3b (answered offline)")),
             qPrintable(lower.out));
    QVERIFY2(lower.out.contains(QLatin1String("Stored as BF16")), qPrintable(lower.out));
    QVERIFY(lower.err.isEmpty());

    // The FP8 release of a catalog model is the same entry, stored as FP8.
    const Run fp8 = recommend(
        {"-m", "zai-org/GLM-4.5-Air-FP8", "--hardware", hardware("xeon-2s-amx-24gb"), "--json"},
        env(kUnreachable));
    QVERIFY2(fp8.code == 0 || fp8.code == 3, qPrintable(fp8.err));
    const auto fp8_doc = json_of(fp8);
    QCOMPARE(fp8_doc["source"]["catalog_id"].get<std::string>(), std::string("glm-4.5-air"));
    QCOMPARE(fp8_doc["source"]["stored_format"].get<std::string>(), std::string("fp8"));
    QCOMPARE(fp8_doc["source"]["repo"].get<std::string>(), std::string("zai-org/GLM-4.5-Air-FP8"));
  }

  void repositoryOutsideTheCatalogFromTheHub() {
    const Run r =
        recommend({"-m", kMixtral, "--hardware", hardware("ryzen-avx512-16gb")}, env(hub()));
    QCOMPARE(r.code, 0);
    QVERIFY2(r.out.contains(kMixtral + ": its config.json and file list, from " + hub()),
             qPrintable(r.out));
    QVERIFY2(r.out.contains(QLatin1String("Stored as BF16 (the weight files hold 2.00 bytes "
                                          "per parameter, torch_dtype bfloat16); 21 files")),
             qPrintable(r.out));
    QVERIFY2(r.out.contains(QLatin1String("MixtralForCausalLM: 46.")), qPrintable(r.out));
    QVERIFY2(r.out.contains(QLatin1String("Verdict: fits")), qPrintable(r.out));
    QVERIFY2(r.err.isEmpty(), qPrintable(r.err));
    // Only the file list and config.json were asked for, and nothing was written.
    const std::string repo = kMixtral.toStdString();
    QCOMPARE(server_->tree_requests(), 1);
    QCOMPARE(server_->file_requests(repo, "config.json").size(), std::size_t{1});
    for (const char* f : {"tokenizer.json", "model-00001-of-00019.safetensors"})
      QCOMPARE(server_->file_requests(repo, f).size(), std::size_t{0});
    QVERIFY2(files_under(home_->path()).isEmpty(),
             qPrintable(files_under(home_->path()).join(' ')));

    const Run json =
        recommend({"-m", kMixtral, "--hardware", hardware("ryzen-avx512-16gb"), "--json", "--save"},
                  env(hub()));
    QCOMPARE(json.code, 0);
    const auto doc = json_of(json);
    QCOMPARE(doc["source"]["origin"].get<std::string>(), std::string("hub"));
    QCOMPARE(doc["source"]["endpoint"].get<std::string>(), server_->endpoint());
    QCOMPARE(doc["source"]["stored_format"].get<std::string>(), std::string("bf16"));
    QCOMPARE(doc["source"]["download_files"].get<int>(), 21);
    QVERIFY(doc["source"]["download_bytes"].get<std::uint64_t>() > mixtral_weights_);
    QCOMPARE(doc["architecture"].get<std::string>(), std::string("MixtralForCausalLM"));
    // --save writes the profile, named as the app names the downloaded folder's, and nothing
    // else.
    const QString profile =
        home_->path() + "/data/Tandem/Tandem/profiles/Mixtral-8x7B-Instruct-v0.1.json";
    QCOMPARE(files_under(home_->path()), QStringList{profile});
  }

  // A GGUF repository of a catalog model: every quantisation's verdict here, the largest that
  // fits planned (or the one asked for), and the download command for it; the Hub is asked
  // for the file list and the start of the planned quantisation's file (its header, to size
  // it exactly: here not a GGUF file, so sized by the listing), nothing else.
  void ggufRepository() {
    const std::string repo = "unsloth/Qwen3-30B-A3B-GGUF";
    const auto add = [&](const std::string& path, std::uint64_t bytes) {
      server_->add_file(repo, path, "gguf");
      server_->set_listed_size(repo, path, bytes);
    };
    add("Qwen3-30B-A3B-UD-Q2_K_XL.gguf", 11'800'000'000ull);
    add("Qwen3-30B-A3B-Q4_K_M.gguf", 18'560'000'000ull);
    add("Qwen3-30B-A3B-Q8_0.gguf", 32'480'000'000ull);
    const Run r = recommend(
        {"-m", QString::fromStdString(repo), "--hardware", hardware("ryzen-avx512-16gb"), "--json"},
        env(hub()));
    QCOMPARE(r.code == 0 || r.code == 3, true);
    const auto doc = json_of(r);
    QCOMPARE(doc["quantization_verdicts"].size(), std::size_t{3});
    QCOMPARE(doc["source"]["origin"].get<std::string>(), std::string("hub"));
    QCOMPARE(doc["source"]["catalog_id"].get<std::string>(), std::string("qwen3-30b-a3b"));
    // The largest that fits is planned.
    std::string largest_fitting;
    for (const auto& q : doc["quantization_verdicts"])
      if (q["verdict"] == "fits") largest_fitting = q["name"].get<std::string>();
    QVERIFY2(!largest_fitting.empty(), r.out.toUtf8().constData());
    QCOMPARE(doc["source"]["gguf_quantization"].get<std::string>(), largest_fitting);
    QCOMPARE(doc["cpu_format"].get<std::string>(), std::string("native"));
    QCOMPARE(server_->tree_requests(), 1);
    QCOMPARE(doc["source"]["gguf_sized_from_headers"].get<bool>(), false);
    for (const char* f : {"Qwen3-30B-A3B-UD-Q2_K_XL.gguf", "Qwen3-30B-A3B-Q4_K_M.gguf",
                          "Qwen3-30B-A3B-Q8_0.gguf"}) {
      const auto read = server_->file_requests(repo, f);
      if (largest_fitting + ".gguf" == std::string(f).substr(14)) {
        QCOMPARE(read.size(), std::size_t{1});
        QVERIFY(read.front().had_range);
      } else {
        QCOMPARE(read.size(), std::size_t{0});
      }
    }

    // GGUF files with real headers: the quantisation planned for is sized from them (the
    // largest that fits, Q8_0, after the header of the default Q4_K_M said what the model is).
    const std::string tiny = "someone/Tiny-MoE-GGUF";
    const auto serve = [&](const std::string& path, const char* fixture) {
      server_->add_file_from(tiny, path,
                             std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + fixture);
    };
    serve("Tiny-MoE-Q8_0.gguf", "qwen3moe-q8_0.gguf");
    serve("Tiny-MoE-Q4_K_M.gguf", "qwen3moe-mixed.gguf");
    const Run sized = recommend(
        {"-m", QString::fromStdString(tiny), "--hardware", hardware("ryzen-avx512-16gb"), "--json"},
        env(hub()));
    QCOMPARE(sized.code, 0);
    const auto sized_doc = json_of(sized);
    QCOMPARE(sized_doc["source"]["gguf_quantization"].get<std::string>(), std::string("Q8_0"));
    QCOMPARE(sized_doc["source"]["gguf_sized_from_headers"].get<bool>(), true);
    QCOMPARE(server_->file_requests(tiny, "Tiny-MoE-Q8_0.gguf").size(), std::size_t{1});

    const Run text = recommend({"-m", QString::fromStdString(repo), "--hardware",
                                hardware("ryzen-avx512-16gb"), "--quant", "q8_0"},
                               env(hub()));
    QVERIFY2(text.out.contains(QLatin1String("Planned for Q8_0 (30.2 GiB to download)")),
             qPrintable(text.out));
    QVERIFY2(text.out.contains(QLatin1String("tandem download unsloth/Qwen3-30B-A3B-GGUF --include "
                                             "\"Qwen3-30B-A3B-Q8_0.gguf\"")),
             qPrintable(text.out));
    const Run wrong = recommend({"-m", QString::fromStdString(repo), "--hardware",
                                 hardware("ryzen-avx512-16gb"), "--quant", "Q3_K_M"},
                                env(hub()));
    QCOMPARE(wrong.code, 1);
    QVERIFY2(wrong.err.contains(QLatin1String("has no quantisation Q3_K_M; it has UD-Q2_K_XL, "
                                              "Q4_K_M, Q8_0")),
             qPrintable(wrong.err));
  }

  void noSuchRepository() {
    const Run r = recommend({"-m", "nobody/no-such-model"}, env(hub()));
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("There is no repository nobody/no-such-model on " + hub()),
             qPrintable(r.err));
    QVERIFY(r.out.isEmpty());
  }

  void gatedRepository_data() {
    QTest::addColumn<bool>("listingPublic");
    QTest::addColumn<QString>("token");
    QTest::addColumn<QString>("expected");
    QTest::newRow("401, no token") << false << ""
                                   << "then add a token (set HF_TOKEN";
    QTest::newRow("401 on config.json") << true << ""
                                        << "then add a token (set HF_TOKEN";
    QTest::newRow("403, a token without access") << true << "hf_other"
                                                 << "refused the token";
  }
  void gatedRepository() {
    QFETCH(bool, listingPublic);
    QFETCH(QString, token);
    QFETCH(QString, expected);
    server_->set_gated(kMixtral.toStdString(), "hf_secret", listingPublic);
    const Run refused = recommend({"-m", kMixtral}, env(hub(), token));
    QCOMPARE(refused.code, 1);
    QVERIFY2(refused.err.contains(expected), qPrintable(refused.err));
    QVERIFY2(refused.err.contains("Accept the licence on the model page (" + hub() + "/" +
                                  kMixtral + ")"),
             qPrintable(refused.err));
    const Run allowed = recommend({"-m", kMixtral, "--hardware", hardware("ryzen-avx512-16gb")},
                                  env(hub(), QStringLiteral("hf_secret")));
    QCOMPARE(allowed.code, 0);
  }

  void architectureTandemDoesNotRun() {
    const Run r = recommend({"-m", kBert}, env(hub()));
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(QLatin1String("the architecture BertForMaskedLM is not supported")),
             qPrintable(r.err));
    QVERIFY2(r.err.contains(QLatin1String("Tandem runs LlamaForCausalLM, ")), qPrintable(r.err));
    QVERIFY2(r.err.contains(QLatin1String("MixtralForCausalLM")), qPrintable(r.err));
  }

  void offlineSaysWhatWorksOffline() {
    const Run r = recommend({"-m", kMixtral}, env(kUnreachable));
    QCOMPARE(r.code, 1);
    QVERIFY2(
        r.err.contains(kUnreachable + " could not be reached to read the files of " + kMixtral),
        qPrintable(r.err));
    QVERIFY2(
        r.err.contains(QLatin1String("the catalog's models (by id or repository: qwen3-30b-a3b")),
        qPrintable(r.err));
    QVERIFY2(r.err.contains(QLatin1String("model folders on this computer still work")),
             qPrintable(r.err));
    // One sentence, not a warning per retry.
    QCOMPARE(r.err.count(QLatin1String("tandem:")), 1);
  }

  void aFolderHereWinsOverTheRepository() {
    QTemporaryDir work;
    QVERIFY(QDir(work.path()).mkpath(kMixtral));
    QVERIFY(QFile::copy(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe/config.json"),
                        work.path() + "/" + kMixtral + "/config.json"));
    const Run r = recommend({"-m", kMixtral, "--hardware", hardware("laptop-avx2"), "--json"},
                            env(hub()), work.path());
    QCOMPARE(r.code, 0);
    const auto doc = json_of(r);
    QCOMPARE(doc["source"]["origin"].get<std::string>(), std::string("folder"));
    QCOMPARE(doc["architecture"].get<std::string>(), std::string("Qwen3MoeForCausalLM"));
    QCOMPARE(server_->tree_requests(), 0);
    const Run help = tandem::test::run_tandem({"recommend", "--help"}, env(hub()));
    QVERIFY2(help.out.contains(QLatin1String("wins over a repository")), qPrintable(help.out));
  }
};

QTEST_GUILESS_MAIN(TestRecommendCli)
#include "tst_recommend_cli.moc"
