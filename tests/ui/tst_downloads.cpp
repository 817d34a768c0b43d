// The download manager against a local stand-in for the Hub: the model behind the list,
// its errors and retry, the buttons the delegate paints, the dialog, and downloads that
// resume when the app starts again.
#include <QAbstractItemModelTester>
#include <QCryptographicHash>
#include <QDir>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QListWidget>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTreeView>
#include <QtTest>
#include <random>

#include "hub_fixture_server.h"
#include "ui/downloads/delegate.h"
#include "ui/downloads/dialog.h"
#include "ui/downloads/list_model.h"
#include "ui/downloads/page.h"
#include "ui/downloads/queue.h"
#include "ui/main_window.h"
#include "ui/secret_store.h"

using namespace tandem::ui;
using tandem::test::HubFixtureServer;
using Model = DownloadListModel;

namespace {

const std::string kRepo = tandem::test::kFixtureRepo;
using tandem::test::random_bytes;

std::string sha256(const std::string& s) {
  return QCryptographicHash::hash(QByteArray(s.data(), qsizetype(s.size())),
                                  QCryptographicHash::Sha256)
      .toHex()
      .toStdString();
}

}  // namespace

class TestDownloads : public QObject {
  Q_OBJECT
  std::unique_ptr<HubFixtureServer> server_;
  std::unique_ptr<QTemporaryDir> dir_;
  std::string weights_;

  DownloadJobSpec spec(QStringList include = {}) const {
    DownloadJobSpec s;
    s.repo = QString::fromStdString(kRepo);
    s.include = include;
    s.destination = dir_->path() + "/model";
    return s;
  }

