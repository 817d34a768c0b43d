// The main window: it shows the probe's findings without blocking, persists its layout,
// and its live chart follows the samples it is fed.
#include <QAbstractButton>
#include <QAbstractItemView>
#include <QAbstractSpinBox>
#include <QAccessible>
#include <QAction>
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileInfo>
#include <QHeaderView>
#include <QLineEdit>
#include <QListView>
#include <QMap>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QToolButton>
#include <QTreeWidget>
#include <QtTest>
#include <algorithm>
#include <future>
#include <nlohmann/json.hpp>

#include "engine/convert/converter.h"
#include "engine/version.h"
#include "server/openai_server.h"
#include "tests/support/http_client.h"
#include "ui/chat_page.h"
#include "ui/conversation/list_model.h"
#include "ui/conversation/store.h"
#include "ui/conversion_dialog.h"
#include "ui/desktop_integration.h"
#include "ui/downloads/queue.h"
#include "ui/engine_host.h"
#include "ui/live_panel.h"
#include "ui/main_window.h"
#include "ui/models_page.h"
#include "ui/preferences_dialog.h"
#include "ui/secret_store.h"
#include "ui/setup_wizard.h"
#include "ui/system_page.h"
#include "ui/theme.h"
#include "ui/throughput_chart.h"

using tandem::ui::MainWindow;

