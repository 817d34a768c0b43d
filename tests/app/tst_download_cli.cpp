// `tandem download` as a user runs it, against a local stand-in for the Hub: progress,
// exit statuses, Ctrl-C, and a process killed with SIGKILL whose successor fetches only
// what was missing.
#include <signal.h>

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>
#include <random>

#include "hub_fixture_server.h"

using tandem::test::HubFixtureServer;

namespace {

const std::string kRepo = tandem::test::kFixtureRepo;
using tandem::test::random_bytes;

QByteArray read_all(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QByteArray bytes(const std::string& s) {
  return QByteArray(s.data(), static_cast<qsizetype>(s.size()));
}

}  // namespace

class TestDownloadCli : public QObject {
  Q_OBJECT
  QTemporaryDir home_;
  std::unique_ptr<HubFixtureServer> server_;
  std::string shard1_, shard2_, config_;

  QProcessEnvironment env() const {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert(QStringLiteral("HOME"), home_.path());
    e.insert(QStringLiteral("XDG_DATA_HOME"), home_.path() + "/data");
    e.insert(QStringLiteral("XDG_CONFIG_HOME"), home_.path() + "/config");
    e.insert(QStringLiteral("XDG_CACHE_HOME"), home_.path() + "/.cache");
    e.insert(QStringLiteral("TANDEM_LOG_TO_FILE"), QStringLiteral("0"));
    e.insert(QStringLiteral("HF_ENDPOINT"), QString::fromStdString(server_->endpoint()));
    // Only 127.0.0.1 is ever contacted, and never through a proxy.
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "http_proxy", "https_proxy",
                          "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}) {
      e.remove(QString::fromLatin1(v));
    }
    e.insert(QStringLiteral("no_proxy"), QStringLiteral("127.0.0.1"));
    return e;
  }

  QString modelDir() const {
    return home_.path() + "/data/Tandem/Tandem/models/" + QString::fromStdString(kRepo);
  }

  void start(QProcess& p, const QStringList& args) const {
    p.setProcessEnvironment(env());
    p.start(QStringLiteral(TANDEM_EXECUTABLE), QStringList{QStringLiteral("download")} + args);
    QVERIFY(p.waitForStarted());
  }

  int run(const QStringList& args, QString* out = nullptr, QString* err = nullptr) const {
    QProcess p;
    p.setProcessEnvironment(env());
    p.start(QStringLiteral(TANDEM_EXECUTABLE), QStringList{QStringLiteral("download")} + args);
    if (!p.waitForFinished(30000)) {
      p.kill();
      p.waitForFinished();
      return -1;
    }
    if (out) *out = QString::fromUtf8(p.readAllStandardOutput());
    if (err) *err = QString::fromUtf8(p.readAllStandardError());
    return p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  }

 private slots:
  void init() {
    QDir(home_.path()).removeRecursively();
    QDir().mkpath(home_.path());
    server_ = std::make_unique<HubFixtureServer>();
    shard1_ = random_bytes(600000, 11);
    shard2_ = random_bytes(500000, 12);
    config_ = "{\"model_type\": \"qwen3_moe\"}";
    server_->add_file(kRepo, "model-00001-of-00002.safetensors", shard1_);
    server_->add_file(kRepo, "model-00002-of-00002.safetensors", shard2_);
    server_->add_file(kRepo, "config.json", config_, false);
    server_->add_file(kRepo, "README.md", "# tiny", false);
  }
  void cleanup() { server_.reset(); }

  void downloadsIntoTheModelsFolderWithProgressLines() {
    QString out, err;
    QCOMPARE(run({"--exclude", "*.md", QString::fromStdString(kRepo)}, &out, &err), 0);
    QVERIFY2(out.contains(QLatin1String("progress 100%")), qPrintable(out));
    QVERIFY(out.contains(QLatin1String("done model-00001-of-00002.safetensors")));
    QVERIFY(out.contains(QLatin1String("Done: 3 files")));
    QCOMPARE(read_all(modelDir() + "/model-00001-of-00002.safetensors"), bytes(shard1_));
    QCOMPARE(read_all(modelDir() + "/model-00002-of-00002.safetensors"), bytes(shard2_));
    QCOMPARE(read_all(modelDir() + "/config.json"), bytes(config_));
    QVERIFY(!QFile::exists(modelDir() + "/README.md"));
  }

