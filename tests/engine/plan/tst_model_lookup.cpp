// Finding the model to plan from what the user typed: catalog repositories without the
// network, any other repository from a stand-in Hub's config.json and file list (and
// nothing else of it), the stored format, precedence of local folders, and a sentence for
// every failure a user can cause.
#include <QDir>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"
#include "engine/model/gguf/set.h"
#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"
#include "engine/plan/gguf_shape.h"
#include "engine/plan/model_lookup.h"
#include "hub_fixture_server.h"
#include "tests/support/gguf_split.h"

namespace fs = std::filesystem;
using namespace tandem;
using namespace tandem::plan;
using tandem::test::HubFixtureServer;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string hub_config_text(const char* name) {
  return read_text(std::string(TANDEM_TEST_DATA_DIR) + "/hub/" + name + ".json");
}

std::int64_t params_of(const std::string& config_text) {
  return model_shape_from_config(nlohmann::json::parse(config_text), "test").total_params();
}

hub::HubConfig hub_at(const std::string& endpoint) {
  hub::HubConfig h = hub::hub_config_from(endpoint, "");
  h.token.clear();
  h.connect_timeout_s = 5;
  h.stall_timeout_s = 2;
  h.retry.initial_delay_ms = 20;
  h.retry.max_delay_ms = 100;
  return h;
}

// Nothing listens there: any attempt to use the network fails at once.
const std::string kUnreachable = "http://127.0.0.1:1";

const std::string kMixtral = "mistralai/Mixtral-8x7B-Instruct-v0.1";
const std::string kQwenFp8 = "Qwen/Qwen3-30B-A3B-FP8";
const std::string kBert = "google-bert/bert-base-uncased";
// Mixtral's config with a rotary scaling Tandem does not compute: sized, but not runnable.
const std::string kDynamicRope = "someone/Mixtral-dynamic-rope";

std::string with_dynamic_rope(const std::string& config_text) {
  nlohmann::json c = nlohmann::json::parse(config_text);
  c["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  return c.dump(2);
}

}  // namespace

class TestModelLookup : public QObject {
  Q_OBJECT
  std::unique_ptr<HubFixtureServer> server_;
  std::int64_t mixtral_params_ = 0;