class TestMainWindow : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    tandem::ui::theme::apply(*qApp);
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TandemTest"));
    QCoreApplication::setApplicationName(QStringLiteral("TandemTest"));
    QSettings().clear();
    // Secrets go to files here, not to the desktop keyring of whoever runs the tests
    // (tst_keyring tests the keyring on a bus of its own).
    qunsetenv("DBUS_SESSION_BUS_ADDRESS");
    qunsetenv("XDG_RUNTIME_DIR");
  }

  void showsProbeFindings() {
    MainWindow window;
    QSignalSpy detected(&window, &MainWindow::hardwareDetected);
    window.show();
    // The probe runs on a worker thread: the window is up before it finishes.
    QVERIFY(window.isVisible());
    QVERIFY(detected.wait(20000));
    const auto report = window.systemPage()->report();
    QVERIFY(report);
    const QString text = window.systemPage()->findingsText();
    QVERIFY2(text.contains(QString::fromStdString(report->isa.identity.brand)), qPrintable(text));
    QVERIFY(text.contains(QLatin1String("NUMA node")));
    QVERIFY(text.contains(QLatin1String("CPU threads recommended")));
    QVERIFY(text.contains(QString::fromUtf8(
        tandem::hw::backend_label(report->recommendation.cpu_backend.value).data())));
    QVERIFY(window.statusSummary().contains(QLatin1String("CPU: ")));
    if (report->gpus.devices.empty()) {
      QVERIFY(text.contains(QLatin1String("No GPU: everything runs on the CPU")));
      QVERIFY(window.statusSummary().contains(QLatin1String("No GPU")));
    }
  }

  // The first window fits the screen it opens on (the offscreen platform's is 800 x 600,
  // smaller than the 1280 x 800 it takes where there is room).
  void theFirstWindowFitsTheScreen() {
    QSettings().clear();
    MainWindow window;
    const QSize room = QGuiApplication::primaryScreen()->availableGeometry().size();
    QVERIFY2(window.width() <= room.width() && window.height() <= room.height(),
             qPrintable(QStringLiteral("%1 x %2 on %3 x %4")
                            .arg(window.width())
                            .arg(window.height())
                            .arg(room.width())
                            .arg(room.height())));
    QCOMPARE(window.size(), QSize(1280, 800).boundedTo(room * 0.95));
  }

  // In a narrow window (a 1024 x 640 screen's, and narrower) the live panel is whole: its
  // dock is no narrower than the panel (it was, and the panel's right edge was cut off).
  void theLivePanelIsWholeAtASmallSize() {
    QSettings().clear();
    MainWindow window;
    window.resize(900, 600);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QWidget* live = window.livePanelWidget();
    auto* scroll = qobject_cast<QScrollArea*>(live->parentWidget()->parentWidget());
    QVERIFY(scroll != nullptr);
    QTRY_VERIFY2(live->width() <= scroll->viewport()->width(),
                 qPrintable(QStringLiteral("the panel is %1 wide in a view of %2")
                                .arg(live->width())
                                .arg(scroll->viewport()->width())));
  }

  void settingsPersist() {
    {
      MainWindow window;
      window.show();
      window.resize(1100, 700);
      window.showPage(MainWindow::Page::System);
      window.livePanel()->hide();
      window.close();
    }
    MainWindow again;
    again.show();
    QCOMPARE(again.currentPage(), MainWindow::Page::System);
    QCOMPARE(again.size(), QSize(1100, 700));
    QVERIFY(!again.livePanel()->isVisible());
    QSettings().clear();
  }

  // A first start (or a model folder that is gone): the chat opens with the built-in demo
  // model. A configured model that exists is loaded instead.
  void opensTheDemoModelWhenNoModelIsConfigured_data() {
    QTest::addColumn<QString>("configured");
    QTest::addColumn<QString>("loaded");
    const QString demo =
        QFileInfo(QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model")).canonicalFilePath();
    const QString fixture =
        QFileInfo(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe")).canonicalFilePath();
    QTest::newRow("nothing configured") << QString() << demo;
    QTest::newRow("configured folder is gone") << QStringLiteral("/nonexistent/model") << demo;
    QTest::newRow("configured folder exists") << fixture << fixture;
    // A GGUF file runs in the window as it is stored.
    const QString gguf =
        QFileInfo(QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/qwen3moe-mixed.gguf"))
            .canonicalFilePath();
    QTest::newRow("configured GGUF file") << gguf << gguf;
  }

  void opensTheDemoModelWhenNoModelIsConfigured() {
    QFETCH(QString, configured);
    QFETCH(QString, loaded);
    QSettings().clear();
    if (!configured.isEmpty()) QSettings().setValue(QStringLiteral("model/folder"), configured);
    MainWindow window;
    window.show();
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    QCOMPARE(QFileInfo(window.engine()->model().folder).canonicalFilePath(), loaded);
    QSettings().clear();
  }

  // At 1024 x 640 on a first start, the live panel keeps the width its content needs and the
  // pages fit beside it without scrolling sideways.
  void fitsAt1024() {
    QSettings().clear();
    MainWindow window;
    window.resize(1024, 640);
    window.show();
    QTest::qWait(100);
    // A conversation with a long title must not widen the chat page either.
    window.chatPage()->newConversation();
    window.chatPage()->conversations()->setData(
        window.chatPage()->conversations()->index(0),
        QStringLiteral("Tell me a fortune about a very long journey across the sea and back home"),
        Qt::EditRole);
    window.chatPage()->openConversation(window.chatPage()->currentConversation());
    QTest::qWait(50);
    auto* dock = window.findChild<QDockWidget*>(QStringLiteral("liveDock"));
    QVERIFY(dock);
    QVERIFY2(dock->width() >= 260, qPrintable(QString::number(dock->width())));
    for (int page = 0; page < 4; ++page) {
      window.showPage(static_cast<MainWindow::Page>(page));
      for (QScrollArea* area : window.centralWidget()->findChildren<QScrollArea*>()) {
        if (!area->isVisible()) continue;
        QVERIFY2(!area->horizontalScrollBar()->isVisible(),
                 qPrintable(QStringLiteral("page %1 scrolls sideways").arg(page)));
      }
    }
    // Once the model is loaded, the live panel says where it runs and still fits the dock's
    // height: no part of it is scrolled out of sight.
    auto* live = window.findChild<tandem::ui::LivePanel*>();
    QVERIFY(live);
    QTRY_VERIFY_WITH_TIMEOUT(live->placementText().startsWith(QLatin1String("No accelerator")) ||
                                 live->placementText().startsWith(QLatin1String("On the")),
                             30000);
    QTest::qWait(50);
    auto* live_scroll = dock->findChild<QScrollArea*>();
    QVERIFY(live_scroll);
    QVERIFY2(!live_scroll->verticalScrollBar()->isVisible(),
             qPrintable(QStringLiteral("the live panel scrolls: %1 of %2 px shown")
                            .arg(live_scroll->viewport()->height())
                            .arg(live->minimumSizeHint().height())));
    // And after a reply, when the chart and the time split have something to show.
    QSignalSpy finished(window.engine(), &tandem::ui::EngineHost::turnFinished);
    window.showPage(MainWindow::Page::Chat);
    window.chatPage()->newConversation();
    window.chatPage()->composer()->setPlainText(QStringLiteral("Hello"));
    window.chatPage()->send();
    QVERIFY(finished.wait(60000));
    QTest::qWait(600);  // the panel polls four times a second
    QVERIFY2(!live_scroll->verticalScrollBar()->isVisible(),
             qPrintable(QStringLiteral("after a reply the live panel scrolls: %1 of %2 px shown")
                            .arg(live_scroll->viewport()->height())
                            .arg(live->minimumSizeHint().height())));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR"))
      window.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/main-1024.png");
  }

  // Preferences open with Ctrl+, on every desktop, not only where the platform defines a key.
  void preferencesHaveCtrlComma() {
    MainWindow window;
    auto* action = window.findChild<QAction*>(QStringLiteral("preferencesAction"));
    QVERIFY(action);
    QVERIFY(action->shortcuts().contains(QKeySequence(Qt::CTRL | Qt::Key_Comma)));
    QCOMPARE(action->shortcuts().count(QKeySequence(Qt::CTRL | Qt::Key_Comma)), 1);
  }

  // Cancelling the assistant at a first start keeps it from opening at every next start.
  void aCancelledAssistantStaysClosed() {
    QSettings().clear();
    QVERIFY(!tandem::ui::SetupWizard::dismissedBefore());
    MainWindow window;
    window.openSetupAssistant();
    auto* wizard = window.findChild<tandem::ui::SetupWizard*>();
    QVERIFY(wizard);
    wizard->reject();
    QVERIFY(tandem::ui::SetupWizard::dismissedBefore());
    QVERIFY(!tandem::ui::SetupWizard::completedBefore());
    QSettings().clear();
  }

  // Dark mode: asked for, or the desktop's (its palette); every colour from the scheme.
  void darkModeFollowsTheSettingAndTheDesktop() {
    auto* app = qobject_cast<QApplication*>(QCoreApplication::instance());
    tandem::ui::theme::apply(*app, "dark");
    QCOMPARE(tandem::ui::theme::scheme(), tandem::ui::theme::Scheme::Dark);
    QVERIFY(app->palette().color(QPalette::Window).lightness() < 64);
    QVERIFY(app->palette().color(QPalette::WindowText).lightness() > 192);
    QVERIFY(QColor(tandem::ui::theme::colors().surface).lightness() < 64);
    // "system" follows the palette the desktop gave: the dark one set just now.
    tandem::ui::theme::apply(*app, "system");
    QCOMPARE(tandem::ui::theme::scheme(), tandem::ui::theme::Scheme::Dark);
    tandem::ui::theme::apply(*app, "light");
    QCOMPARE(tandem::ui::theme::scheme(), tandem::ui::theme::Scheme::Light);
    QVERIFY(app->palette().color(QPalette::Window).lightness() > 192);
  }

  // A theme chosen in the Preferences shows at once: the palette, and the colours widgets
  // wrote into their own style sheets and charts (the conversation list, the replies, the
  // live chart), without a restart.
  void aNewThemeShowsAtOnce() {
    QSettings().clear();
    auto* app = qobject_cast<QApplication*>(QCoreApplication::instance());
    tandem::ui::theme::apply(*app, "light");
    QTemporaryDir dir;
    MainWindow window(nullptr, dir.path() + "/theme.sqlite");
    const QString light_sidebar = QString::fromLatin1(tandem::ui::theme::colors().sidebar);
    auto* panel = window.findChild<QWidget*>(QStringLiteral("conversationPanel"));
    QVERIFY(panel);
    QVERIFY(panel->styleSheet().contains(light_sidebar));
    auto* view = window.findChild<QChartView*>();
    QVERIFY(view);
    QChart* chart = view->chart();
    QCOMPARE(chart->theme(), QChart::ChartThemeLight);
    tandem::ui::PreferencesDialog preferences(&window);
    QComboBox* theme = nullptr;
    for (QComboBox* box : preferences.findChildren<QComboBox*>())
      if (box->accessibleName() == QLatin1String("Theme")) theme = box;
    QVERIFY(theme);
    theme->setCurrentIndex(theme->findData(QStringLiteral("dark")));
    QVERIFY(preferences.save());
    tandem::ui::theme::apply(*app);  // what the window does after OK
    QCOMPARE(tandem::ui::theme::scheme(), tandem::ui::theme::Scheme::Dark);
    const QString dark_sidebar = QString::fromLatin1(tandem::ui::theme::colors().sidebar);
    QVERIFY(dark_sidebar != light_sidebar);
    QVERIFY2(panel->styleSheet().contains(dark_sidebar), qPrintable(panel->styleSheet()));
    QCOMPARE(chart->theme(), QChart::ChartThemeDark);
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      window.resize(1024, 640);
      window.show();
      QTest::qWait(200);
      window.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/switched-to-dark.png");
    }
    QSettings().clear();
    tandem::ui::theme::apply(*app, "light");
    QVERIFY(panel->styleSheet().contains(light_sidebar));
  }

  // The conversations move to the folder chosen in the Preferences: copied there whole,
  // reopened from there, the list read anew; a folder that cannot be made, or a move while
  // a reply is written, is refused with a sentence and leaves them where they were.
  void conversationsMoveToTheChosenFolder() {
    QSettings().clear();
    QTemporaryDir dir;
    const QString first = dir.path() + "/first";
    MainWindow window(nullptr, first + "/conversations.sqlite");
    window.chatPage()->newConversation();
    tandem::ui::ConversationStore& store = window.conversationStore();
    QCOMPARE(store.conversations().size(), 1);
    const auto field = [](tandem::ui::PreferencesDialog& d) {
      for (QLineEdit* e : d.findChildren<QLineEdit*>())
        if (e->accessibleName() == QLatin1String("Conversations folder")) return e;
      return static_cast<QLineEdit*>(nullptr);
    };
    {
      tandem::ui::PreferencesDialog preferences(&window);
      preferences.setConversationStore(&store, /*replying=*/true);
      QVERIFY(field(preferences));
      QCOMPARE(field(preferences)->text(), first);
      QVERIFY(preferences.save());  // nothing moves: allowed while replying
      field(preferences)->setText(dir.path() + "/second");
      QVERIFY(!preferences.save());
      QVERIFY2(preferences.problemText().contains(QLatin1String("reply is being written")),
               qPrintable(preferences.problemText()));
    }
    {
      QFile blocker(dir.path() + "/a-file");
      QVERIFY(blocker.open(QIODevice::WriteOnly));
      tandem::ui::PreferencesDialog preferences(&window);
      preferences.setConversationStore(&store, false);
      field(preferences)->setText(dir.path() + "/a-file/inside");
      QVERIFY(!preferences.save());
      QVERIFY2(preferences.problemText().contains(QLatin1String("cannot be created")),
               qPrintable(preferences.problemText()));
      QVERIFY(!preferences.conversationsMoved());
      QVERIFY(store.isOpen());
      QCOMPARE(store.conversations().size(), 1);
      QCOMPARE(QFileInfo(store.path()).absolutePath(), first);
    }
    {
      tandem::ui::PreferencesDialog preferences(&window);
      preferences.setConversationStore(&store, false);
      field(preferences)->setText(dir.path() + "/second");
      QVERIFY2(preferences.save(), qPrintable(preferences.problemText()));
      QVERIFY(preferences.conversationsMoved());
    }
    QVERIFY(QFileInfo::exists(dir.path() + "/second/conversations.sqlite"));
    QVERIFY(!QFileInfo::exists(dir.path() + "/second/conversations.sqlite.part"));
    QVERIFY(QFileInfo::exists(first + "/conversations.sqlite"));  // the old copy stays
    QCOMPARE(QFileInfo(store.path()).absolutePath(), dir.path() + "/second");
    QCOMPARE(store.conversations().size(), 1);
    QCOMPARE(tandem::ui::ConversationStore::defaultFolder(), dir.path() + "/second");
    // A folder with conversations of its own: those are opened, not overwritten, and the
    // chat's list shows them once read anew.
    {
      tandem::ui::ConversationStore other(dir.path() + "/third/conversations.sqlite");
      other.createConversation(QStringLiteral("a"));
      other.createConversation(QStringLiteral("b"));
    }
    QVERIFY(store.moveTo(dir.path() + "/third"));
    QCOMPARE(store.conversations().size(), 2);
    window.chatPage()->reloadConversations();
    auto* list = window.chatPage()->findChild<QListView*>();
    QVERIFY(list);
    QCOMPARE(list->model()->rowCount(), 2);
    QSettings().clear();
  }

  // The status bar's switch serves the model the window has loaded (one model in memory)
  // and says where and how much; a port already taken is said in the window.
  void theLocalServerServesTheLoadedModel() {
    QSettings().clear();
    QTemporaryDir dir;
    QSettings().setValue(QStringLiteral("server/port"), 0);  // any free port
    MainWindow window(nullptr, dir.path() + "/server.sqlite");
    window.show();
    auto* engine = window.findChild<tandem::ui::EngineHost*>();
    QVERIFY(engine);
    QTRY_VERIFY_WITH_TIMEOUT(engine->hasModel(), 30000);  // the demo model
    auto* button = window.findChild<QToolButton*>(QStringLiteral("serverSwitch"));
    QVERIFY(button && !button->isChecked());
    QVERIFY(window.serverStatusText().contains(QLatin1String("off")));
    button->click();
    QVERIFY(window.server() && window.server()->isListening());
    QVERIFY(button->isChecked());
    const int port = window.server()->port();
    QVERIFY2(window.serverStatusText().contains(QStringLiteral("127.0.0.1:%1").arg(port)),
             qPrintable(window.serverStatusText()));
    QCOMPARE(window.throughputChart()->sampleCount(), 0);
    auto reply = std::async(std::launch::async, [port] {
      tandem::test::HttpRequest r;
      r.method = "POST";
      r.path = "/v1/chat/completions";
      r.body = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})";
      return tandem::test::http(port, r);
    });
    while (reply.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
      QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
    const tandem::test::HttpResponse a = reply.get();
    QCOMPARE(a.status, 200);
    QCOMPARE(nlohmann::json::parse(a.body)["model"], nlohmann::json("demo-model"));
    QTRY_VERIFY2(window.serverStatusText().contains(QLatin1String("1 request")),
                 qPrintable(window.serverStatusText()));
    // The live chart shows the server's reply as it shows the chat's.
    QTRY_VERIFY(window.throughputChart()->sampleCount() > 0);
    QVERIFY(window.throughputChart()->maxDecodeTokensPerSecond() > 0);
    // The chat goes on beside it, on the same model.
    window.chatPage()->newConversation();
    button->click();
    QVERIFY(!window.server());
    QVERIFY(window.serverStatusText().contains(QLatin1String("off")));

    QTcpServer taken;
    QVERIFY(taken.listen(QHostAddress::LocalHost, 0));
    QSettings().setValue(QStringLiteral("server/port"), taken.serverPort());
    QVERIFY(!window.setServing(true));
    QVERIFY(!button->isChecked());
    auto* problem = window.findChild<QMessageBox*>(QStringLiteral("serverProblem"));
    QVERIFY(problem && problem->isVisible());
    QVERIFY2(problem->text().contains(QLatin1String("another port")), qPrintable(problem->text()));
    problem->close();
    QSettings().clear();
  }

  // Run from an AppImage, the first start offers a menu entry (once); Preferences removes it;
  // Help → About says the version, the build and where Tandem runs from.
  void anAppImageOffersAMenuEntry() {
    QSettings().clear();
    QTemporaryDir dir;
    const QString image = dir.path() + "/Tandem 0.1 \"test\".AppImage";
    {
      QFile f(image);
      QVERIFY(f.open(QIODevice::WriteOnly));
    }
    namespace di = tandem::ui::desktop_integration;
    di::remove();
    qputenv("APPIMAGE", image.toUtf8());
    MainWindow window(nullptr, dir.path() + "/di.sqlite");
    QVERIFY(window.aboutText().contains(QLatin1String("commit")));
    QVERIFY(window.aboutText().contains(QString::fromUtf8(tandem::kTandemVersion)));
    QVERIFY(window.aboutText().contains(QLatin1String("the AppImage")));
    window.offerMenuEntry();
    auto* offer = window.findChild<QMessageBox*>(QStringLiteral("menuEntryOffer"));
    QVERIFY(offer && offer->isVisible());
    QPushButton* add = nullptr;
    for (QAbstractButton* b : offer->buttons())
      if (b->text() == QLatin1String("Add to Menu")) add = qobject_cast<QPushButton*>(b);
    QVERIFY(add);
    add->click();
    QVERIFY(di::installed());
    QFile entry(di::entry_path());
    QVERIFY(entry.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(entry.readAll());
    QVERIFY2(text.contains(
                 QStringLiteral("Exec=\"%1/Tandem 0.1 \\\"test\\\".AppImage\"").arg(dir.path())),
             qPrintable(text));
    QVERIFY(text.contains(QLatin1String("Icon=tandem-appimage")));
    QVERIFY(QFileInfo(di::icon_path()).size() > 100);
    QTRY_VERIFY(!window.findChild<QMessageBox*>(QStringLiteral("menuEntryOffer")));
    window.offerMenuEntry();  // asked once
    QVERIFY(!window.findChild<QMessageBox*>(QStringLiteral("menuEntryOffer")));
    {
      tandem::ui::PreferencesDialog preferences(&window);
      QCheckBox* menu = nullptr;
      for (QCheckBox* c : preferences.findChildren<QCheckBox*>())
        if (c->text().contains(QLatin1String("applications menu"))) menu = c;
      QVERIFY(menu && menu->isEnabled() && menu->isChecked());
      menu->setChecked(false);
      QVERIFY2(preferences.save(), qPrintable(preferences.problemText()));
    }
    QVERIFY(!di::installed());
    QVERIFY(!QFileInfo::exists(di::icon_path()));
    qunsetenv("APPIMAGE");
    tandem::ui::PreferencesDialog plain(&window);
    for (QCheckBox* c : plain.findChildren<QCheckBox*>())
      if (c->text().contains(QLatin1String("applications menu"))) QVERIFY(!c->isEnabled());
    QSettings().clear();
  }

  // Without a desktop keyring the Hub token and the server's key live in files only the user can
  // read, never in the settings file; one an earlier Tandem kept there moves out when first read.
  void secretsAreKeptPrivate() {
    QSettings().clear();
    namespace secrets = tandem::ui::secrets;
    secrets::write(QStringLiteral("hub-token"), {});
    QSettings().setValue(QLatin1String(tandem::ui::DownloadQueue::kTokenKey), "hf_OLDtoken");
    QCOMPARE(tandem::ui::DownloadQueue::hubConfig().token, std::string("hf_OLDtoken"));
    QVERIFY(!QSettings().contains(QLatin1String(tandem::ui::DownloadQueue::kTokenKey)));
    tandem::ui::PreferencesDialog dialog;
    for (QLineEdit* e : dialog.findChildren<QLineEdit*>()) {
      if (e->accessibleName() == QLatin1String("Hugging Face token")) e->setText("hf_NEWtoken");
      if (e->accessibleName() == QLatin1String("Server API key")) e->setText("k3y");
    }
    QVERIFY2(dialog.save(), qPrintable(dialog.problemText()));
    QCOMPARE(tandem::ui::DownloadQueue::hubConfig().token, std::string("hf_NEWtoken"));
    QCOMPARE(MainWindow::serverOptions().api_key, QStringLiteral("k3y"));
    for (const QString& name : {QStringLiteral("hub-token"), QStringLiteral("server-api-key")}) {
      const QFileInfo info(secrets::path(name));
      QVERIFY(info.exists());
      QCOMPARE(info.permissions() & (QFileDevice::ReadGroup | QFileDevice::ReadOther |
                                     QFileDevice::WriteGroup | QFileDevice::WriteOther),
               QFileDevice::Permissions());
      QCOMPARE(QFileInfo(info.absolutePath()).permissions() &
                   (QFileDevice::ReadOther | QFileDevice::ExeOther | QFileDevice::ReadGroup),
               QFileDevice::Permissions());
    }
    QSettings().sync();
    QFile settings(QSettings().fileName());
    if (settings.open(QIODevice::ReadOnly)) {
      const QByteArray text = settings.readAll();
      QVERIFY(!text.contains("hf_NEWtoken") && !text.contains("hf_OLDtoken") &&
              !text.contains("k3y"));
    }
    secrets::write(QStringLiteral("hub-token"), {});
    secrets::write(QStringLiteral("server-api-key"), {});
    QSettings().clear();
  }

  // Preferences are stored and used: new chats start with its sampling, downloads go to its
  // models folder; an address that is not one is refused with a sentence.
  void preferencesAreUsed() {
    QSettings().clear();
    QTemporaryDir dir;
    tandem::ui::PreferencesDialog dialog;
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      dialog.show();
      auto* tabs = dialog.findChild<QTabWidget*>();
      for (int t = 0; tabs && t < tabs->count(); ++t) {
        tabs->setCurrentIndex(t);
        dialog.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") +
                           QStringLiteral("/preferences-%1.png").arg(t));
      }
      if (tabs) tabs->setCurrentIndex(0);
    }
    const auto doubles = dialog.findChildren<QDoubleSpinBox*>();
    QCOMPARE(doubles.size(), 3);
    doubles[0]->setValue(0.3);  // temperature
    const auto edits = dialog.findChildren<QLineEdit*>();
    QLineEdit* models = nullptr;
    QLineEdit* endpoint = nullptr;
    for (QLineEdit* e : edits) {
      if (e->accessibleName() == QLatin1String("Models folder")) models = e;
      if (e->accessibleName() == QLatin1String("Hub address")) endpoint = e;
    }
    QVERIFY(models && endpoint);
    models->setText(dir.path() + "/models");
    endpoint->setText(QStringLiteral("huggingface.co"));
    QVERIFY(!dialog.save());
    QVERIFY2(dialog.problemText().contains(QLatin1String("must start with https://")),
             qPrintable(dialog.problemText()));
    endpoint->setText(QStringLiteral("https://hf-mirror.example"));
    QVERIFY(dialog.save());
    QCOMPARE(tandem::ui::default_settings().temperature, 0.3);
    QCOMPARE(MainWindow::modelsFolder(), dir.path() + "/models");
    QCOMPARE(tandem::ui::DownloadQueue::hubConfig().endpoint,
             std::string("https://hf-mirror.example"));
    MainWindow window(nullptr, dir.path() + "/prefs.sqlite");
    window.chatPage()->newConversation();
    QCOMPARE(window.chatPage()->currentSettings().temperature, 0.3);
    QSettings().clear();
  }

  // Every control a screen reader reaches has a name: its text, its form label, or one set
  // for it (icon buttons, fields without a label), on every page and in the dialogs.
  void everyControlHasAnAccessibleName() {
    QSettings().clear();
    MainWindow window;
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    const auto unnamed = [](QWidget* root) {
      QStringList missing;
      for (QWidget* w : root->findChildren<QWidget*>()) {
        if (!w->isVisibleTo(root)) continue;
        const bool control = qobject_cast<QAbstractButton*>(w) || qobject_cast<QLineEdit*>(w) ||
                             qobject_cast<QPlainTextEdit*>(w) ||
                             qobject_cast<QAbstractSpinBox*>(w) || qobject_cast<QComboBox*>(w) ||
                             qobject_cast<QAbstractItemView*>(w);
        if (!control) continue;
        // Parts of compound widgets (a spin box's line edit, a combo's view) are named by it.
        if (qobject_cast<QAbstractSpinBox*>(w->parentWidget()) ||
            qobject_cast<QComboBox*>(w->parentWidget()) || qobject_cast<QHeaderView*>(w))
          continue;
        QAccessibleInterface* a = QAccessible::queryAccessibleInterface(w);
        if (a == nullptr || a->text(QAccessible::Name).trimmed().isEmpty())
          missing << QStringLiteral("%1 %2").arg(w->metaObject()->className(), w->objectName());
      }
      return missing;
    };
    QStringList missing;
    for (int page = 0; page < 4; ++page) {
      window.showPage(static_cast<MainWindow::Page>(page));
      missing << unnamed(&window);
    }
    tandem::ui::PreferencesDialog preferences(&window);
    preferences.show();
    missing << unnamed(&preferences);
    tandem::ui::ConversionDialog conversion(&window);
    conversion.show();
    missing << unnamed(&conversion);
    window.openSetupAssistant();
    auto* wizard = window.findChild<tandem::ui::SetupWizard*>();
    QVERIFY(wizard);
    for (int page = 0; page < 6 && wizard->currentPage() != nullptr; ++page) {
      missing << unnamed(wizard);
      wizard->next();
    }
    wizard->reject();
    missing.removeDuplicates();
    QVERIFY2(missing.isEmpty(), qPrintable(missing.join(QStringLiteral("\n"))));
    QSettings().clear();
  }

  // The Models page lists what is on this computer with its family, format and size, loads
  // one, and deletes one (not the demo, not the one loaded) off the UI thread.
  void theModelsPageListsLoadsAndDeletes() {
    QSettings().clear();
    QTemporaryDir models;
    QSettings().setValue(QStringLiteral("paths/models"), models.path());
    const QString source = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const auto copy = [&](const QString& to) {
      QDir().mkpath(to);
      for (const QString& f : QDir(source).entryList(QDir::Files))
        QFile::copy(source + "/" + f, to + "/" + f);
    };
    copy(models.path() + "/someone/tiny");
    copy(models.path() + "/someone/tiny-tandem-int8");
    {
      QFile manifest(models.path() + "/someone/tiny-tandem-int8/tandem-manifest.json");
      QVERIFY(manifest.open(QIODevice::WriteOnly));
      manifest.write(R"({"method": "int8"})");
    }
    tandem::ui::ModelsPage page;
    QSignalSpy refreshed(&page, &tandem::ui::ModelsPage::refreshed);
    page.refresh();  // read off the UI thread
    QVERIFY(refreshed.wait(5000));
    QMap<QString, tandem::ui::ModelFolderInfo> rows;
    const QList<tandem::ui::ModelFolderInfo> listed = page.rows();
    for (const auto& r : listed) rows[QFileInfo(r.folder).fileName()] = r;
    QVERIFY(rows.contains(QStringLiteral("tiny")) &&
            rows.contains(QStringLiteral("tiny-tandem-int8")));
    QCOMPARE(rows["tiny"].family, QStringLiteral("Qwen3-MoE"));
    QCOMPARE(rows["tiny"].format, QStringLiteral("F32"));
    QCOMPARE(rows["tiny-tandem-int8"].format, QStringLiteral("converted INT8"));
    QVERIFY(rows["tiny"].bytes > 100000);
    const QList<tandem::ui::ModelFolderInfo> all = page.rows();
    QVERIFY(std::any_of(all.begin(), all.end(), [](const auto& r) { return r.demo; }));
    QSignalSpy load(&page, &tandem::ui::ModelsPage::loadRequested);
    QSignalSpy deleted(&page, &tandem::ui::ModelsPage::deleted);
    // Load: the selected row is asked of the window.
    auto* table = page.findChild<QTreeWidget*>();
    for (int i = 0; i < table->topLevelItemCount(); ++i) {
      if (table->topLevelItem(i)->data(0, Qt::UserRole).toString() == rows["tiny"].folder)
        table->setCurrentItem(table->topLevelItem(i));
    }
    for (QPushButton* b : page.findChildren<QPushButton*>())
      if (b->text() == QLatin1String("Load")) b->click();
    QCOMPARE(load.count(), 1);
    QCOMPARE(load.first().at(0).toString(), rows["tiny"].folder);
    page.setLoaded(rows["tiny"].folder);
    page.deleteFolder(rows["tiny"].folder);  // the one loaded: refused
    QVERIFY(!deleted.wait(300));
    page.deleteFolder(rows["tiny-tandem-int8"].folder);
    QVERIFY(deleted.wait(5000));
    QVERIFY(refreshed.wait(5000));
    QCOMPARE(deleted.first().at(1).toBool(), true);
    QVERIFY(!QFileInfo::exists(rows["tiny-tandem-int8"].folder));
    QVERIFY(QFileInfo::exists(rows["tiny"].folder));
    const QList<tandem::ui::ModelFolderInfo> after = page.rows();
    for (const auto& r : after) QVERIFY(r.folder != rows["tiny-tandem-int8"].folder);
    QSettings().clear();
  }

  // GGUF files in the models folder are listed with what their metadata says, a split set
  // once (by its first part) with all its parts' bytes, and deleting one removes its file.
  void theModelsPageListsGgufFiles() {
    QSettings().clear();
    QTemporaryDir models;
    QSettings().setValue(QStringLiteral("paths/models"), models.path());
    QDir().mkpath(models.path() + "/someone/Tiny-GGUF");
    const QString file = models.path() + "/someone/Tiny-GGUF/tiny-Q8_0.gguf";
    QVERIFY(
        QFile::copy(QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/qwen3moe-q8_0.gguf"), file));
    const QString loose = models.path() + "/llama-mixed.gguf";
    QVERIFY(
        QFile::copy(QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/llama-mixed.gguf"), loose));
    {  // a later part of a set is not a model of its own
      QFile part(models.path() + "/someone/Tiny-GGUF/big-00002-of-00002.gguf");
      QVERIFY(part.open(QIODevice::WriteOnly));
    }
    // A converted copy made beside the file, as the conversion dialog suggests: listed as the
    // converted model it is, its base.gguf not as a model of its own.
    const QString converted = models.path() + "/someone/Tiny-GGUF/tiny-Q8_0-tandem-int8";
    {
      tandem::convert::ConvertOptions o;
      o.input = file.toStdString();
      o.output = converted.toStdString();
      o.threads = 2;
      tandem::convert::Converter(o).run({});
    }
    tandem::ui::ModelsPage page;
    QSignalSpy refreshed(&page, &tandem::ui::ModelsPage::refreshed);
    page.refresh();
    QVERIFY(refreshed.wait(5000));
    QMap<QString, tandem::ui::ModelFolderInfo> rows;
    for (const auto& r : page.rows()) rows[QFileInfo(r.folder).fileName()] = r;
    QVERIFY(rows.contains(QStringLiteral("tiny-Q8_0.gguf")));
    QVERIFY(rows.contains(QStringLiteral("llama-mixed.gguf")));
    QVERIFY(!rows.contains(QStringLiteral("big-00002-of-00002.gguf")));
    QVERIFY(!rows.contains(QStringLiteral("base.gguf")));
    QVERIFY(rows.contains(QStringLiteral("tiny-Q8_0-tandem-int8")));
    QCOMPARE(rows["tiny-Q8_0-tandem-int8"].format, QStringLiteral("converted INT8"));
    QCOMPARE(rows["tiny-Q8_0-tandem-int8"].family, QStringLiteral("Qwen3-MoE"));
    QCOMPARE(rows["tiny-Q8_0.gguf"].family, QStringLiteral("Qwen3-MoE"));
    QCOMPARE(rows["tiny-Q8_0.gguf"].format, QStringLiteral("GGUF Q8_0"));  // by tensor bytes
    QCOMPARE(rows["tiny-Q8_0.gguf"].bytes, QFileInfo(file).size());
    QCOMPARE(rows["llama-mixed.gguf"].family, QStringLiteral("Llama"));
    // With nothing chosen by the user, the page shows the model in use chosen, not the first
    // row, and follows the next one loaded (the demo loads before the model last used).
    {
      tandem::ui::ModelsPage fresh;
      QSignalSpy shown(&fresh, &tandem::ui::ModelsPage::refreshed);
      auto* table = fresh.findChild<QTreeWidget*>();
      const auto current = [&] {
        return table->currentItem() != nullptr
                   ? table->currentItem()->data(0, Qt::UserRole).toString()
                   : QString();
      };
      QString demo;
      for (const auto& r : page.rows())
        if (r.demo) demo = r.folder;
      QVERIFY(!demo.isEmpty());
      fresh.show();
      fresh.setLoaded(demo);
      QVERIFY(shown.wait(5000));
      QCOMPARE(current(), demo);
      fresh.setLoaded(loose);
      QVERIFY(shown.wait(5000));
      QCOMPARE(current(), loose);
      // A row the user chooses stays chosen when another model loads.
      for (int i = 0; i < table->topLevelItemCount(); ++i) {
        if (table->topLevelItem(i)->data(0, Qt::UserRole).toString() == file)
          table->setCurrentItem(table->topLevelItem(i));
      }
      fresh.setLoaded(demo);
      QVERIFY(shown.wait(5000));
      QCOMPARE(current(), file);
    }
    QSignalSpy deleted(&page, &tandem::ui::ModelsPage::deleted);
    page.deleteFolder(file);
    QVERIFY(deleted.wait(5000));
    QCOMPARE(deleted.first().at(1).toBool(), true);
    QVERIFY(!QFileInfo::exists(file));
    QVERIFY(QFileInfo::exists(models.path() + "/someone/Tiny-GGUF"));  // the folder stays
    QSettings().clear();
  }

  void throughputChartFollowsSamples() {
    tandem::ui::ThroughputChart chart;
    chart.setWindowSeconds(10);
    QCOMPARE(chart.sampleCount(), 0);
    for (int t = 0; t < 30; ++t) chart.addSample(t, t < 3 ? 120.0 : -1.0, t >= 3 ? 20.0 + t : -1.0);
    // Samples older than the 10-second window are dropped.
    QCOMPARE(chart.sampleCount(), 11);
    QCOMPARE(chart.maxTokensPerSecond(), 49.0);
    chart.clear();
    QCOMPARE(chart.sampleCount(), 0);
    QCOMPARE(chart.maxTokensPerSecond(), 0.0);
    // Two replies a minute and a half apart: two lines, the idle time closed up to a short
    // gap; prompt and decode each scaled on their own axis.
    chart.setWindowSeconds(60);
    for (int t = 0; t < 5; ++t) chart.addSample(t, t == 0 ? 900.0 : -1.0, 30.0);
    for (int t = 100; t < 105; ++t) chart.addSample(t, -1.0, 40.0);
    QCOMPARE(chart.segmentCount(), 2);
    QCOMPARE(chart.lastX(), 4.0 + 1.0 + 4.0);
    QCOMPARE(chart.maxDecodeTokensPerSecond(), 40.0);
    QCOMPARE(chart.maxPromptTokensPerSecond(), 900.0);
    // Nothing measured is no sample.
    chart.addSample(106, -1.0, -1.0);
    QCOMPARE(chart.sampleCount(), 10);
  }
};

QTEST_MAIN(TestMainWindow)
#include "tst_main_window.moc"