  // The Hub token opens a gated repository, and appears nowhere: not on the console, not in
  // the log file (written, and verbose), not in the sentence of a failure.
  void theTokenStaysOutOfOutputAndLogs() {
    const std::string token = "hf_TOPSECRETtoken1234567890";
    server_->set_gated(kRepo, token);
    QProcessEnvironment e = env();
    e.insert(QStringLiteral("HF_TOKEN"), QString::fromStdString(token));
    e.remove(QStringLiteral("TANDEM_LOG_TO_FILE"));
    const auto tandem = [&](const QStringList& args, QString& all) {
      QProcess p;
      p.setProcessEnvironment(e);
      p.start(QStringLiteral(TANDEM_EXECUTABLE), args);
      if (!p.waitForFinished(30000)) p.kill();
      all += QString::fromUtf8(p.readAllStandardOutput()) +
             QString::fromUtf8(p.readAllStandardError());
      return p.exitCode();
    };
    QString all;
    QCOMPARE(tandem({"--verbose", "download", QString::fromStdString(kRepo), "--dir",
                     home_.path() + "/gated"},
                    all),
             0);  // the token was sent: the gated files came
    QCOMPARE(read_all(home_.path() + "/gated/config.json"), bytes(config_));
    e.insert(QStringLiteral("HF_TOKEN"), QString::fromStdString(token) + "x");  // a wrong one
    QVERIFY(tandem({"--verbose", "download", QString::fromStdString(kRepo), "--dir",
                    home_.path() + "/refused"},
                   all) != 0);
    QFile log(home_.path() + "/data/Tandem/Tandem/logs/tandem.log");
    QVERIFY2(log.open(QIODevice::ReadOnly), "no log file was written");
    all += QString::fromUtf8(log.readAll());
    QVERIFY(all.size() > 200);
    QVERIFY2(!all.contains(QLatin1String("TOPSECRET")), qPrintable(all));
  }