 private slots:
  void init() {
    server_ = std::make_unique<HubFixtureServer>();
    const std::string mixtral = hub_config_text("mixtral-8x7b-instruct");
    mixtral_params_ = params_of(mixtral);
    server_->add_model_repo(kMixtral, mixtral, 2 * static_cast<std::uint64_t>(mixtral_params_), 19);
    // Files a model does not need are listed but not counted in its download.
    server_->add_file(kMixtral, "original/consolidated.00.pt", "pt");
    server_->set_listed_size(kMixtral, "original/consolidated.00.pt", 90'000'000'000ull);
    const std::string fp8 = hub_config_text("qwen3-30b-a3b-fp8");
    server_->add_model_repo(kQwenFp8, fp8, static_cast<std::uint64_t>(params_of(fp8) * 1.03), 7);
    server_->add_model_repo(kBert, hub_config_text("bert-base-uncased"), 440'000'000ull, 3);
    server_->add_model_repo(kDynamicRope, with_dynamic_rope(mixtral),
                            2 * static_cast<std::uint64_t>(mixtral_params_), 19);
  }
  void cleanup() { server_.reset(); }

  void catalogRepositoriesNeedNoNetwork_data() {
    QTest::addColumn<QString>("repo");
    QTest::addColumn<QString>("id");
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("downloadFrom");
    QTest::newRow("as written") << "Qwen/Qwen3-30B-A3B"
                                << "qwen3-30b-a3b"
                                << "bf16"
                                << "Qwen/Qwen3-30B-A3B";
    QTest::newRow("any case") << "qwen/qwen3-30b-a3b"
                              << "qwen3-30b-a3b"
                              << "bf16"
                              << "Qwen/Qwen3-30B-A3B";
    QTest::newRow("FP8 release") << "zai-org/glm-4.5-air-fp8"
                                 << "glm-4.5-air"
                                 << "fp8"
                                 << "zai-org/GLM-4.5-Air-FP8";
    QTest::newRow("FP8 only") << "deepseek-ai/DeepSeek-V3-0324"
                              << "deepseek-v3-0324"
                              << "fp8"
                              << "deepseek-ai/DeepSeek-V3-0324";
  }
  void catalogRepositoriesNeedNoNetwork() {
    QFETCH(QString, repo);
    QFETCH(QString, id);
    QFETCH(QString, format);
    QFETCH(QString, downloadFrom);
    const ModelLookup l = lookup_repository(hub_at(kUnreachable), repo.toStdString());
    QCOMPARE(l.origin, ModelOrigin::Catalog);
    QVERIFY(l.catalog_entry != nullptr);
    QCOMPARE(QString::fromStdString(l.catalog_entry->id), id);
    QCOMPARE(QString::fromStdString(l.stored.name), format);
    QCOMPARE(QString::fromStdString(l.repo), downloadFrom);
    QVERIFY(!l.download_bytes_listed);
    const SizeEstimate size = estimate_sizes(l.shape);
    QCOMPARE(l.download_bytes, format == "fp8" ? size.fp8_bytes : size.bf16_bytes);
    QVERIFY2(l.cannot_run.empty(), l.cannot_run.c_str());
    // The same through the command's lookup.
    QCOMPARE(lookup_model(hub_at(kUnreachable), repo.toStdString()).catalog_entry, l.catalog_entry);
  }

  void everyCatalogArchitectureTandemRunsIsRunnable() {
    // The catalog keeps only what the planner reads; a model whose architecture Tandem runs
    // is not called "not runnable" for the settings the catalog leaves out.
    for (const CatalogEntry& e : catalog()) {
      if (e.config.is_null()) continue;
      const ModelLookup l = lookup_model(hub_at(kUnreachable), e.id);
      QVERIFY2(l.cannot_run.empty(), l.cannot_run.c_str());
    }
  }

  void catalogIdsAnswerOffline() {
    const ModelLookup qwen = lookup_model(hub_at(kUnreachable), "QWEN3-30B-A3B");
    QCOMPARE(qwen.origin, ModelOrigin::Catalog);
    QCOMPARE(qwen.repo, std::string("Qwen/Qwen3-30B-A3B"));
    const ModelLookup next = lookup_model(hub_at(kUnreachable), "Qwen/Qwen3-Next-80B-A3B-Instruct");
    QCOMPARE(next.origin, ModelOrigin::Catalog);
    QVERIFY2(next.cannot_run.empty(), next.cannot_run.c_str());
    QCOMPARE(next.shape.experts, std::int64_t{512});
    QCOMPARE(next.shape.linear_layers, std::int64_t{36});
  }

  // A model of an architecture Tandem runs with a setting it does not compute: a folder on
  // this computer is planned and says in a sentence why it cannot run; the same config on
  // the Hub is refused with that sentence (Tandem plans for download only what it runs).
  void plannedButNotRun() {
    QTemporaryDir dir;
    {
      std::ofstream out(dir.path().toStdString() + "/config.json");
      out << with_dynamic_rope(hub_config_text("mixtral-8x7b-instruct"));
    }
    const ModelLookup l = lookup_model(hub_at(kUnreachable), dir.path().toStdString());
    QCOMPARE(l.shape.experts, std::int64_t{8});
    QVERIFY2(l.cannot_run.find("\"dynamic\" is not supported") != std::string::npos,
             l.cannot_run.c_str());
    try {
      lookup_repository(hub_at(server_->endpoint()), kDynamicRope);
      QFAIL("a model Tandem cannot run was planned for download");
    } catch (const model::ModelError& e) {
      QVERIFY2(std::string(e.what()).find("\"dynamic\" is not supported") != std::string::npos,
               e.what());
    }
  }

  void aRepositoryOutsideTheCatalogIsAskedOfTheHub() {
    const ModelLookup l = lookup_repository(hub_at(server_->endpoint()), kMixtral);
    QCOMPARE(l.origin, ModelOrigin::Hub);
    QCOMPARE(l.repo, kMixtral);
    QCOMPARE(l.endpoint, server_->endpoint());
    QVERIFY(l.catalog_entry == nullptr);
    QCOMPARE(l.shape.architecture, std::string("MixtralForCausalLM"));
    QCOMPARE(l.shape.experts, std::int64_t{8});
    QCOMPARE(l.shape.experts_per_token, std::int64_t{2});
    QVERIFY(l.shape.total_params() > 46e9 && l.shape.total_params() < 47.5e9);
    QCOMPARE(l.stored.name, std::string("bf16"));
    QVERIFY2(l.stored.evidence.find("2.00 bytes per parameter") != std::string::npos,
             l.stored.evidence.c_str());
    // The weights, config.json and tokenizer.json; not the original/ checkpoint.
    QVERIFY(l.download_bytes_listed);
    QCOMPARE(l.download_files, std::size_t{21});
    const std::uint64_t weights = 2 * static_cast<std::uint64_t>(mixtral_params_);
    QVERIFY(l.download_bytes > weights && l.download_bytes < weights + 4096);
    QVERIFY2(l.cannot_run.empty(), l.cannot_run.c_str());
    // Only the file list and config.json were asked for.
    QCOMPARE(server_->tree_requests(), 1);
    QCOMPARE(server_->file_requests(kMixtral, "config.json").size(), std::size_t{1});
    QCOMPARE(server_->file_requests(kMixtral, "tokenizer.json").size(), std::size_t{0});
    QCOMPARE(server_->file_requests(kMixtral, "model-00001-of-00019.safetensors").size(),
             std::size_t{0});

    const nlohmann::json doc = to_json(l);
    QCOMPARE(doc["origin"].get<std::string>(), std::string("hub"));
    QCOMPARE(doc["download_bytes"].get<std::uint64_t>(), l.download_bytes);
    QCOMPARE(doc["runs"].get<bool>(), true);
    const std::string line = describe_lookup(l);
    QVERIFY2(line.find(server_->endpoint()) != std::string::npos, line.c_str());
    QVERIFY2(line.find("BF16") != std::string::npos, line.c_str());
    QVERIFY2(line.find("21 files") != std::string::npos, line.c_str());
  }

  void fp8FromTheQuantizationConfig() {
    const ModelLookup l = lookup_model(hub_at(server_->endpoint()), kQwenFp8);
    QCOMPARE(l.origin, ModelOrigin::Hub);
    QCOMPARE(l.stored.name, std::string("fp8"));
    QCOMPARE(l.stored.evidence, std::string("quantization_config: fp8"));
    QVERIFY2(l.cannot_run.empty(), l.cannot_run.c_str());
  }

  void storedFormat_data() {
    QTest::addColumn<QString>("config");
    QTest::addColumn<double>("bytesPerParam");
    QTest::addColumn<QString>("format");
    QTest::newRow("bf16 by sizes and dtype") << R"({"torch_dtype":"bfloat16"})" << 2.0 << "bf16";
    QTest::newRow("f16 (transformers 5 dtype)") << R"({"dtype":"float16"})" << 2.01 << "f16";
    QTest::newRow("8-bit files despite a bf16 dtype")
        << R"({"torch_dtype":"bfloat16"})" << 1.03 << "8-bit";
    QTest::newRow("4-bit files") << R"({})" << 0.55 << "4-bit";
    QTest::newRow("f32 files") << R"({"torch_dtype":"bfloat16"})" << 4.0 << "f32";
    QTest::newRow("dtype alone") << R"({"torch_dtype":"float32"})" << 0.0 << "f32";
    QTest::newRow("nothing says") << R"({})" << 0.0 << "unknown";
    QTest::newRow("block fp8")
        << R"({"quantization_config":{"quant_method":"fp8","weight_block_size":[128,128]}})" << 1.0
        << "fp8";
    QTest::newRow("compressed-tensors fp8")
        << R"({"quantization_config":{"quant_method":"compressed-tensors","config_groups":{"g":{"weights":{"type":"float","num_bits":8}}}}})"
        << 1.0 << "fp8";
    QTest::newRow("compressed-tensors int4")
        << R"({"quantization_config":{"quant_method":"compressed-tensors","config_groups":{"g":{"weights":{"type":"int","num_bits":4}}}}})"
        << 0.6 << "compressed-tensors";
    QTest::newRow("gptq") << R"({"quantization_config":{"quant_method":"gptq","bits":4}})" << 0.6
                          << "gptq";
  }
  void storedFormat() {
    QFETCH(QString, config);
    QFETCH(double, bytesPerParam);
    QFETCH(QString, format);
    const std::int64_t params = 1'000'000'000;
    const StoredFormat f = stored_format(
        nlohmann::json::parse(config.toStdString()),
        static_cast<std::uint64_t>(bytesPerParam * static_cast<double>(params)), params);
    QCOMPARE(QString::fromStdString(f.name), format);
    QVERIFY(!f.evidence.empty());
  }

  void noSuchRepository() {
    try {
      lookup_model(hub_at(server_->endpoint()), "nobody/no-such-model");
      QFAIL("a repository the Hub does not have was planned");
    } catch (const hub::HubError& e) {
      QCOMPARE(e.kind(), hub::HubErrorKind::NotFound);
      const std::string m = e.what();
      QVERIFY2(m.find("There is no repository nobody/no-such-model on " + server_->endpoint()) !=
                   std::string::npos,
               e.what());
      QVERIFY2(m.find("HF_TOKEN") != std::string::npos, e.what());
    }
  }

  // GGUF files of no catalog model: sized from the header of one quantisation, fetched with a
  // ranged request into a sparse file, its quantisations listed; files that are not GGUF are
  // refused with a sentence.
  void aGgufRepositoryOutsideTheCatalogIsSizedFromItsHeader() {
    const std::string repo = "someone/Tiny-MoE-GGUF";
    const auto serve = [&](const std::string& path, const char* fixture) {
      server_->add_file_from(repo, path,
                             std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + fixture);
    };
    serve("Tiny-MoE-Q8_0.gguf", "qwen3moe-q8_0.gguf");
    serve("Tiny-MoE-Q4_K_M.gguf", "qwen3moe-mixed.gguf");
    server_->add_file(repo, "README.md", "readme", /*lfs=*/false);
    const ModelLookup l = lookup_repository(hub_at(server_->endpoint()), repo);
    QCOMPARE(l.origin, tandem::plan::ModelOrigin::Hub);
    QVERIFY(l.catalog_entry == nullptr);
    QVERIFY2(l.cannot_run.empty(), l.cannot_run.c_str());
    QCOMPARE(l.gguf_quantizations.size(), std::size_t{2});
    QCOMPARE(l.gguf_quantization, std::string("Q4_K_M"));
    QVERIFY(l.path.empty());  // the temporary header is gone
    const auto local = tandem::plan::model_shape_from_gguf(tandem::model::GgufSet(
        std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-mixed.gguf"));
    QCOMPARE(l.shape.architecture, local.architecture);
    QCOMPARE(l.shape.total_params(), local.total_params());
    QCOMPARE(l.shape.experts, local.experts);
    QVERIFY2(l.source.find("GGUF header of Tiny-MoE-Q4_K_M.gguf") != std::string::npos,
             l.source.c_str());
    // Only the chosen quantisation was read, and with a ranged request; every part of the
    // model is sized as the file's tensors are stored, not at its average bytes per parameter.
    const auto read = server_->file_requests(repo, "Tiny-MoE-Q4_K_M.gguf");
    QCOMPARE(read.size(), std::size_t{1});
    QVERIFY(read.front().had_range);
    QCOMPARE(server_->file_requests(repo, "Tiny-MoE-Q8_0.gguf").size(), std::size_t{0});
    QVERIFY(gguf_sizes_read(l));
    QCOMPARE(l.shape.stored.attention, local.stored.attention);
    QCOMPARE(l.shape.stored.expert, local.stored.expert);
    QCOMPARE(l.shape.stored.embedding, local.stored.embedding);
    QVERIFY2(l.stored.evidence.find("sized from the files' headers") != std::string::npos,
             l.stored.evidence.c_str());

    // Another quantisation chosen: estimated until its headers are read, then as stored.
    ModelLookup other = l;
    choose_gguf_quantization(other, "Q8_0");
    QVERIFY(!gguf_sizes_read(other));
    read_gguf_sizes(hub_at(server_->endpoint()), other);
    QVERIFY(gguf_sizes_read(other));
    const auto q8 = tandem::plan::model_shape_from_gguf(tandem::model::GgufSet(
        std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-q8_0.gguf"));
    QCOMPARE(other.shape.stored.attention, q8.stored.attention);
    QCOMPARE(other.shape.stored.expert, q8.stored.expert);
    QCOMPARE(server_->file_requests(repo, "Tiny-MoE-Q8_0.gguf").size(), std::size_t{1});
    read_gguf_sizes(hub_at(server_->endpoint()), other);  // read once
    choose_gguf_quantization(other, "Q4_K_M");            // both known now
    QCOMPARE(other.shape.stored.attention, local.stored.attention);
    QCOMPARE(server_->file_requests(repo, "Tiny-MoE-Q8_0.gguf").size(), std::size_t{1});
    QCOMPARE(server_->file_requests(repo, "Tiny-MoE-Q4_K_M.gguf").size(), std::size_t{1});

    server_->add_file("someone/tiny-GGUF", "tiny-Q4_K_M.gguf", "not a gguf file");
    server_->add_file("someone/tiny-GGUF", "tiny-Q8_0.gguf", "not a gguf file");
    try {
      lookup_repository(hub_at(server_->endpoint()), "someone/tiny-GGUF");
      QFAIL("files that are not GGUF were planned");
    } catch (const std::exception& e) {
      QVERIFY2(std::string(e.what()).find("The start of tiny-Q4_K_M.gguf in someone/tiny-GGUF "
                                          "is not a GGUF header") != std::string::npos,
               e.what());
    }
  }

  // A split set's headers: every part read from its start (the first for the metadata, the
  // others for their tensor tables), a little of each, and the sizes are the whole set's.
  void aSplitGgufSetIsSizedFromEveryPartsHeader() {
    QTemporaryDir dir;
    const std::string source =
        std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-mixed.gguf";
    const auto parts =
        tandem::test::split_gguf(source, dir.path().toStdString() + "/Tiny-Q4_K_M", 3);
    const std::string repo = "someone/Tiny-Split-GGUF";
    for (const std::string& part : parts)
      server_->add_file_from(repo, "Q4_K_M/" + fs::path(part).filename().string(), part);
    const ModelLookup l = lookup_repository(hub_at(server_->endpoint()), repo);
    QCOMPARE(l.download_files, std::size_t{3});
    QVERIFY(gguf_sizes_read(l));
    const auto local = tandem::plan::model_shape_from_gguf(tandem::model::GgufSet(source));
    QCOMPARE(l.shape.stored.attention, local.stored.attention);
    QCOMPARE(l.shape.stored.expert, local.stored.expert);
    QCOMPARE(l.shape.stored.output, local.stored.output);
    for (const std::string& part : parts) {
      const auto read =
          server_->file_requests(repo, "Q4_K_M/" + fs::path(part).filename().string());
      QCOMPARE(read.size(), std::size_t{1});
      QVERIFY(read.front().had_range);
    }
  }

  // A GGUF release of a catalog model (unsloth's, named in the catalog, or another owner's
  // named after the model): its quantisations from the Hub's listing, sized by the catalog's
  // configuration, and one chosen for the download and the plan.
  void ggufRepositoriesOfCatalogModels_data() {
    QTest::addColumn<QString>("repo");
    QTest::newRow("the catalog's") << "unsloth/Qwen3-30B-A3B-GGUF";
    QTest::newRow("another owner's") << "bartowski/qwen3-30b-a3b-gguf";
  }
  void ggufRepositoriesOfCatalogModels() {
    QFETCH(QString, repo);
    const std::string r = repo.toStdString();
    const auto add = [&](const std::string& path, std::uint64_t bytes) {
      server_->add_file(r, path, "gguf");
      server_->set_listed_size(r, path, bytes);
    };
    server_->add_file(r, "README.md", "readme", /*lfs=*/false);
    add("Qwen3-30B-A3B-Q8_0.gguf", 32'480'000'000ull);
    add("Qwen3-30B-A3B-Q4_K_M.gguf", 18'560'000'000ull);
    add("Qwen3-30B-A3B-UD-Q2_K_XL.gguf", 11'800'000'000ull);
    add("BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 49'000'000'000ull);
    add("BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf", 12'100'000'000ull);
    add("mmproj-F16.gguf", 800'000'000ull);
    ModelLookup l = lookup_repository(hub_at(server_->endpoint()), r);
    QCOMPARE(l.origin, tandem::plan::ModelOrigin::Hub);
    QVERIFY(l.catalog_entry != nullptr);
    QCOMPARE(l.catalog_entry->id, std::string("qwen3-30b-a3b"));
    QVERIFY(l.cannot_run.empty());
    QCOMPARE(l.repo, r);
    QCOMPARE(l.gguf_quantizations.size(), std::size_t{4});
    QCOMPARE(l.gguf_quantization, std::string("Q4_K_M"));  // until a plan chooses
    QCOMPARE(l.download_bytes, 18'560'000'000ull);
    QVERIFY(l.download_bytes_listed);
    QCOMPARE(l.stored.name, std::string("gguf"));
    const tandem::plan::ModelShape& s = l.shape;
    QVERIFY(s.stored.known);
    const double stored =
        static_cast<double>(s.stored.embedding + s.stored.output + s.stored.attention +
                            s.stored.dense_ffn + s.stored.shared_experts + s.stored.router +
                            s.stored.expert * static_cast<std::uint64_t>(s.experts * s.moe_layers));
    QVERIFY2(std::abs(stored / 18.56e9 - 1.0) < 0.01, qPrintable(QString::number(stored)));
    // Files that are not GGUF: sized by the listing only, a sentence, the lookup unchanged.
    QVERIFY(!gguf_sizes_read(l));
    const ModelLookup before = l;
    try {
      read_gguf_sizes(hub_at(server_->endpoint()), l);
      QFAIL("a file that is not GGUF was sized");
    } catch (const std::runtime_error& e) {
      QVERIFY2(std::string(e.what()).find("is not a GGUF header") != std::string::npos, e.what());
    }
    QVERIFY(!gguf_sizes_read(l));
    QCOMPARE(l.shape.stored.attention, before.shape.stored.attention);
    choose_gguf_quantization(l, "bf16");
    QCOMPARE(l.gguf_quantization, std::string("BF16"));
    QCOMPARE(l.download_bytes, 61'100'000'000ull);
    QCOMPARE(l.download_files, std::size_t{2});
    QCOMPARE(l.chosen_gguf()->first_file(),
             std::string("BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf"));
    try {
      choose_gguf_quantization(l, "Q3_K_M");
      QFAIL("a quantisation the repository lacks was chosen");
    } catch (const std::invalid_argument& e) {
      QVERIFY2(std::string(e.what()).find("UD-Q2_K_XL, Q4_K_M, Q8_0, BF16") != std::string::npos,
               e.what());
    }
    const nlohmann::json j = tandem::plan::to_json(l);
    QCOMPARE(j["gguf_quantizations"].size(), std::size_t{4});
    QCOMPARE(j["gguf_quantization"], "BF16");
    QVERIFY(QString::fromStdString(describe_lookup(l)).contains(QLatin1String("UD-Q2_K_XL")));
  }

  // GGUF files of a catalog model whose GGUF architecture Tandem does not read: planned,
  // with the reason it cannot run them, and the release that does run.
  void aGgufReleaseTandemDoesNotRead() {
    server_->add_file("unsloth/gpt-oss-20b-GGUF", "gpt-oss-20b-F16.gguf", "gguf");
    const ModelLookup l =
        lookup_repository(hub_at(server_->endpoint()), "unsloth/gpt-oss-20b-GGUF");
    QVERIFY2(l.cannot_run.find("GGUF") != std::string::npos, l.cannot_run.c_str());
    QVERIFY2(l.cannot_run.find("openai/gpt-oss-20b runs") != std::string::npos,
             l.cannot_run.c_str());
  }

  void gatedRepositories_data() {
    QTest::addColumn<bool>("listingPublic");
    QTest::addColumn<QString>("token");
    QTest::addColumn<QString>("expected");
    QTest::newRow("no token, listing refused") << false << ""
                                               << "Accept the licence on the model page";
    QTest::newRow("no token, listing public (as the Hub)")
        << true << ""
        << "Accept the licence on the model page";
    QTest::newRow("a token without access (403)") << true << "hf_other"
                                                  << "refused the token";
  }
  void gatedRepositories() {
    QFETCH(bool, listingPublic);
    QFETCH(QString, token);
    QFETCH(QString, expected);
    server_->set_gated(kMixtral, "hf_secret", listingPublic);
    hub::HubConfig h = hub_at(server_->endpoint());
    h.token = token.toStdString();
    try {
      lookup_repository(h, kMixtral);
      QFAIL("a gated repository was read without its token");
    } catch (const hub::HubError& e) {
      QCOMPARE(e.kind(), hub::HubErrorKind::AuthRequired);
      const std::string m = e.what();
      QVERIFY2(m.find(expected.toStdString()) != std::string::npos, e.what());
      QVERIFY2(m.find(server_->endpoint() + "/" + kMixtral) != std::string::npos, e.what());
      if (token.isEmpty()) QVERIFY2(m.find("HF_TOKEN") != std::string::npos, e.what());
    }
    h.token = "hf_secret";
    QCOMPARE(lookup_repository(h, kMixtral).shape.experts, std::int64_t{8});
  }

  void anArchitectureTandemDoesNotRun() {
    try {
      lookup_repository(hub_at(server_->endpoint()), kBert);
      QFAIL("an architecture Tandem does not run was planned as if it were dense");
    } catch (const model::ModelError& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("BertForMaskedLM is not supported") != std::string::npos, e.what());
      QVERIFY2(m.find(model::supported_architectures()) != std::string::npos, e.what());
      QVERIFY2(m.find(kBert) != std::string::npos, e.what());
    }
  }

  void offlineSaysWhatStillWorks() {
    QElapsedTimer timer;
    timer.start();
    try {
      lookup_model(hub_at(kUnreachable), kMixtral);
      QFAIL("an unreachable Hub answered");
    } catch (const hub::HubError& e) {
      QCOMPARE(e.kind(), hub::HubErrorKind::Network);
      const std::string m = e.what();
      QVERIFY2(m.find(kUnreachable + " could not be reached") != std::string::npos, e.what());
      QVERIFY2(m.find("the catalog's models (by id or repository: ") != std::string::npos,
               e.what());
      QVERIFY2(m.find("qwen3-30b-a3b") != std::string::npos, e.what());
      QVERIFY2(m.find("model folders on this computer") != std::string::npos, e.what());
    }
    QVERIFY2(timer.elapsed() < 5000, "a question to the Hub retries as long as a download");
  }

  void aFolderHereWinsOverARepositoryOfTheSameName() {
    QTemporaryDir dir;
    const fs::path folder = fs::path(dir.path().toStdString()) / kMixtral;
    fs::create_directories(folder);
    fs::copy_file(std::string(TANDEM_TEST_DATA_DIR) + "/models/qwen3-moe/config.json",
                  folder / "config.json");
    const QString previous = QDir::currentPath();
    QVERIFY(QDir::setCurrent(dir.path()));
    ModelLookup l;
    try {
      l = lookup_model(hub_at(server_->endpoint()), kMixtral);
    } catch (...) {
      QDir::setCurrent(previous);
      throw;
    }
    QDir::setCurrent(previous);
    QCOMPARE(l.origin, ModelOrigin::Folder);
    QCOMPARE(l.shape.architecture, std::string("Qwen3MoeForCausalLM"));
    QCOMPARE(server_->tree_requests(), 0);
  }

  void neitherFolderCatalogNorRepository() {
    try {
      lookup_model(hub_at(kUnreachable), "no-such-model");
      QFAIL("a name that is nothing was planned");
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("Catalog models: ") != std::string::npos, e.what());
      QVERIFY2(m.find("ORGANISATION/NAME") != std::string::npos, e.what());
    }
  }

  void aLookupStopsWhenAsked() {
    server_->set_answer_delay_ms(5000);
    std::atomic<bool> stop{false};
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      stop = true;
    });
    QElapsedTimer timer;
    timer.start();
    try {
      lookup_repository(hub_at(server_->endpoint()), kMixtral, [&] { return stop.load(); });
      stopper.join();
      QFAIL("a stopped lookup answered");
    } catch (const hub::HubError& e) {
      stopper.join();
      QCOMPARE(e.kind(), hub::HubErrorKind::Cancelled);
    }
    QVERIFY(timer.elapsed() < 2000);
  }

  void repositoryNames_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("repo");
    QTest::newRow("org/name") << "Qwen/Qwen3-30B-A3B" << true;
    QTest::newRow("dots and underscores") << "a.b/c_d-1.5" << true;
    QTest::newRow("bare name") << "qwen3-30b-a3b" << false;
    QTest::newRow("relative path") << "./models/x" << false;
    QTest::newRow("absolute path") << "/models/x" << false;
    QTest::newRow("three parts") << "a/b/c" << false;
    QTest::newRow("dot dot") << "a/..b" << false;
  }
  void repositoryNames() {
    QFETCH(QString, text);
    QFETCH(bool, repo);
    QCOMPARE(looks_like_repo_id(text.toStdString()), repo);
  }
};

QTEST_GUILESS_MAIN(TestModelLookup)
#include "tst_model_lookup.moc"
