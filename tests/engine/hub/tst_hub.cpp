// The Hub client against a local stand-in for huggingface.co: listing, filters, ranged and
// resumable downloads, verification, and every fault a real network or server produces.
#include <sys/resource.h>

#include <QElapsedTimer>
#include <QScopeGuard>
#include <QTemporaryDir>
#include <QtTest>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "engine/hub/content_digest.h"
#include "engine/hub/download_plan.h"
#include "engine/hub/downloader.h"
#include "engine/hub/file_listing.h"
#include "engine/hub/glob_match.h"
#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/model_search.h"
#include "engine/hub/preflight.h"
#include "engine/hub/retry_policy.h"
#include "engine/log/log.h"
#include "hub_fixture_server.h"

namespace fs = std::filesystem;
using namespace tandem::hub;
using tandem::test::HubFixtureServer;
using tandem::test::ServerFault;

namespace {

const std::string kRepo = tandem::test::kFixtureRepo;
using tandem::test::random_bytes;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

HubConfig fast_hub(const HubFixtureServer& server) {
  HubConfig hub = hub_config_from(server.endpoint(), "");
  hub.token.clear();
  hub.connect_timeout_s = 5;
  hub.stall_timeout_s = 1;
  hub.retry.initial_delay_ms = 20;
  hub.retry.max_delay_ms = 200;
  hub.retry.max_attempts = 4;
  return hub;
}

DownloadRequest request_into(const QTemporaryDir& dir, FileFilter filter = {}) {
  DownloadRequest r;
  r.repo = kRepo;
  r.filter = std::move(filter);
  r.destination = dir.path().toStdString() + "/model";
  return r;
}

DownloadResult download(const HubConfig& hub, const DownloadRequest& request,
                        DownloadOptions options = {}) {
  options.hub = hub;
  Downloader downloader(plan_download(hub, request), std::move(options));
  return downloader.run();
}

const FileProgress& file_in(const DownloadResult& result, const std::string& path) {
  for (const auto& f : result.progress.files) {
    if (f.path == path) return f;
  }
  throw std::runtime_error("no such file in the result: " + path);
}

// A writer that reports a full disk once `capacity` bytes were written.
class FullDiskWriter final : public PartFileWriter {
 public:
  FullDiskWriter(std::unique_ptr<PartFileWriter> real, std::uint64_t capacity)
      : real_(std::move(real)), capacity_(capacity) {}
  void write(std::string_view bytes) override {
    if (written_ + bytes.size() > capacity_) {
      real_->write(bytes.substr(0, capacity_ - written_));
      written_ = capacity_;
      throw_write_error("model.safetensors.part", ENOSPC);
    }
    real_->write(bytes);
    written_ += bytes.size();
  }
  void finish() override { real_->finish(); }

 private:
  std::unique_ptr<PartFileWriter> real_;
  std::uint64_t capacity_;
  std::uint64_t written_ = 0;
};

}  // namespace

class TestHub : public QObject {
  Q_OBJECT
  std::unique_ptr<HubFixtureServer> server_;
  std::string weights_, config_, tokenizer_, nested_;