  // Every connection checks the server's certificate: a Hub (or mirror) with a self-signed
  // one is refused, with a sentence that says so, unless its authority is given.
  void aSelfSignedServerIsRefusedUnlessTrusted() {
    QTemporaryDir dir;
    const QString cert = dir.filePath("cert.pem"), key = dir.filePath("key.pem");
    QProcess make;
    make.start(
        QStringLiteral("openssl"),
        {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert});
    QVERIFY2(make.waitForFinished(30000) && make.exitCode() == 0,
             qPrintable(QString::fromUtf8(make.readAllStandardError())));
    QTcpServer probe;
    QVERIFY(probe.listen(QHostAddress::LocalHost, 0));
    const quint16 port = probe.serverPort();
    probe.close();
    QProcess tls;
    tls.start(QStringLiteral("openssl"), {"s_server", "-accept", QString::number(port), "-cert",
                                          cert, "-key", key, "-www", "-quiet"});
    QVERIFY(tls.waitForStarted());
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
          QTcpSocket s;
          s.connectToHost(QHostAddress::LocalHost, port);
          return s.waitForConnected(200);
        }(),
        10000);
    QProcessEnvironment e = env();
    e.insert(QStringLiteral("HF_ENDPOINT"), QStringLiteral("https://127.0.0.1:%1").arg(port));
    const auto download = [&](const QProcessEnvironment& with) {
      QProcess p;
      p.setProcessEnvironment(with);
      p.start(QStringLiteral(TANDEM_EXECUTABLE),
              {"download", "someone/model", "--dir", dir.filePath("out")});
      if (!p.waitForFinished(60000)) p.kill();
      return std::pair{p.exitCode(), QString::fromUtf8(p.readAllStandardError())};
    };
    const auto [refused, why] = download(e);
    QVERIFY(refused != 0);
    QVERIFY2(why.contains(QLatin1String("certificate"), Qt::CaseInsensitive), qPrintable(why));
    e.insert(QStringLiteral("CURL_CA_BUNDLE"), cert);
    const auto [trusted, answer] = download(e);
    // Trusted, the connection is made: what fails now is that this server is not a Hub.
    QVERIFY(trusted != 0);
    QVERIFY2(!answer.contains(QLatin1String("certificate"), Qt::CaseInsensitive),
             qPrintable(answer));
    tls.kill();
    tls.waitForFinished();
  }

  void killedDownloadResumesInANewProcess() {
    server_->set_throttle(250000);  // per connection: each shard takes 2 s or more
    const QString dir = home_.path() + "/killed";
    QProcess first;
    start(first, {QString::fromStdString(kRepo), "--dir", dir, "--include", "*.safetensors"});
    const std::string a = "model-00001-of-00002.safetensors",
                      b = "model-00002-of-00002.safetensors";
    QTRY_VERIFY_WITH_TIMEOUT(
        server_->bytes_served(kRepo, a) > 150000 && server_->bytes_served(kRepo, b) > 150000,
        10000);
    first.kill();  // SIGKILL: no chance to clean up
    QVERIFY(first.waitForFinished());
    QCOMPARE(first.exitStatus(), QProcess::CrashExit);

    QVERIFY(!QFile::exists(dir + "/" + QString::fromStdString(a)));
    const qint64 part_a = QFileInfo(dir + "/" + QString::fromStdString(a) + ".part").size();
    const qint64 part_b = QFileInfo(dir + "/" + QString::fromStdString(b) + ".part").size();
    QVERIFY2(part_a > 0 && part_a < qint64(shard1_.size()), qPrintable(QString::number(part_a)));
    QVERIFY2(part_b > 0 && part_b < qint64(shard2_.size()), qPrintable(QString::number(part_b)));

    // The dead process's connections are still counted until the server notices.
    QTRY_COMPARE_WITH_TIMEOUT(server_->open_connections(), 0, 5000);
    server_->reset_counters();
    server_->set_throttle(0);
    QString out, err;
    QCOMPARE(run({QString::fromStdString(kRepo), "--dir", dir, "--include", "*.safetensors"}, &out,
                 &err),
             0);
    // Only the missing bytes travel again, asked for with a range from where the .part ended.
    QCOMPARE(server_->bytes_served(kRepo, a), std::uint64_t(shard1_.size() - std::size_t(part_a)));
    QCOMPARE(server_->bytes_served(kRepo, b), std::uint64_t(shard2_.size() - std::size_t(part_b)));
    QCOMPARE(server_->file_requests(kRepo, a).at(0).range_start, std::uint64_t(part_a));
    QCOMPARE(server_->file_requests(kRepo, b).at(0).range_start, std::uint64_t(part_b));
    QCOMPARE(read_all(dir + "/" + QString::fromStdString(a)), bytes(shard1_));
    QCOMPARE(read_all(dir + "/" + QString::fromStdString(b)), bytes(shard2_));
    QVERIFY(!QFile::exists(dir + "/" + QString::fromStdString(a) + ".part"));
  }

  void ctrlCCancelsAndKeepsThePartFile() {
    server_->set_throttle(200000);
    const QString dir = home_.path() + "/interrupted";
    QProcess p;
    start(p, {QString::fromStdString(kRepo), "--dir", dir, "--include", "model-00001*"});
    QTRY_VERIFY_WITH_TIMEOUT(
        server_->bytes_served(kRepo, "model-00001-of-00002.safetensors") > 100000, 10000);
    QElapsedTimer timer;
    timer.start();
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(5000));
    QVERIFY2(timer.elapsed() < 1500, qPrintable(QString::number(timer.elapsed())));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 130);
    QVERIFY(QString::fromUtf8(p.readAllStandardError())
                .contains(QLatin1String("Run the same command again to resume")));
    QVERIFY(QFileInfo(dir + "/model-00001-of-00002.safetensors.part").size() > 0);
    QVERIFY(!QFile::exists(dir + "/model-00001-of-00002.safetensors"));
  }

  void exitStatusSaysWhatHappened() {
    QString out, err;
    QCOMPARE(run({"not a repo"}, &out, &err), 2);
    QVERIFY2(err.contains(QLatin1String("ORGANISATION/MODEL")), qPrintable(err));

    QCOMPARE(run({QString::fromStdString(kRepo), "--include", "*.gguf"}, &out, &err), 2);
    QVERIFY2(err.contains(QLatin1String("matches the include/exclude patterns")), qPrintable(err));

    server_->set_listed_size(kRepo, "model-00001-of-00002.safetensors", std::uint64_t(1) << 60);
    QCOMPARE(run({QString::fromStdString(kRepo)}, &out, &err), 3);
    QVERIFY2(err.contains(QLatin1String("Not enough disk space")), qPrintable(err));
    QCOMPARE(server_->bytes_served(kRepo, "config.json"),
             std::uint64_t(0));  // refused before any transfer

    server_->set_gated(kRepo, "hf_secret");
    QCOMPARE(run({QString::fromStdString(kRepo)}, &out, &err), 4);
    QVERIFY2(err.contains(QLatin1String("Accept the licence on the model page")), qPrintable(err));

    server_->set_listed_sha256(kRepo, "model-00002-of-00002.safetensors", std::string(64, 'a'));
    server_->set_listed_size(kRepo, "model-00001-of-00002.safetensors", shard1_.size());
    QProcessEnvironment with_token = env();
    QProcess p;
    with_token.insert(QStringLiteral("HF_TOKEN"), QStringLiteral("hf_secret"));
    p.setProcessEnvironment(with_token);
    p.start(QStringLiteral(TANDEM_EXECUTABLE),
            {"download", QString::fromStdString(kRepo), "--dir", home_.path() + "/bad"});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 1);
    const QString failure = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(failure.contains(QLatin1String("was not accepted")), qPrintable(failure));
    QVERIFY(QFile::exists(home_.path() + "/bad/model-00001-of-00002.safetensors"));
    QVERIFY(!QFile::exists(home_.path() + "/bad/model-00002-of-00002.safetensors"));
  }
};

QTEST_GUILESS_MAIN(TestDownloadCli)
#include "tst_download_cli.moc"