  static QString stateText(const Model& model, quint64 id) {
    return model.indexOf(id, Model::StateColumn).data().toString();
  }

 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TandemTest"));
    QCoreApplication::setApplicationName(QStringLiteral("TandemDownloadsTest"));
    // DBUS_SESSION_BUS_ADDRESS: the token goes to a file here, not to the desktop's keyring
    // of whoever runs the tests (tst_keyring tests the keyring on a bus of its own).
    for (const char* v : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT", "http_proxy",
                          "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                          "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR"}) {
      qunsetenv(v);
    }
    qputenv("no_proxy", "127.0.0.1");
  }

  void init() {
    server_ = std::make_unique<HubFixtureServer>();
    dir_ = std::make_unique<QTemporaryDir>();
    weights_ = random_bytes(400000, 7);
    server_->add_file(kRepo, "model.safetensors", weights_);
    server_->add_file(kRepo, "config.json", "{\"model_type\": \"qwen3_moe\"}", false);
    QSettings settings;
    settings.clear();
    settings.setValue(DownloadQueue::kEndpointKey, QString::fromStdString(server_->endpoint()));
  }

  void cleanup() {
    server_.reset();
    QSettings().clear();
  }

  void downloadFillsTheModel() {
    DownloadQueue queue;
    QAbstractItemModelTester tester(queue.model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    const quint64 id = queue.start(spec());
    QVERIFY(finished.wait(20000));
    QCOMPARE(finished.at(0).at(1).toBool(), true);
    const Model& model = *queue.model();
    QCOMPARE(model.state(id), DownloadJobState::Done);
    const QModelIndex row = model.indexOf(id);
    QCOMPARE(model.rowCount(row), 2);
    QCOMPARE(row.data(Model::ProgressRole).toDouble(), 1.0);
    QCOMPARE(row.data(Model::BytesTotalRole).toULongLong(), qulonglong(weights_.size() + 27));
    QCOMPARE(row.data(Model::ActionsRole).toStringList(), QStringList{"remove"});
    for (int i = 0; i < 2; ++i) {
      const QModelIndex file = model.index(i, 0, row);
      QCOMPARE(file.data(Model::StateRole).toInt(), int(tandem::hub::FileState::Done));
      QCOMPARE(file.siblingAtColumn(Model::StateColumn).data().toString(),
               QStringLiteral("Verified"));
      QCOMPARE(file.data(Model::IsDownloadRole).toBool(), false);
      QCOMPARE(file.parent(), row);
    }
    QFile f(dir_->path() + "/model/model.safetensors");
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.size(), qint64(weights_.size()));
  }

  void failureShowsTheErrorAndRetryRecovers() {
    server_->set_listed_sha256(kRepo, "model.safetensors", std::string(64, 'b'));
    DownloadQueue queue;
    QAbstractItemModelTester tester(queue.model(),
                                    QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    const quint64 id = queue.start(spec());
    QVERIFY(finished.wait(20000));
    const Model& model = *queue.model();
    QCOMPARE(model.state(id), DownloadJobState::Failed);
    const QString error = model.indexOf(id).data(Model::ErrorRole).toString();
    QVERIFY2(error.contains(QLatin1String("model.safetensors was not accepted")),
             qPrintable(error));
    QCOMPARE(stateText(model, id), QStringLiteral("Failed"));
    QCOMPARE(model.indexOf(id).data(Qt::ToolTipRole).toString(), error);
    QCOMPARE(model.indexOf(id).data(Model::ActionsRole).toStringList(),
             (QStringList{"retry", "remove"}));
    // The file's own row carries the error too; the other file is unaffected.
    const QModelIndex row = model.indexOf(id);
    bool file_error = false;
    for (int i = 0; i < model.rowCount(row); ++i) {
      file_error =
          file_error || model.index(i, 0, row).data(Model::ErrorRole).toString().contains("sha256");
    }
    QVERIFY(file_error);

    server_->set_listed_sha256(kRepo, "model.safetensors", sha256(weights_));
    queue.trigger(id, QStringLiteral("retry"));
    QVERIFY(finished.wait(20000));
    QCOMPARE(model.state(id), DownloadJobState::Done);
    QVERIFY(model.indexOf(id).data(Model::ErrorRole).toString().isEmpty());
  }

  // Offline: within a moment, each download's own row says there is no connection and that
  // Tandem retries (the attempt), with the sentence in its tooltip and detail, instead of
  // "Checking files and space…" until the retries run out.
  void offlineIsSaidAtOnceOnEveryRow() {
    QSettings().setValue(DownloadQueue::kEndpointKey, QStringLiteral("http://127.0.0.1:1"));
    DownloadQueue queue;
    const quint64 first = queue.start(spec());
    DownloadJobSpec other = spec();
    other.destination += QStringLiteral("-2");
    const quint64 second = queue.start(other);
    const Model& model = *queue.model();
    QElapsedTimer clock;
    clock.start();
    for (const quint64 id : {first, second}) {
      QTRY_VERIFY_WITH_TIMEOUT(
          stateText(model, id).startsWith(QStringLiteral("No connection to the Hub · retrying")),
          5000);
      QVERIFY2(stateText(model, id).contains(QLatin1String("of 8)")),
               qPrintable(stateText(model, id)));
      const QString why = model.indexOf(id).data(Model::ErrorRole).toString();
      QVERIFY2(why.contains(QLatin1String("127.0.0.1")), qPrintable(why));
      QCOMPARE(model.indexOf(id).data(Qt::ToolTipRole).toString(), why);
    }
    QVERIFY(clock.elapsed() < 5000);
    queue.cancel(first);
    queue.cancel(second);
  }

  // The dialog searches the Hub by name, lists the matches, and choosing one fills the
  // repository and says its size and whether it fits this computer, all off the UI thread.
  void dialogSearchesTheHub() {
    QFile config(QStringLiteral(TANDEM_TEST_DATA_DIR "/hub/mixtral-8x7b-instruct.json"));
    QVERIFY(config.open(QIODevice::ReadOnly));
    server_->add_model_repo("mistralai/Mixtral-8x7B-Instruct-v0.1", config.readAll().toStdString(),
                            93'000'000'000ull, 19);
    DownloadDialog dialog(dir_->path());
    QSignalSpy searched(&dialog, &DownloadDialog::searchFinished);
    QSignalSpy checked(&dialog, &DownloadDialog::checkFinished);
    dialog.search(QStringLiteral("mixtral"));
    QVERIFY(searched.wait(15000));
    QCOMPARE(dialog.results()->count(), 1);
    QVERIFY(dialog.results()->item(0)->text().startsWith(
        QStringLiteral("mistralai/Mixtral-8x7B-Instruct-v0.1 · ")));
    dialog.results()->setCurrentRow(0);
    QCOMPARE(dialog.repoEdit()->text(), QStringLiteral("mistralai/Mixtral-8x7B-Instruct-v0.1"));
    QVERIFY(checked.wait(15000));
    const QString answer = dialog.resultText();
    QVERIFY2(answer.contains(QLatin1String("a Mixtral model, 46.7 B parameters")) &&
                 answer.contains(QLatin1String("to download")) &&
                 answer.contains(QLatin1String("this computer")),
             qPrintable(answer));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      dialog.show();
      dialog.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/download-search.png");
    }
    dialog.search(QStringLiteral("nothing like it"));
    QVERIFY(searched.wait(15000));
    QCOMPARE(dialog.results()->count(), 0);
  }

  void gatedDownloadExplainsWhatToDo() {
    tandem::ui::secrets::write(QLatin1String(DownloadQueue::kTokenSecret), {});  // no token yet
    server_->set_gated(kRepo, "hf_secret");
    DownloadQueue queue;
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    const quint64 id = queue.start(spec());
    QVERIFY(finished.wait(20000));
    QCOMPARE(queue.model()->state(id), DownloadJobState::Failed);
    QVERIFY(
        queue.model()->message(id).contains(QLatin1String("Accept the licence on the model page")));
    QSettings().setValue(DownloadQueue::kTokenKey, QStringLiteral("hf_secret"));
    queue.retry(id);
    QVERIFY(finished.wait(20000));
    QCOMPARE(queue.model()->state(id), DownloadJobState::Done);
    tandem::ui::secrets::write(QLatin1String(DownloadQueue::kTokenSecret), {});
  }

  void memoryVerdictIsShownAsAWarning() {
    DownloadQueue queue;
    std::uint64_t asked_about = 0;
    queue.setMemoryVerdictSource([&](const tandem::hub::DownloadPlan& plan) {
      asked_about = plan.total_bytes();
      return std::optional<tandem::hub::MemoryVerdict>(tandem::hub::MemoryVerdict{
          false, "needs 24 GiB of RAM and VRAM together; this machine has 16 GiB"});
    });
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    const quint64 id = queue.start(spec());
    QVERIFY(finished.wait(20000));
    // The download still happens (the user may want it for another machine), with the warning kept.
    QCOMPARE(queue.model()->state(id), DownloadJobState::Done);
    QCOMPARE(asked_about, std::uint64_t(weights_.size() + 27));
    QVERIFY(queue.model()
                ->indexOf(id)
                .data(Qt::ToolTipRole)
                .toString()
                .contains(QLatin1String("needs 24 GiB")));
  }

  void delegateButtonsPauseAndResume() {
    server_->set_throttle(150000);  // about 2.7 s for the weights
    DownloadQueue queue;
    DownloadsPage page(&queue, dir_->path());
    page.resize(1200, 500);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    const quint64 id = queue.start(spec({"model.safetensors"}));
    const Model& model = *queue.model();
    QTRY_VERIFY_WITH_TIMEOUT(model.indexOf(id).data(Model::BytesDoneRole).toULongLong() > 30000,
                             10000);

    auto click = [&](const QString& action) {
      const QModelIndex cell = model.indexOf(id, Model::ActionsColumn);
      const QStringList actions = cell.data(Model::ActionsRole).toStringList();
      const int which = int(actions.indexOf(action));
      QVERIFY2(which >= 0, qPrintable(actions.join(',')));
      const QRect button = DownloadDelegate::buttonRects(page.view()->visualRect(cell), actions,
                                                         page.view()->fontMetrics())[which];
      QTest::mouseClick(page.view()->viewport(), Qt::LeftButton, {}, button.center());
    };
    click(QStringLiteral("pause"));
    QCOMPARE(model.state(id), DownloadJobState::Paused);
    QTest::qWait(200);  // what was in flight settles
    const std::uint64_t served = server_->bytes_served(kRepo, "model.safetensors");
    QTest::qWait(400);
    QVERIFY(server_->bytes_served(kRepo, "model.safetensors") <= served + 16384);
    QVERIFY(finished.isEmpty());

    click(QStringLiteral("resume"));
    QCOMPARE(model.state(id), DownloadJobState::Downloading);
    QVERIFY(finished.wait(20000));
    QCOMPARE(model.state(id), DownloadJobState::Done);
    const auto requests = server_->file_requests(kRepo, "model.safetensors");
    QVERIFY(requests.size() >= 2);
    QVERIFY(requests.back().range_start > 0);  // resumed, not restarted
  }

  void unfinishedDownloadsResumeWhenTheAppStartsAgain() {
    server_->set_throttle(200000);
    {
      DownloadQueue first_session;
      const quint64 id = first_session.start(spec({"model.safetensors"}));
      QTRY_VERIFY_WITH_TIMEOUT(
          first_session.model()->indexOf(id).data(Model::BytesDoneRole).toULongLong() > 80000,
          10000);
      // The app closes mid-download.
    }
    QVERIFY(!QFile::exists(dir_->path() + "/model/model.safetensors"));
    const qint64 part = QFileInfo(dir_->path() + "/model/model.safetensors.part").size();
    QVERIFY(part > 0);
    QTRY_COMPARE_WITH_TIMEOUT(server_->open_connections(), 0, 5000);
    server_->reset_counters();
    server_->set_throttle(0);

    DownloadQueue second_session;
    QSignalSpy finished(&second_session, &DownloadQueue::finished);
    second_session.restore();
    QCOMPARE(second_session.model()->rowCount(), 1);
    const quint64 id = second_session.model()->ids().at(0);
    QCOMPARE(second_session.model()->spec(id).include, QStringList{"model.safetensors"});
    QVERIFY(finished.wait(20000));
    QCOMPARE(second_session.model()->state(id), DownloadJobState::Done);
    QCOMPARE(server_->file_requests(kRepo, "model.safetensors").at(0).range_start,
             std::uint64_t(part));
    QCOMPARE(server_->bytes_served(kRepo, "model.safetensors"),
             std::uint64_t(weights_.size()) - std::uint64_t(part));

    // Finished downloads are remembered as done, and removing one forgets it.
    DownloadQueue third_session;
    third_session.restore();
    const quint64 done = third_session.model()->ids().at(0);
    QCOMPARE(third_session.model()->state(done), DownloadJobState::Done);
    third_session.remove(done);
    QCOMPARE(third_session.model()->rowCount(), 0);
    DownloadQueue fourth_session;
    fourth_session.restore();
    QCOMPARE(fourth_session.model()->rowCount(), 0);
  }

  void dialogAcceptsOnlyRepositoryNames() {
    DownloadDialog dialog(QStringLiteral("/models"));
    QVERIFY(!dialog.startButton()->isEnabled());
    dialog.repoEdit()->setText(QStringLiteral("not a repo"));
    QVERIFY(!dialog.startButton()->isEnabled());
    dialog.repoEdit()->setText(QStringLiteral(" Qwen/Qwen3-30B-A3B "));
    QVERIFY(dialog.startButton()->isEnabled());
    dialog.includeEdit()->setText(QStringLiteral("*.safetensors, *.json  tokenizer*"));
    const DownloadJobSpec s = dialog.spec();
    QCOMPARE(s.repo, QStringLiteral("Qwen/Qwen3-30B-A3B"));
    QCOMPARE(s.revision, QStringLiteral("main"));
    QCOMPARE(s.include, (QStringList{"*.safetensors", "*.json", "tokenizer*"}));
    QCOMPARE(s.destination, QStringLiteral("/models/Qwen/Qwen3-30B-A3B"));
    dialog.setEndpoint(QStringLiteral(" https://hf-mirror.example "));
    QCOMPARE(dialog.endpoint(), QStringLiteral("https://hf-mirror.example"));
  }

  void mainWindowHasADownloadsPage() {
    MainWindow window;
    window.showPage(MainWindow::Page::Downloads);
    QCOMPARE(window.currentPage(), MainWindow::Page::Downloads);
    QVERIFY(window.downloadsPage()->isVisibleTo(&window));
    QCOMPARE(window.downloadsPage()->view()->model(), window.downloadQueue()->model());
  }
};

QTEST_MAIN(TestDownloads)
#include "tst_downloads.moc"