 private slots:
  void initTestCase() {
    // Only 127.0.0.1 is ever contacted, and never through a proxy from the environment.
    for (const char* v :
         {"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
      qunsetenv(v);
    }
    qputenv("no_proxy", "127.0.0.1");
  }

  void init() {
    server_ = std::make_unique<HubFixtureServer>();
    weights_ = random_bytes(300000, 1);
    config_ = "{\"model_type\": \"qwen3_moe\"}";
    tokenizer_ = random_bytes(40000, 2);
    nested_ = random_bytes(70000, 3);
    server_->add_file(kRepo, "model.safetensors", weights_);
    server_->add_file(kRepo, "config.json", config_, /*lfs=*/false);
    server_->add_file(kRepo, "tokenizer.json", tokenizer_, /*lfs=*/false);
    server_->add_file(kRepo, "gguf/tiny-Q4_K_M.gguf", nested_);
  }
  void cleanup() { server_.reset(); }

  // ---- pieces ----

  void digestsMatchKnownVectors() {
    QCOMPARE(sha256_hex(""),
             std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    QCOMPARE(sha256_hex("abc"),
             std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    QCOMPARE(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
             std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    // `printf 'hello\n' | git hash-object --stdin`
    QCOMPARE(git_blob_sha1_hex("hello\n"), std::string("ce013625030ba8dba906f756967f9e9ca394464a"));
    // Fed in pieces, the digest is the same.
    ContentDigest pieces(DigestKind::Sha256, 3);
    pieces.update("a");
    pieces.update("bc");
    QCOMPARE(pieces.hex(), sha256_hex("abc"));
  }

  void globPatterns_data() {
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("path");
    QTest::addColumn<bool>("matches");
    QTest::newRow("star suffix") << "*.safetensors"
                                 << "model-00001-of-00002.safetensors" << true;
    QTest::newRow("star crosses folders") << "*.safetensors"
                                          << "sub/model.safetensors" << true;
    QTest::newRow("other suffix") << "*.safetensors"
                                  << "model.safetensors.index.json" << false;
    QTest::newRow("exact") << "config.json"
                           << "config.json" << true;
    QTest::newRow("exact is whole path") << "config.json"
                                         << "sub/config.json" << false;
    QTest::newRow("question mark") << "model-0000?.bin"
                                   << "model-00007.bin" << true;
    QTest::newRow("class") << "*Q[45]_K_M.gguf"
                           << "x-Q4_K_M.gguf" << true;
    QTest::newRow("class miss") << "*Q[45]_K_M.gguf"
                                << "x-Q8_K_M.gguf" << false;
    QTest::newRow("negated class") << "*Q[!45]_0.gguf"
                                   << "x-Q8_0.gguf" << true;
    QTest::newRow("range") << "shard-[0-3].bin"
                           << "shard-2.bin" << true;
    QTest::newRow("folder prefix") << "gguf/*"
                                   << "gguf/tiny-Q4_K_M.gguf" << true;
    QTest::newRow("unclosed bracket literal") << "a[b"
                                              << "a[b" << true;
    QTest::newRow("many stars") << "*a*a*a*b"
                                << "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" << false;
    QTest::newRow("empty pattern") << ""
                                   << "x" << false;
  }
  void globPatterns() {
    QFETCH(QString, pattern);
    QFETCH(QString, path);
    QFETCH(bool, matches);
    QCOMPARE(glob_match(pattern.toStdString(), path.toStdString()), matches);
  }

  void filterIncludesThenExcludes() {
    FileFilter filter{{"*.safetensors", "*.json"}, {"tokenizer*"}};
    QVERIFY(filter.accepts("model.safetensors"));
    QVERIFY(filter.accepts("config.json"));
    QVERIFY(!filter.accepts("tokenizer.json"));
    QVERIFY(!filter.accepts("gguf/tiny-Q4_K_M.gguf"));
    QVERIFY(FileFilter{}.accepts("anything/at/all"));
  }

  // Offline: each retry is told at once (what failed, the attempt, the wait), and the console
  // gets the sentence once, not once per retry; the rest goes to the log file only.
  void retriesAreToldAtOnceAndWarnedOnce() {
    HubConfig hub = fast_hub(*server_);
    hub.endpoint = "http://127.0.0.1:1";
    std::vector<RetryNotice> notices;
    hub.on_retry = [&](const RetryNotice& n) { notices.push_back(n); };
    std::vector<std::string> warnings;
    tandem::log::set_forwarder([&](tandem::log::Level level, std::string_view message) {
      if (level == tandem::log::Level::Warn) warnings.emplace_back(message);
    });
    const auto forget = qScopeGuard([] { tandem::log::set_forwarder({}); });
    for (int run = 0; run < 2; ++run) {  // a second download of the same: still no repeat
      try {
        list_repo_files(hub, kRepo, "main");
        QFAIL("an unreachable endpoint answered");
      } catch (const HubError& e) {
        QCOMPARE(e.kind(), HubErrorKind::Network);
      }
    }
    QCOMPARE(notices.size(), std::size_t{6});  // 3 retries of 4 attempts, twice
    for (std::size_t i = 0; i < 3; ++i) {
      QCOMPARE(notices[i].attempt, int(i) + 1);
      QCOMPARE(notices[i].max_attempts, 4);
      QCOMPARE(notices[i].kind, HubErrorKind::Network);
      QVERIFY(notices[i].wait_ms > 0);
      QVERIFY(!notices[i].message.empty());
    }
    QCOMPARE(warnings.size(), std::size_t{1});
    QVERIFY2(warnings[0].find("(Attempt 1 of 4; the next in") != std::string::npos,
             warnings[0].c_str());
  }

  // The model search: the stand-in Hub's repositories whose name matches, any case; an
  // empty term is a sentence, not a request; offline is the Hub's usual sentence.
  void searchFindsRepositories() {
    const auto hits = search_models(fast_hub(*server_), "TINY");
    QVERIFY(!hits.empty());
    for (const ModelSearchHit& h : hits) {
      QVERIFY2(QString::fromStdString(h.repo).contains(QLatin1String("tiny"), Qt::CaseInsensitive),
               h.repo.c_str());
      QVERIFY(h.downloads > 0);
      QCOMPARE(h.pipeline, std::string("text-generation"));
    }
    QVERIFY(search_models(fast_hub(*server_), "no such model anywhere").empty());
    try {
      search_models(fast_hub(*server_), "");
      QFAIL("an empty search was sent");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubErrorKind::InvalidRequest);
    }
    QCOMPARE(
        parse_model_search(R"([{"modelId": "a/b"}, 7, {"id": 3}, {"id": "c/d", "downloads": 5}])")
            .size(),
        std::size_t{2});
    // Offline, the sentence says the search is retried, and nothing of a download resuming.
    HubConfig offline = fast_hub(*server_);
    offline.endpoint = "http://127.0.0.1:1";
    try {
      search_models(offline, "tiny");
      QFAIL("an unreachable endpoint answered");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubErrorKind::Network);
      const std::string said = e.what();
      QVERIFY2(said.find("the models matching \"tiny\"") != std::string::npos &&
                   said.find("Tandem retries.") != std::string::npos &&
                   said.find("download") == std::string::npos,
               said.c_str());
    }
  }

  void retryWaitsDoubleUpToTheCap() {
    RetryPolicy policy;
    policy.initial_delay_ms = 500;
    policy.max_delay_ms = 3000;
    QCOMPARE(backoff_delay_ms(policy, 1), std::int64_t(500));
    QCOMPARE(backoff_delay_ms(policy, 2), std::int64_t(1000));
    QCOMPARE(backoff_delay_ms(policy, 3), std::int64_t(2000));
    QCOMPARE(backoff_delay_ms(policy, 4), std::int64_t(3000));
    QCOMPARE(backoff_delay_ms(policy, 40), std::int64_t(3000));
    QCOMPARE(parse_retry_after_ms("7", 0), std::optional<std::int64_t>(7000));
    QCOMPARE(parse_retry_after_ms(" 0 ", 0), std::optional<std::int64_t>(0));
    // 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
    QCOMPARE(parse_retry_after_ms("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 30),
             std::optional<std::int64_t>(30000));
    QCOMPARE(parse_retry_after_ms("soon", 0), std::optional<std::int64_t>());
    QCOMPARE(parse_retry_after_ms("-5", 0), std::optional<std::int64_t>());
  }

  void treePagesAndUnsafePaths() {
    const auto files = parse_tree_page(
        "[{\"type\":\"directory\",\"oid\":\"0\",\"size\":0,\"path\":\"sub\"},"
        "            {\"type\":\"file\",\"oid\":\"abc\",\"size\":12,\"path\":\"sub/a.json\"},"
        "            {\"type\":\"file\",\"oid\":\"def\",\"size\":134,\"path\":\"w.safetensors\","
        "             "
        "\"lfs\":{\"oid\":\"5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03\","
        "\"size\":999,\"pointerSize\":134}}]");
    QCOMPARE(files.size(), std::size_t(2));
    QCOMPARE(files[0].path, std::string("sub/a.json"));
    QVERIFY(!files[0].is_lfs());
    QCOMPARE(files[1].size, std::uint64_t(999));  // the content's size, not the pointer's
    QVERIFY(files[1].is_lfs());
    for (const char* bad :
         {"[{\"type\":\"file\",\"size\":1,\"path\":\"../evil\"}]",
          "[{\"type\":\"file\",\"size\":1,\"path\":\"/etc/x\"}]",
          "[{\"type\":\"file\",\"size\":1,\"path\":\"a//b\"}]", "{\"error\":\"x\"}", "not json"}) {
      QVERIFY_THROWS_EXCEPTION(HubError, parse_tree_page(bad));
    }
    QCOMPARE(next_page_url("<https://hf.co/api/models/a/b/tree/main?cursor=xyz>; rel=\"next\"",
                           "https://hf.co"),
             std::string("https://hf.co/api/models/a/b/tree/main?cursor=xyz"));
    QCOMPARE(next_page_url("</api/x?c=1>; rel=\"prev\", </api/x?c=3>; rel=\"next\"", "http://m"),
             std::string("http://m/api/x?c=3"));
    QCOMPARE(next_page_url("", "http://m"), std::string());
  }

  void endpointAndTokenFromSettingsThenEnvironment() {
    qputenv("HF_ENDPOINT", "https://mirror.example/");
    qputenv("HF_TOKEN", "hf_env");
    HubConfig from_env = hub_config_from("", "");
    QCOMPARE(from_env.endpoint, std::string("https://mirror.example"));
    QCOMPARE(from_env.token, std::string("hf_env"));
    HubConfig from_settings = hub_config_from("https://other.example", "hf_setting");
    QCOMPARE(from_settings.endpoint, std::string("https://other.example"));
    QCOMPARE(from_settings.token, std::string("hf_setting"));
    qunsetenv("HF_ENDPOINT");
    qunsetenv("HF_TOKEN");
    QCOMPARE(hub_config_from("", "").endpoint, std::string(kDefaultEndpoint));
    QCOMPARE(resolve_url(from_settings, "a/b", "refs/pr/1", "sub dir/f.json"),
             std::string("https://other.example/a/b/resolve/refs%2Fpr%2F1/sub%20dir/f.json"));
    QVERIFY_THROWS_EXCEPTION(HubError, validate_repo_id("no spaces/allowed here"));
    QVERIFY_THROWS_EXCEPTION(HubError, validate_repo_id("a/b/c"));
    QVERIFY_THROWS_EXCEPTION(HubError, validate_repo_id("../x"));
    validate_repo_id("Qwen/Qwen3-30B-A3B");
  }

  // ---- against the fixture server ----

  void listsEveryFileAcrossPages() {
    server_->set_page_size(2);  // 4 files + 1 folder: three pages
    const auto files = list_repo_files(fast_hub(*server_), kRepo, "main");
    QCOMPARE(server_->tree_requests(), 3);
    QCOMPARE(files.size(), std::size_t(4));
    std::map<std::string, RepoFile> by_path;
    for (const auto& f : files) by_path[f.path] = f;
    QCOMPARE(by_path["model.safetensors"].size, std::uint64_t(weights_.size()));
    QCOMPARE(by_path["model.safetensors"].sha256, sha256_hex(weights_));
    QCOMPARE(by_path["config.json"].git_oid, git_blob_sha1_hex(config_));
    QVERIFY(by_path.count("gguf/tiny-Q4_K_M.gguf"));
  }

  void missingRepositoryIsExplained() {
    try {
      list_repo_files(fast_hub(*server_), "tandem-test/nope", "main");
      QFAIL("listing a missing repository succeeded");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubErrorKind::NotFound);
      QVERIFY2(std::string(e.what()).find("Check the repository name") != std::string::npos,
               e.what());
    }
  }

  void downloadsFilteredFilesInParallelAndVerifies() {
    QTemporaryDir dir;
    std::vector<DownloadProgress> reports;
    DownloadOptions options;
    options.parallel_files = 3;
    options.progress_interval_ms = 20;
    options.on_progress = [&](const DownloadProgress& p) { reports.push_back(p); };
    const auto result =
        download(fast_hub(*server_),
                 request_into(dir, {{"*.safetensors", "*.json", "gguf/*"}, {"tokenizer.json"}}),
                 std::move(options));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    const fs::path model = dir.path().toStdString() + "/model";
    QCOMPARE(read_file(model / "model.safetensors"), weights_);
    QCOMPARE(read_file(model / "config.json"), config_);
    QCOMPARE(read_file(model / "gguf/tiny-Q4_K_M.gguf"), nested_);
    QVERIFY(!fs::exists(model / "tokenizer.json"));  // excluded
    QCOMPARE(server_->file_requests(kRepo, "tokenizer.json").size(), std::size_t(0));
    for (const auto& entry : fs::recursive_directory_iterator(model)) {
      QVERIFY2(entry.path().extension() != ".part", entry.path().c_str());
    }
    QVERIFY(!reports.empty());
    const DownloadProgress& last = reports.back();
    QCOMPARE(last.bytes_total, std::uint64_t(weights_.size() + config_.size() + nested_.size()));
    QCOMPARE(last.bytes_done, last.bytes_total);
    for (const auto& f : last.files) QCOMPARE(f.state, FileState::Done);

    // A second run finds everything in place and fetches nothing.
    server_->reset_counters();
    const auto again = download(fast_hub(*server_), request_into(dir, {{"*.safetensors"}, {}}));
    QCOMPARE(again.outcome, DownloadOutcome::Completed);
    QCOMPARE(server_->bytes_served(kRepo, "model.safetensors"), std::uint64_t(0));
  }

  void droppedConnectionResumesWithRange() {
    server_->push_fault(kRepo, "model.safetensors", ServerFault::drop_after(100000));
    QTemporaryDir dir;
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    QCOMPARE(read_file(dir.path().toStdString() + "/model/model.safetensors"), weights_);
    const auto requests = server_->file_requests(kRepo, "model.safetensors");
    QCOMPARE(requests.size(), std::size_t(2));
    QVERIFY(!requests[0].had_range);
    QVERIFY(requests[1].had_range);
    QCOMPARE(requests[1].range_start, std::uint64_t(100000));
    QCOMPARE(server_->bytes_served(kRepo, "model.safetensors"), std::uint64_t(weights_.size()));
  }

  void serverErrorThenSuccess() {
    server_->push_fault(kRepo, "config.json", ServerFault::status_code(500));
    server_->push_fault(kRepo, "config.json", ServerFault::status_code(503));
    QTemporaryDir dir;
    const auto result = download(fast_hub(*server_), request_into(dir, {{"config.json"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    QCOMPARE(server_->file_requests(kRepo, "config.json").size(), std::size_t(3));
    QCOMPARE(read_file(dir.path().toStdString() + "/model/config.json"), config_);
  }

  void persistentServerErrorGivesUp() {
    for (int i = 0; i < 4; ++i)
      server_->push_fault(kRepo, "config.json", ServerFault::status_code(502));
    QTemporaryDir dir;
    const auto result = download(fast_hub(*server_), request_into(dir, {{"config.json"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::ServerError));
    QVERIFY2(result.message.find("HTTP 502") != std::string::npos, result.message.c_str());
    QVERIFY2(result.message.find("gave up after 4 attempts") != std::string::npos,
             result.message.c_str());
    QVERIFY(!fs::exists(dir.path().toStdString() + "/model/config.json"));
  }

  void rateLimitHonoursRetryAfter() {
    server_->push_fault(kRepo, "config.json", ServerFault::status_code(429, "1"));
    QTemporaryDir dir;
    QElapsedTimer timer;
    timer.start();
    const auto result = download(fast_hub(*server_), request_into(dir, {{"config.json"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    // The backoff alone would wait 20 ms; the server asked for a second.
    QVERIFY2(timer.elapsed() >= 950, qPrintable(QString::number(timer.elapsed())));
    QCOMPARE(server_->file_requests(kRepo, "config.json").size(), std::size_t(2));
  }

  void wrongSha256IsNeverAccepted() {
    server_->set_listed_sha256(kRepo, "model.safetensors", sha256_hex("something else"));
    QTemporaryDir dir;
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::ChecksumMismatch));
    QVERIFY2(result.message.find("sha256") != std::string::npos, result.message.c_str());
    QVERIFY(result.message.find(sha256_hex(weights_)) != std::string::npos);
    const fs::path model = dir.path().toStdString() + "/model";
    QVERIFY(!fs::exists(model / "model.safetensors"));
    QVERIFY(!fs::exists(model / "model.safetensors.part"));
  }

  void gatedRepositoryNeedsAToken() {
    server_->set_gated(kRepo, "hf_secret");
    HubConfig hub = fast_hub(*server_);
    try {
      list_repo_files(hub, kRepo, "main");
      QFAIL("a gated repository was listed without a token");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubErrorKind::AuthRequired);
      const std::string message = e.what();
      QVERIFY2(message.find("Accept the licence on the model page") != std::string::npos, e.what());
      QVERIFY(message.find(server_->endpoint() + "/" + kRepo) != std::string::npos);
      QVERIFY(message.find("HF_TOKEN") != std::string::npos);
    }
    hub.token = "hf_wrong";
    QVERIFY_THROWS_EXCEPTION(HubError, list_repo_files(hub, kRepo, "main"));
    hub.token = "hf_secret";
    QTemporaryDir dir;
    const auto result = download(hub, request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    QCOMPARE(read_file(dir.path().toStdString() + "/model/model.safetensors"), weights_);
  }

  void stalledTransferIsRetried() {
    server_->push_fault(kRepo, "model.safetensors", ServerFault::stall_after(50000, 10000));
    QTemporaryDir dir;
    QElapsedTimer timer;
    timer.start();
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    QVERIFY2(timer.elapsed() < 6000,
             qPrintable(QString::number(timer.elapsed())));  // not the 10 s stall
    const auto requests = server_->file_requests(kRepo, "model.safetensors");
    QCOMPARE(requests.size(), std::size_t(2));
    QCOMPARE(requests[1].range_start, std::uint64_t(50000));
    QCOMPARE(read_file(dir.path().toStdString() + "/model/model.safetensors"), weights_);
  }

  void serverThatKeepsStallingFails() {
    for (int i = 0; i < 2; ++i)
      server_->push_fault(kRepo, "config.json", ServerFault::stall_after(0, 10000));
    HubConfig hub = fast_hub(*server_);
    hub.retry.max_attempts = 2;
    QTemporaryDir dir;
    const auto result = download(hub, request_into(dir, {{"config.json"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::Stalled));
    QVERIFY2(result.message.find("no data arrived for 1 s") != std::string::npos,
             result.message.c_str());
  }

  void fileThatChangedSizeIsRejected() {
    server_->set_served_content(kRepo, "model.safetensors", weights_ + "more");
    QTemporaryDir dir;
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::FileChanged));
    QVERIFY2(result.message.find("changed on the server") != std::string::npos,
             result.message.c_str());
    QVERIFY(!fs::exists(dir.path().toStdString() + "/model/model.safetensors"));
    QVERIFY(!fs::exists(dir.path().toStdString() + "/model/model.safetensors.part"));
  }

  void fileThatChangedContentIsRejected() {
    std::string changed = tokenizer_;
    changed[20000] ^= 1;
    server_->set_served_content(kRepo, "tokenizer.json", changed);
    QTemporaryDir dir;
    const auto result = download(fast_hub(*server_), request_into(dir, {{"tokenizer.json"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::ChecksumMismatch));
    QVERIFY(!fs::exists(dir.path().toStdString() + "/model/tokenizer.json"));
  }

  void fullDiskStopsWithASentence() {
    QTemporaryDir dir;
    DownloadOptions options;
    options.open_part_file = [](const fs::path& part,
                                std::uint64_t keep) -> std::unique_ptr<PartFileWriter> {
      return std::make_unique<FullDiskWriter>(open_part_file(part, keep), 120000);
    };
    const auto result = download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}),
                                 std::move(options));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::DiskFull));
    QVERIFY2(result.message.find("The disk is full") != std::string::npos, result.message.c_str());
    QCOMPARE(server_->file_requests(kRepo, "model.safetensors").size(),
             std::size_t(1));  // not retried
    const fs::path model = dir.path().toStdString() + "/model";
    QVERIFY(!fs::exists(model / "model.safetensors"));
    // What fitted is kept for a resume once there is room again.
    QCOMPARE(fs::file_size(model / "model.safetensors.part"), std::uintmax_t(120000));
    QTRY_COMPARE_WITH_TIMEOUT(server_->open_connections(), 0, 5000);  // the aborted transfer's
    server_->reset_counters();
    const auto resumed =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(resumed.outcome, DownloadOutcome::Completed);
    QCOMPARE(server_->bytes_served(kRepo, "model.safetensors"),
             std::uint64_t(weights_.size() - 120000));
    QCOMPARE(read_file(model / "model.safetensors"), weights_);
  }

  // A real write failure from the kernel: past a file-size limit (as on a FAT32 disk at
  // 4 GiB) the write fails with EFBIG; the download stops with a sentence that says why and
  // is not retried, and resumes once the limit is gone.
  void fileSizeLimitStopsWithASentence() {
    QTemporaryDir dir;
    rlimit saved{};
    QVERIFY(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 100000;  // a third of model.safetensors
    QVERIFY(setrlimit(RLIMIT_FSIZE, &small) == 0);
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, SIG_DFL);
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QVERIFY2(result.message.find("limit on file size (ulimit -f)") != std::string::npos,
             result.message.c_str());
    QCOMPARE(server_->file_requests(kRepo, "model.safetensors").size(), std::size_t(1));
    const fs::path model = dir.path().toStdString() + "/model";
    QVERIFY(!fs::exists(model / "model.safetensors"));
    QTRY_COMPARE_WITH_TIMEOUT(server_->open_connections(), 0, 5000);
    const auto resumed =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(resumed.outcome, DownloadOutcome::Completed);
    QCOMPARE(read_file(model / "model.safetensors"), weights_);
  }

  void aPartFileHasOneWriterAtATime() {
    QTemporaryDir dir;
    const fs::path part = dir.path().toStdString() + "/x.safetensors.part";
    write_file(part, "0123456789");
    auto first = open_part_file(part, 4);
    try {
      open_part_file(part, 0);
      QFAIL("a second writer opened a locked .part file");
    } catch (const HubError& e) {
      QCOMPARE(e.kind(), HubErrorKind::WriteFailed);
      QVERIFY2(std::string(e.what()).find("being downloaded by another") != std::string::npos,
               e.what());
    }
    QCOMPARE(read_file(part), std::string("0123"));  // the second did not truncate it
    first->write("ab");
    first->finish();
    QCOMPARE(read_file(part), std::string("0123ab"));
    open_part_file(part, 6)->finish();  // free again once the first is closed
  }

  void refusesWhenTheDiskIsTooSmall() {
    server_->set_listed_size(kRepo, "model.safetensors", std::uint64_t(1) << 60);  // an exbibyte
    QTemporaryDir dir;
    const DownloadPlan plan =
        plan_download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    std::optional<MemoryVerdict> asked;
    const Preflight preflight = run_preflight(plan, [&](const DownloadPlan& p) {
      asked = MemoryVerdict{p.total_bytes() < (std::uint64_t(1) << 40),
                            "does not fit in 512 GiB of RAM"};
      return asked;
    });
    QVERIFY(!preflight.may_start());
    QCOMPARE(preflight.space.needed_bytes, std::uint64_t(1) << 60);
    QVERIFY(preflight.space.free_bytes < preflight.space.needed_bytes);
    QVERIFY2(preflight.space.message.find("Not enough disk space") != std::string::npos,
             preflight.space.message.c_str());
    QVERIFY(preflight.space.message.find("1024.0 PiB") != std::string::npos ||
            preflight.space.message.find("1048576.0 TiB") != std::string::npos);
    QVERIFY(preflight.memory.has_value());
    QVERIFY(!preflight.memory->fits);

    const DownloadPlan small =
        plan_download(fast_hub(*server_), request_into(dir, {{"config.json"}, {}}));
    QVERIFY(run_preflight(small).may_start());
    QVERIFY(!run_preflight(small).memory.has_value());
  }

  void resumesWhatAnEarlierRunLeft() {
    QTemporaryDir dir;
    const fs::path model = dir.path().toStdString() + "/model";
    write_file(model / "model.safetensors.part", weights_.substr(0, 123456));
    const DownloadPlan plan =
        plan_download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(plan.bytes_present(), std::uint64_t(123456));
    QCOMPARE(plan.bytes_to_fetch(), std::uint64_t(weights_.size() - 123456));
    DownloadOptions options;
    options.hub = fast_hub(*server_);
    const auto result = Downloader(plan, options).run();
    QCOMPARE(result.outcome, DownloadOutcome::Completed);
    QCOMPARE(server_->file_requests(kRepo, "model.safetensors").at(0).range_start,
             std::uint64_t(123456));
    QCOMPARE(server_->bytes_served(kRepo, "model.safetensors"),
             std::uint64_t(weights_.size() - 123456));
    QCOMPARE(read_file(model / "model.safetensors"), weights_);
  }

  void corruptPartFromAnEarlierRunIsNotAccepted() {
    QTemporaryDir dir;
    const fs::path model = dir.path().toStdString() + "/model";
    std::string damaged = weights_.substr(0, 50000);
    damaged[10] ^= 0x40;
    write_file(model / "model.safetensors.part", damaged);
    const auto result =
        download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}}));
    QCOMPARE(result.outcome, DownloadOutcome::Failed);
    QCOMPARE(result.error_kind, std::optional<HubErrorKind>(HubErrorKind::ChecksumMismatch));
    QVERIFY(!fs::exists(model / "model.safetensors"));
    // The next attempt starts from scratch and succeeds.
    QCOMPARE(download(fast_hub(*server_), request_into(dir, {{"model.safetensors"}, {}})).outcome,
             DownloadOutcome::Completed);
    QCOMPARE(read_file(model / "model.safetensors"), weights_);
  }

  void pauseResumeAndCancelArePrompt() {
    server_->set_throttle(200000);  // 300 kB take 1.5 s
    QTemporaryDir dir;
    DownloadOptions options;
    options.hub = fast_hub(*server_);
    options.progress_interval_ms = 20;
    std::atomic<std::uint64_t> done{0};
    std::atomic<bool> saw_paused{false};
    options.on_progress = [&](const DownloadProgress& p) {
      done = p.bytes_done;
      for (const auto& f : p.files) saw_paused = saw_paused || f.state == FileState::Paused;
    };
    Downloader downloader(
        plan_download(options.hub, request_into(dir, {{"model.safetensors"}, {}})), options);
    DownloadResult result;
    std::thread runner([&] { result = downloader.run(); });
    QTRY_VERIFY_WITH_TIMEOUT(done > 20000, 5000);
    downloader.pause();
    QTRY_VERIFY_WITH_TIMEOUT(saw_paused.load(), 1000);
    const std::uint64_t served_at_pause = server_->bytes_served(kRepo, "model.safetensors");
    QTest::qWait(300);
    // Nothing more than what was already in flight arrives while paused.
    QVERIFY(server_->bytes_served(kRepo, "model.safetensors") <= served_at_pause + 16384);
    downloader.resume();
    QTRY_VERIFY_WITH_TIMEOUT(done > 150000, 5000);
    QElapsedTimer timer;
    timer.start();
    downloader.cancel();
    runner.join();
    QVERIFY2(timer.elapsed() < 500, qPrintable(QString::number(timer.elapsed())));
    QCOMPARE(result.outcome, DownloadOutcome::Cancelled);
    QCOMPARE(file_in(result, "model.safetensors").state, FileState::Cancelled);
    const fs::path part = dir.path().toStdString() + "/model/model.safetensors.part";
    QVERIFY(fs::exists(part));
    QVERIFY(fs::file_size(part) >= 150000);
    QVERIFY(!fs::exists(dir.path().toStdString() + "/model/model.safetensors"));
    // Resumed after the pause with a range, not from the start.
    const auto requests = server_->file_requests(kRepo, "model.safetensors");
    QVERIFY(requests.size() >= 2);
    QVERIFY(requests[1].range_start > 0);
  }
};

QTEST_GUILESS_MAIN(TestHub)
#include "tst_hub.moc"
