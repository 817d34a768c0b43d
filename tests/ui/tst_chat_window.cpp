// The chat window end to end on a tiny model: type, send, stream, stop, reopen and find
// the conversation; markdown with code blocks; thinking folded; the UI stays responsive.
#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScopeGuard>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextLayout>
#include <QThread>
#include <QtTest>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/forward/runner_settings.h"
#include "engine/hw/hardware_report.h"
#include "engine/model/demo_model.h"
#include "engine/plan/planned_format.h"
#include "kernels/cpu/isa.h"
#include "ui/chat_page.h"
#include "ui/conversation/list_model.h"
#include "ui/engine_host.h"
#include "ui/main_window.h"
#include "ui/message_widget.h"
#include "ui/preferences_dialog.h"
#include "ui/system_page.h"
#include "ui/theme.h"

using namespace tandem::ui;

namespace {
const QString kModel = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");

void saveScreenshot(QWidget& w, const QString& name) {
  const QString dir = qEnvironmentVariable("TANDEM_SCREENSHOT_DIR");
  if (dir.isEmpty()) return;
  QTest::qWait(300);  // lets the live panel poll the engine once
  w.grab().save(dir + "/" + name + ".png");
}
}  // namespace

class TestChatWindow : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  QString db() const { return dir_.path() + "/conversations.sqlite"; }

 private slots:
  void initTestCase() {
    tandem::ui::theme::apply(*qApp);
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TandemTest"));
    QCoreApplication::setApplicationName(QStringLiteral("TandemChatTest"));
    QSettings().clear();
  }
  void cleanupTestCase() { QSettings().clear(); }

  // A conversations file that is not a database any more: the app starts, says so in the
  // chat, keeps the old file aside byte for byte, and saves into a new one.
  void aDamagedStoreIsKeptAsideAndSaid() {
    const QString path = dir_.path() + "/damaged.sqlite";
    const QByteArray garbage = QByteArray("not a database at all, ") + QByteArray(5000, 'x');
    {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(garbage);
    }
    MainWindow window(nullptr, path);
    ConversationStore& store = window.conversationStore();
    QVERIFY2(store.isOpen(), qPrintable(store.error()));
    QVERIFY2(store.notice().contains(QLatin1String("damaged")), qPrintable(store.notice()));
    const QStringList kept =
        QDir(dir_.path()).entryList({QStringLiteral("damaged.sqlite.damaged-*")}, QDir::Files);
    QCOMPARE(kept.size(), 1);
    QFile old(dir_.path() + "/" + kept.first());
    QVERIFY(old.open(QIODevice::ReadOnly));
    QCOMPARE(old.readAll(), garbage);
    window.show();  // the banner is on the chat, shown once the demo model is in
    QTRY_VERIFY_WITH_TIMEOUT(window.chatPage()->errorText().contains(kept.first()), 30000);
    QVERIFY(store.createConversation(QStringLiteral("after")) > 0);
    QCOMPARE(store.conversations().size(), 1);
  }

  void conversationModel() {
    ConversationStore store(dir_.path() + "/model-test.sqlite");
    QVERIFY2(store.isOpen(), qPrintable(store.error()));
    ConversationListModel model(store);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(model.rowCount(), 0);
    const QModelIndex a = model.create(QStringLiteral("First"));
    model.create(QStringLiteral("Second"));
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0).data().toString(), QStringLiteral("Second"));  // newest first
    QVERIFY(model.setData(model.index(1), QStringLiteral("Renamed"), Qt::EditRole));
    QVERIFY(!model.setData(model.index(1), QStringLiteral("   "), Qt::EditRole));
    const qint64 first = model.idAt(1);
    QVERIFY(store.setMessages(first, {{"user", "hi", {}}, {"assistant", "hello", "thought"}}));
    model.touch(first);
    QCOMPARE(model.idAt(0), first);
    QCOMPARE(store.messages(first).size(), 2);
    QCOMPARE(store.messages(first)[1].thinking, QStringLiteral("thought"));
    QVERIFY(model.remove(1));
    QCOMPARE(model.rowCount(), 1);
    QVERIFY(store.messages(model.idAt(1)).isEmpty());
    QSortFilterProxyModel filter;
    filter.setSourceModel(&model);
    filter.setFilterCaseSensitivity(Qt::CaseInsensitive);
    filter.setFilterFixedString(QStringLiteral("renam"));
    QCOMPARE(filter.rowCount(), 1);
    filter.setFilterFixedString(QStringLiteral("nothing"));
    QCOMPARE(filter.rowCount(), 0);
    Q_UNUSED(a);
  }

  // Code blocks are coloured by their language: keywords, strings and comments.
  void codeBlocksAreHighlighted() {
    tandem::ui::CodeBlockWidget block;
    block.setCode(QStringLiteral("python"), QStringLiteral("def f():\n    return 'x'  # note"));
    auto* text = block.findChild<QPlainTextEdit*>();
    QVERIFY(text);
    const auto formats_at = [&](int line, int column) {
      const QTextBlock b = text->document()->findBlockByNumber(line);
      for (const QTextLayout::FormatRange& r : b.layout()->formats())
        if (column >= r.start && column < r.start + r.length) return r.format;
      return QTextCharFormat();
    };
    const QColor keyword = formats_at(0, 1).foreground().color();
    const QColor string = formats_at(1, 12).foreground().color();
    const QColor comment = formats_at(1, 16).foreground().color();
    QVERIFY(formats_at(0, 1).fontWeight() > QFont::Normal);  // "def"
    QVERIFY(keyword != string && string != comment && keyword != comment);
    QVERIFY(formats_at(1, 16).fontItalic());
    QCOMPARE(formats_at(0, 4).foreground().style(), Qt::NoBrush);  // "f": plain
    // A language it does not know: strings and comments still, no keywords.
    block.setCode(QStringLiteral("brainfart"), QStringLiteral("def x = \"y\""));
    QCOMPARE(formats_at(0, 1).foreground().style(), Qt::NoBrush);
    QVERIFY(formats_at(0, 9).foreground().style() != Qt::NoBrush);
  }

  void codeBlocksAreSplitOut() {
    const auto segments = split_code_blocks(
        QStringLiteral("Intro\n```python\nprint('hi')\nx = 1\n```\nAfter\n```\nopen"));
    QCOMPARE(segments.size(), 4);
    QVERIFY(!segments[0].code);
    QCOMPARE(segments[1].language, QStringLiteral("python"));
    QCOMPARE(segments[1].text, QStringLiteral("print('hi')\nx = 1"));
    QCOMPARE(segments[2].text, QStringLiteral("After"));
    QVERIFY(segments[3].code);  // still streaming: the fence is not closed yet
    QCOMPARE(segments[3].text, QStringLiteral("open"));
  }

  void roundTrip() {
    {
      MainWindow window(nullptr, db());
      window.resize(1280, 800);
      window.show();
      window.loadModel(kModel);
      QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
      ChatPage* chat = window.chatPage();
      // Short replies, so that the second turn fits this test's small context.
      chat->findChild<QSpinBox*>(QStringLiteral("maxTokens"))->setValue(24);
      QTest::keyClicks(chat->composer(), QStringLiteral("Hello there"));
      QSignalSpy deltas(window.engine(), &EngineHost::turnDelta);
      QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
      QTest::keyClick(chat->composer(), Qt::Key_Return);
      QVERIFY(chat->composer()->toPlainText().isEmpty());
      QVERIFY(finished.wait(20000));
      QVERIFY(deltas.count() > 0);
      QCOMPARE(chat->messages().size(), 2);
      QCOMPARE(chat->messages()[0].content, QStringLiteral("Hello there"));
      QCOMPARE(chat->messageCount(), 2);
      auto* regenerate = chat->messageAt(1)->findChild<QWidget*>(QStringLiteral("regenerate"));
      QVERIFY(regenerate);
      QTRY_VERIFY(regenerate->isVisible());  // new widgets in a layout are shown by a queued call
      QVERIFY(window.statusSummary().contains(QLatin1String("tokens/s")));
      QVERIFY(window.statusSummary().contains(QLatin1String("context ")));
      QCOMPARE(chat->conversations()->rowCount(), 1);
      QCOMPARE(chat->conversations()->index(0).data().toString(), QStringLiteral("Hello there"));
      QCOMPARE(chat->messages()[1].model, QStringLiteral("qwen3-moe"));  // who wrote it
      // Each reply says how long it is, and how fast it came.
      QVERIFY(chat->messages()[1].tokens > 0);
      QTRY_VERIFY(chat->messageAt(1)->statsText().contains(QLatin1String("token")));
      saveScreenshot(window, QStringLiteral("chat-round-trip"));
      window.close();
    }
    MainWindow reopened(nullptr, db());
    reopened.show();
    ChatPage* chat = reopened.chatPage();
    QCOMPARE(chat->conversations()->rowCount(), 1);
    QCOMPARE(chat->messages().size(), 2);
    QCOMPARE(chat->messages()[0].content, QStringLiteral("Hello there"));
    QCOMPARE(chat->messages()[1].model, QStringLiteral("qwen3-moe"));  // kept with the reply
    QVERIFY(chat->messages()[1].tokens > 0);
    // The model is loaded again by itself, and the conversation goes on.
    QTRY_VERIFY_WITH_TIMEOUT(reopened.engine()->hasModel(), 20000);
    QSignalSpy finished(reopened.engine(), &EngineHost::turnFinished);
    QTest::keyClicks(chat->composer(), QStringLiteral("More"));
    QTest::mouseClick(chat->sendButton(), Qt::LeftButton);
    QVERIFY(finished.wait(20000));
    QVERIFY2(chat->errorText().isEmpty(), qPrintable(chat->errorText()));
    QCOMPARE(chat->messages().size(), 4);
  }

  // A Hugging Face folder opened with nothing to give its CPU format (no profile, no choice of
  // the assistant's, none on the command line) runs in the plan's format for this computer,
  // not as stored, and the status bar's tooltip says so and why.
  void aFolderNothingFormatsRunsInThePlansFormat() {
    const auto planned =
        tandem::plan::planned_cpu_format(tandem::hw::probe_hardware({}), kModel.toStdString());
    QVERIFY(planned);
    QVERIFY(planned->format != tandem::model::CpuFormat::Native);
    MainWindow window(nullptr, dir_.path() + "/planned.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    const ModelInfo& info = window.engine()->model();
    QCOMPARE(info.cpu_format,
             QString::fromUtf8(tandem::model::cpu_format_name(planned->format).data()));
    QCOMPARE(info.planned_format_reason, QString::fromStdString(planned->reason));
    QString tips;
    for (QLabel* l : window.statusBar()->findChildren<QLabel*>()) tips += l->toolTip() + "\n";
    QVERIFY2(tips.contains(QStringLiteral("Weights packed in %1, the plan's choice for this "
                                          "computer (%2)")
                               .arg(info.cpu_format, info.planned_format_reason)),
             qPrintable(tips));
  }

  // Where the plan finds no format that fits (here a computer of 1 GiB), the weights stay as
  // stored rather than be packed into memory that is not there, and the status bar says so.
  void aFolderTooLargeToPackStaysAsStored() {
    auto small = std::make_shared<tandem::hw::HardwareReport>(tandem::hw::probe_hardware({}));
    small->gpus.devices.clear();
    small->memory.total_bytes = small->memory.available_bytes = 1ull << 30;
    MainWindow window(nullptr, dir_.path() + "/too-large.sqlite");
    window.show();
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);  // the last session's model
    QTRY_VERIFY(!window.engine()->isLoading());
    LoadRequest request;
    request.folder = kModel;
    request.plan_cpu_format = true;
    request.hardware = small;
    QSignalSpy loaded(window.engine(), &EngineHost::modelLoaded);
    window.engine()->loadModel(request);
    QVERIFY(loaded.wait(20000));
    const ModelInfo& info = window.engine()->model();
    QCOMPARE(info.cpu_format, QStringLiteral("native"));
    QVERIFY(!info.planned_format_fits);
    QVERIFY2(info.planned_format_reason.contains(QLatin1String("needs")),
             qPrintable(info.planned_format_reason));
    QString status, tips;
    for (QLabel* l : window.statusBar()->findChildren<QLabel*>())
      status += l->text() + "\n", tips += l->toolTip() + "\n";
    QVERIFY2(status.contains(QLatin1String("weights as stored: too large to pack here")),
             qPrintable(status));
    QVERIFY2(tips.contains(QLatin1String("Weights left as stored, the slowest to compute: the "
                                         "model needs")),
             qPrintable(tips));
    // Said in the chat too, where the status bar's text is cut at 1024 pixels.
    const QString said = window.chatPage()->errorText();
    QVERIFY2(said.contains(QLatin1String("qwen3-moe stays as stored, the slowest way to run it: "
                                         "it needs")),
             qPrintable(said));
    for (const QSize size : {QSize(1024, 640), QSize(1600, 1000)}) {
      window.resize(size);
      saveScreenshot(
          window, QStringLiteral("too-large-to-pack-%1x%2").arg(size.width()).arg(size.height()));
    }
  }

  // The profile `tandem recommend --save` writes is what the window runs a model with; the
  // command line's flags come after it. A broken one is said in the window, and nothing loads.
  void runsWithTheSavedProfile() {
    const QString profile = MainWindow::profileFor(kModel);
    QVERIFY(QDir().mkpath(QFileInfo(profile).path()));
    const auto remove = qScopeGuard([&] { QFile::remove(profile); });
    const auto write = [&](const QByteArray& parameters) {
      QFile f(profile);
      QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
      f.write("{\"verdict\": \"fits\", \"parameters\": [" + parameters + "]}");
    };
    write(R"({"name": "accelerator", "value": "emulated", "reason": ""},
             {"name": "num-gpu-experts", "value": "2", "reason": ""},
             {"name": "expert-placement-strategy", "value": "random", "reason": ""},
             {"name": "max-deferred-experts-per-token", "value": "1", "reason": ""})");
    {
      MainWindow window(nullptr, dir_.path() + "/profile.sqlite");
      window.show();
      window.loadModel(kModel);
      QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
      const ModelInfo& info = window.engine()->model();
      QVERIFY2(info.accelerator.contains(QLatin1String("emulated")), qPrintable(info.accelerator));
      QCOMPARE(info.gpu_experts_per_layer, 2);
      QCOMPARE(info.placement_strategy, QStringLiteral("random"));
      QCOMPARE(info.deferred_per_token, 1);
      QCOMPARE(info.profile, profile);
      QVERIFY(window.statusSummary().contains(QLatin1String("Accelerator: emulated")));
      QVERIFY(window.systemPage()->findingsText().contains(QLatin1String("emulated accelerator")));
    }
    {
      // The command line (here: what main.cpp passes for --num-gpu-experts 1) wins.
      MainWindow window(nullptr, dir_.path() + "/profile2.sqlite",
                        [](tandem::forward::RunSettings& s, std::string&) {
                          s.hybrid.gpu_experts_per_layer = 1;
                          return true;
                        });
      window.show();
      window.loadModel(kModel);
      QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
      QCOMPARE(window.engine()->model().gpu_experts_per_layer, 1);
    }
    write(R"({"name": "num-gpu-experts", "value": "lots", "reason": ""})");
    {
      MainWindow window(nullptr, dir_.path() + "/profile3.sqlite");
      window.show();
      window.loadModel(kModel);
      QTRY_VERIFY_WITH_TIMEOUT(
          window.chatPage()->noModelText().contains(QLatin1String("num-gpu-experts")), 5000);
      QVERIFY(!window.engine()->hasModel());
    }
  }

  // The System page names the CPU kernels the loaded model runs on, and on AMX where its INT8
  // products are widened to BF16 tiles (here given, as --amx-widen-from 40 gives it).
  void theSystemPageNamesTheKernelsInUse() {
    MainWindow window(nullptr, dir_.path() + "/kernels.sqlite",
                      [](tandem::forward::RunSettings& s, std::string&) {
                        s.load.cpu_format = tandem::model::CpuFormat::Int8;
                        s.amx_widen_from = 40;
                        return true;
                      });
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    const ModelInfo& info = window.engine()->model();
    QCOMPARE(info.cpu_format, QStringLiteral("int8"));
    QTRY_VERIFY_WITH_TIMEOUT(window.systemPage()->report(), 20000);  // the probe's card
    const QString text = window.systemPage()->findingsText();
    QVERIFY(text.contains(QLatin1String("Kernels")));
    QVERIFY2(
        text.contains(info.cpu_kernels + QStringLiteral(" (the model's weights packed in int8)")),
        qPrintable(text));
    if (tandem::kernels::active_variant() == tandem::kernels::CpuVariant::Amx) {
      QCOMPARE(info.cpu_kernels, QStringLiteral("AMX tiles, AVX-512 beside them"));
      QCOMPARE(info.widening, QStringLiteral("INT8 and INT4 products of 40 tokens or more widened "
                                             "to BF16 tiles (set by --amx-widen-from)"));
      QVERIFY(text.contains(QLatin1String("Widening")));
      QVERIFY2(text.contains(info.widening), qPrintable(text));
      QVERIFY(info.widening_detail.isEmpty());  // given, so nothing was measured
      QVERIFY(info.widens);
      QVERIFY(text.contains(QLatin1String("Products of fewer tokens multiply quantised")));
    } else {
      QVERIFY(!info.cpu_kernels.contains(QLatin1String("AMX")));
      QVERIFY(info.widening.isEmpty());
      QVERIFY2(!text.contains(QLatin1String("Widening")), qPrintable(text));
    }
    window.showPage(MainWindow::Page::System);
    saveScreenshot(window, QStringLiteral("system-kernels"));

    // Weights as the files store them go through none of the packed kernels, and it says so.
    MainWindow stored(nullptr, dir_.path() + "/kernels-native.sqlite",
                      [](tandem::forward::RunSettings& s, std::string&) {
                        s.load.cpu_format = tandem::model::CpuFormat::Native;
                        s.load.cpu_format_asked = true;  // named, as --kt-method names one
                        return true;
                      });
    stored.show();
    stored.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(stored.engine()->hasModel(), 20000);
    QTRY_VERIFY_WITH_TIMEOUT(stored.systemPage()->report(), 20000);
    QCOMPARE(stored.engine()->model().cpu_format, QStringLiteral("native"));
    const QString native = stored.systemPage()->findingsText();
    QVERIFY2(native.contains(QStringLiteral(
                 "none packed: the model computes on its weights as its files store them")),
             qPrintable(native));
    QVERIFY(!native.contains(QLatin1String("Widening")));  // nothing packed, nothing widened

    // Widening turned off: the line says so, and no note speaks of products of fewer tokens.
    if (tandem::kernels::active_variant() != tandem::kernels::CpuVariant::Amx) return;
    MainWindow never(nullptr, dir_.path() + "/kernels-never.sqlite",
                     [](tandem::forward::RunSettings& s, std::string&) {
                       s.load.cpu_format = tandem::model::CpuFormat::Int8;
                       s.amx_widen_from = 0;
                       return true;
                     });
    never.show();
    never.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(never.engine()->hasModel(), 20000);
    QTRY_VERIFY_WITH_TIMEOUT(never.systemPage()->report(), 20000);
    QVERIFY(!never.engine()->model().widens);
    const QString off = never.systemPage()->findingsText();
    QVERIFY2(off.contains(QLatin1String("products never widened to BF16 tiles")), qPrintable(off));
    QVERIFY2(!off.contains(QLatin1String("Products of fewer tokens")), qPrintable(off));
    never.showPage(MainWindow::Page::System);
    saveScreenshot(never, QStringLiteral("system-kernels-never"));
  }

  // A folder that fails its checks leaves the model in use loaded, and the window says why;
  // one that fails while loading its weights (after the model in use is gone) says why and
  // offers to load the model that worked again.
  void aFailedLoadSaysWhyAndKeepsOrOffersTheModel() {
    const auto copy = [&](const QString& name, const std::function<void(nlohmann::json&)>& edit) {
      const QString to = dir_.path() + "/" + name;
      QDir().mkpath(to);
      for (const QString& f : QDir(kModel).entryList(QDir::Files)) {
        QFile::remove(to + "/" + f);
        QFile::copy(kModel + "/" + f, to + "/" + f);
      }
      QFile c(to + "/config.json");
      QVERIFY(c.open(QIODevice::ReadOnly));
      nlohmann::json config = nlohmann::json::parse(c.readAll().toStdString());
      c.close();
      edit(config);
      QFile::remove(to + "/config.json");
      QVERIFY(c.open(QIODevice::WriteOnly));
      c.write(QByteArray::fromStdString(config.dump(2)));
    };
    copy("bad-config", [](nlohmann::json& c) { c["architectures"] = {"BertForMaskedLM"}; });
    copy("bad-weights", [](nlohmann::json& c) {
      c["moe_intermediate_size"] = c["moe_intermediate_size"].get<int>() + 8;
    });
    MainWindow window(nullptr, dir_.path() + "/failed-load.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    ChatPage* chat = window.chatPage();
    const QString name = window.engine()->model().name;
    QSignalSpy failed(window.engine(), &EngineHost::modelLoadFailed);

    window.loadModel(dir_.path() + "/bad-config");
    QVERIFY(failed.wait(20000));
    QVERIFY(window.engine()->hasModel());
    QCOMPARE(window.engine()->model().name, name);
    QVERIFY2(chat->errorText().contains(QLatin1String("could not load bad-config, so ")) &&
                 chat->errorText().contains(QLatin1String("BertForMaskedLM is not supported")),
             qPrintable(chat->errorText()));
    QVERIFY(chat->sendButton()->isEnabled());

    window.loadModel(dir_.path() + "/bad-weights");
    QVERIFY(failed.wait(20000));
    QVERIFY(!window.engine()->hasModel());
    QVERIFY(!window.systemPage()->findingsText().contains(QLatin1String("Kernels")));
    QVERIFY2(chat->noModelText().contains(QLatin1String("bad-weights")),
             qPrintable(chat->noModelText()));
    QPushButton* again = nullptr;
    for (QPushButton* b : chat->findChildren<QPushButton*>(QStringLiteral("loadAgain")))
      if (b->isVisibleTo(chat)) again = b;
    QVERIFY(again != nullptr);
    QCOMPARE(again->text(), QStringLiteral("Load %1 Again").arg(name));
    saveScreenshot(window, QStringLiteral("load-failed"));
    QTest::mouseClick(again, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    QCOMPARE(window.engine()->model().name, name);
    QVERIFY(!again->isVisibleTo(chat));
  }

  // Preferences says, as the number is chosen, that more threads than the CPU runs at once
  // take turns; the plan's own count and any count within the CPU's say nothing.
  void preferencesSayWhenThreadsOutnumberTheCpus() {
    PreferencesDialog preferences;
    auto* threads = preferences.findChild<QSpinBox*>(QStringLiteral("threads"));
    auto* note = preferences.findChild<QLabel*>(QStringLiteral("threadsNote"));
    QVERIFY(threads && note);
    QVERIFY(note->isHidden());
    const int hardware = QThread::idealThreadCount();
    threads->setValue(hardware + 1);
    QVERIFY(!note->isHidden());
    QVERIFY2(note->text().contains(QString::number(hardware) + " threads at once"),
             qPrintable(note->text()));
    threads->setValue(hardware);
    QVERIFY(note->isHidden());
    threads->setValue(0);
    QVERIFY(note->isHidden());
  }

  // Preferences' "KV cache" reaches the engine: 8-bit loads the test model; a model
  // whose heads (24 wide) 8 bits do not take is refused in the chat with what to choose
  // instead; a value Tandem does not know is refused before anything loads.
  void kvCachePreferenceReachesTheEngine() {
    {
      PreferencesDialog preferences;
      auto* kv = preferences.findChild<QComboBox*>(QStringLiteral("kvCache"));
      QVERIFY(kv);
      QCOMPARE(kv->currentData().toString(), QStringLiteral("plan"));  // the default
      kv->setCurrentIndex(kv->findData(QStringLiteral("int8")));
      QVERIFY(preferences.save());
    }
    QCOMPARE(QSettings().value(QStringLiteral("engine/kvCache")).toString(),
             QStringLiteral("int8"));
    {
      PreferencesDialog again;
      QCOMPARE(again.findChild<QComboBox*>(QStringLiteral("kvCache"))->currentData().toString(),
               QStringLiteral("int8"));
    }
    MainWindow window(nullptr, dir_.path() + "/kv-cache.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    QSignalSpy failed(window.engine(), &EngineHost::modelLoadFailed);
    window.loadModel(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/llama"));
    QVERIFY(failed.wait(20000));
    // Refused where the runner is built, after the model in use was unloaded (as a folder
    // whose weights fail): the chat says why and offers the model before it again.
    ChatPage* chat = window.chatPage();
    QVERIFY(!window.engine()->hasModel());
    QVERIFY2(chat->noModelText().contains(QLatin1String("24 wide")) &&
                 chat->noModelText().contains(QLatin1String("KV cache in Preferences")),
             qPrintable(chat->noModelText()));
    QSettings().setValue(QStringLiteral("engine/kvCache"), QStringLiteral("q8"));
    window.loadModel(kModel);
    QVERIFY2(chat->noModelText().contains(QLatin1String("(\"q8\") is not one Tandem knows")),
             qPrintable(chat->noModelText()));
    QVERIFY(!window.engine()->isLoading());
    // Left to the plan: the model's profile says which (here 8 bits, which the 24-wide heads
    // refuse); without one, BF16 (the model loads).
    QSettings().remove(QStringLiteral("engine/kvCache"));
    const QString llama = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/llama");
    const QString profile = MainWindow::profileFor(llama);
    QVERIFY(QDir().mkpath(QFileInfo(profile).path()));
    {
      QFile f(profile);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(R"({"parameters": [{"name": "kv-cache", "value": "int8", "reason": ""}]})");
    }
    QSignalSpy failed_again(window.engine(), &EngineHost::modelLoadFailed);
    window.loadModel(llama);
    QVERIFY(failed_again.wait(20000));
    QVERIFY2(chat->noModelText().contains(QLatin1String("24 wide")),
             qPrintable(chat->noModelText()));
    QVERIFY(QFile::remove(profile));
    window.loadModel(llama);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel() && !window.engine()->isLoading(), 20000);
  }

  // A context past the positions the model takes (the test model's 256), as an older setup
  // may have saved, is refused in the chat with how far it goes and where to change it; the
  // demo model before it is offered again under the name the model picker gives it.
  void contextPastTheModelsPositionsIsRefusedInTheChat() {
    MainWindow window(nullptr, dir_.path() + "/positions.sqlite");
    window.show();
    const QString demo = QString::fromStdString(tandem::model::demo_model_folder());
    window.loadModel(demo);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel() && !window.engine()->isLoading(), 20000);
    QSignalSpy failed(window.engine(), &EngineHost::modelLoadFailed);
    window.loadModel(kModel, 0, 8192);
    QVERIFY(failed.wait(20000));
    QVERIFY(!window.engine()->hasModel());
    const QString text = window.chatPage()->noModelText();
    QVERIFY2(text.contains(QLatin1String("longer than the 256 positions")) &&
                 text.contains(QLatin1String("Setup Assistant")),
             qPrintable(text));
    QPushButton* again = nullptr;
    for (QPushButton* b :
         window.chatPage()->findChildren<QPushButton*>(QStringLiteral("loadAgain")))
      if (b->isVisibleTo(window.chatPage())) again = b;
    QVERIFY(again != nullptr);
    QCOMPARE(again->text(), QStringLiteral("Load the Demo Model Again"));
    // With it, the page still fits a window on a 1024-pixel screen (three buttons in a row
    // made it 1044 wide).
    QVERIFY2(window.minimumSizeHint().width() <= 1024,
             qPrintable(QString::number(window.minimumSizeHint().width())));
    window.loadModel(kModel, 0, 256);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel() && !window.engine()->isLoading(), 20000);
  }

  // A load reports its stages to the window: the chat's notice and the status bar read
  // "Loading NAME: packing the weights, N%" while it packs, then name the embedding table.
  void loadingShowsProgress() {
    MainWindow window(nullptr, dir_.path() + "/progress.sqlite");
    window.show();
    QSignalSpy progress(window.engine(), &EngineHost::loadProgress);
    QStringList statuses;
    connect(window.engine(), &EngineHost::loadProgress, &window,
            [&] { statuses << window.chatPage()->loadStatus(); });
    window.loadModel(kModel, 0, 0, QStringLiteral("int8"));
    QTRY_COMPARE_WITH_TIMEOUT(window.engine()->model().name, QStringLiteral("qwen3-moe"), 20000);
    QTRY_VERIFY(!window.engine()->isLoading());
    QVERIFY(progress.count() >= 3);
    // Packing, to its last matrix, then the embedding table read into memory.
    qsizetype packed = -1;
    for (qsizetype i = 0; i < progress.count(); ++i)
      if (progress.at(i).at(1).toString() == QLatin1String("packing the weights")) packed = i;
    QVERIFY(packed >= 0);
    QCOMPARE(progress.at(packed).at(2).toLongLong(), progress.at(packed).at(3).toLongLong());
    QVERIFY2(
        statuses.at(packed).startsWith(QLatin1String("Loading qwen3-moe: packing the weights, ")),
        qPrintable(statuses.join(QLatin1Char('\n'))));
    QCOMPARE(progress.last().at(1).toString(), QStringLiteral("reading the embedding table"));
    QCOMPARE(progress.last().at(2).toLongLong(), progress.last().at(3).toLongLong());
    QVERIFY2(statuses.last().startsWith(
                 QLatin1String("Loading qwen3-moe: reading the embedding table, ")),
             qPrintable(statuses.join(QLatin1Char('\n'))));
    QVERIFY(window.chatPage()->loadStatus().isEmpty());  // loaded: nothing to report
  }

  // The model picker lists the loaded model, the demo and what the models folder holds, and
  // choosing one loads it (and it is remembered as recent).
  void thePickerLoadsAnotherModel() {
    QTemporaryDir models;
    QSettings().setValue(QStringLiteral("paths/models"), models.path());
    const QString copy = models.path() + "/someone/tiny-moe";
    QDir().mkpath(copy);
    for (const QString& f : QDir(kModel).entryList(QDir::Files))
      QFile::copy(kModel + "/" + f, copy + "/" + f);
    MainWindow window(nullptr, dir_.path() + "/picker.sqlite");
    window.show();
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel() && !window.engine()->isLoading(), 20000);
    auto* picker = window.chatPage()->findChild<QComboBox*>(QStringLiteral("modelPicker"));
    QVERIFY(picker);
    QStringList names;
    for (int i = 0; i < picker->count(); ++i) names << picker->itemText(i);
    QVERIFY2(names.contains(QStringLiteral("tiny-moe")) &&
                 names.contains(QStringLiteral("Open a Model Folder…")),
             qPrintable(names.join(QStringLiteral(", "))));
    QCOMPARE(picker->currentData().toString(), window.engine()->model().folder);
    // A reply's rate and context in the status bar, then another model: they were this one's.
    QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
    window.chatPage()->newConversation();
    window.chatPage()->composer()->setPlainText(QStringLiteral("Hi"));
    window.chatPage()->send();
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 20000);
    QTRY_VERIFY(window.statusSummary().contains(QLatin1String("tokens/s")));
    QVERIFY(
        window.statusSummary().contains(QRegularExpression(QStringLiteral("context \\d+ / \\d+"))));
    const int tiny = picker->findData(copy);
    QVERIFY(tiny >= 0);
    picker->setCurrentIndex(tiny);
    emit picker->activated(tiny);
    QTRY_COMPARE_WITH_TIMEOUT(window.engine()->model().folder, copy, 20000);
    QTRY_COMPARE(picker->currentData().toString(), copy);
    static const QRegularExpression gauge(QStringLiteral("context \\d+ / \\d+"));
    QVERIFY2(!window.statusSummary().contains(QLatin1String("tokens/s")) &&
                 !window.statusSummary().contains(gauge),
             qPrintable(window.statusSummary()));
    QCOMPARE(QSettings().value(QStringLiteral("model/recent")).toStringList().value(0), copy);
    QSettings().remove(QStringLiteral("paths/models"));
    QSettings().remove(QStringLiteral("model/recent"));
  }

  void stopAndStayResponsive() {
    MainWindow window(nullptr, dir_.path() + "/stop.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    ChatPage* chat = window.chatPage();
    chat->newConversation();
    // Long replies so there is time to stop one.
    QSettings settings;
    QSignalSpy deltas(window.engine(), &EngineHost::turnDelta);
    QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
    chat->composer()->setPlainText(QStringLiteral("Tell me a long story"));

    // Measure the event loop while the model writes: a 5 ms timer must keep ticking.
    QElapsedTimer clock;
    qint64 last = 0, worst = 0;
    QTimer tick;
    tick.setInterval(5);
    QObject::connect(&tick, &QTimer::timeout, [&] {
      const qint64 now = clock.elapsed();
      worst = std::max(worst, now - last);
      last = now;
    });
    clock.start();
    tick.start();
    chat->send();
    QVERIFY(chat->stopButton()->isEnabled());
    QTRY_VERIFY_WITH_TIMEOUT(deltas.count() >= 2 || finished.count() == 1, 20000);
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      window.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/chat-streaming.png");
      last = clock.elapsed();  // the screenshot itself is not the engine's doing
    }
    QElapsedTimer stopping;
    stopping.start();
    QTest::mouseClick(chat->stopButton(), Qt::LeftButton);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 5000);
    QVERIFY(stopping.elapsed() < 1000);
    tick.stop();
    // Waiting on the engine would stall it for the reply or the stop; the scheduler of a
    // loaded two-core machine alone has stalled it for 68 ms.
    QVERIFY2(worst < 200,
             qPrintable(QStringLiteral("the event loop stalled for %1 ms").arg(worst)));
    QVERIFY(!chat->stopButton()->isEnabled());
    QVERIFY(chat->sendButton()->isEnabled());
    QCOMPARE(chat->messages().size(), 2);  // the partial reply is kept, marked if stopped
    const bool stopped = finished.at(0).at(0).value<TurnOutcome>().stopped;
    QCOMPARE(chat->messages()[1].stopped, stopped);
    QTRY_COMPARE(chat->messageAt(1)->stopped(), stopped);
    QCOMPARE(ConversationStore(dir_.path() + "/stop.sqlite")
                 .messages(chat->currentConversation())[1]
                 .stopped,
             stopped);
  }

  // Escape stops a reply; stopped before the first word, nothing is saved and the message
  // goes back into the box. A disabled button looks disabled.
  void escapeAndAStopBeforeAnyWord() {
    MainWindow window(nullptr, dir_.path() + "/escape.sqlite");
    window.show();
    QVERIFY(!window.chatPage()->sendButton()->isEnabled());
    const QImage disabled = window.chatPage()->sendButton()->grab().toImage();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    ChatPage* chat = window.chatPage();
    QVERIFY(chat->sendButton()->isEnabled());
    QVERIFY(chat->sendButton()->grab().toImage() != disabled);
    chat->newConversation();
    QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
    chat->composer()->setPlainText(QStringLiteral("Tell me a long story"));
    chat->send();
    QTest::keyClick(chat->composer(), Qt::Key_Escape);  // at once: before any token
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 5000);
    QTRY_VERIFY(!chat->stopButton()->isEnabled());
    // The stop reaches the turn whether it had started or was still queued.
    QVERIFY(finished.at(0).at(0).value<TurnOutcome>().stopped);
    if (chat->messages().isEmpty()) {
      QCOMPARE(chat->composer()->toPlainText(), QStringLiteral("Tell me a long story"));
      QVERIFY2(chat->errorText().contains(QLatin1String("Stopped before the model wrote")),
               qPrintable(chat->errorText()));
      QVERIFY(ConversationStore(dir_.path() + "/escape.sqlite")
                  .messages(chat->currentConversation())
                  .isEmpty());
    } else {
      // A token came out before the key: it is kept and marked.
      QCOMPARE(chat->messages().size(), 2);
      QVERIFY(chat->messages()[1].stopped);
      QVERIFY(!chat->messages()[1].content.isEmpty());
    }
  }

  void markdownCodeAndThinking() {
    const QString path = dir_.path() + "/render.sqlite";
    {
      ConversationStore store(path);
      const qint64 id = store.createConversation(QStringLiteral("Sorting in Python"));
      store.setMessages(
          id, {{"user", "How do I sort a list in Python?", {}},
               {"assistant",
                "Use **`sorted()`** for a new list, or `list.sort()` in place:\n\n"
                "```python\nnumbers = [3, 1, 2]\nprint(sorted(numbers))  # [1, 2, 3]\n```\n\n"
                "- `reverse=True` sorts descending\n- `key=len` sorts by length",
                "The user wants the basics; show both forms."}});
    }
    MainWindow window(nullptr, path);
    window.resize(1280, 800);
    window.show();
    ChatPage* chat = window.chatPage();
    QCOMPARE(chat->messageCount(), 2);
    MessageWidget* reply = chat->messageAt(1);
    const auto blocks = reply->findChildren<CodeBlockWidget*>();
    QCOMPARE(blocks.size(), 1);
    QCOMPARE(blocks[0]->code(),
             QStringLiteral("numbers = [3, 1, 2]\nprint(sorted(numbers))  # [1, 2, 3]"));
    QVERIFY(!reply->thinkingExpanded());  // folded by default
    QVERIFY(reply->thinkingSummary().startsWith(QLatin1String("Thought for")));
    // Search filters the list.
    QTest::keyClicks(chat->searchField(), QStringLiteral("python"));
    QCOMPARE(chat->filteredConversations()->rowCount(), 1);
    chat->searchField()->clear();
    saveScreenshot(window, QStringLiteral("chat-markdown"));
  }

  // A conversation is named by its first message's words, not its code, heading marks or
  // backticks.
  void aTitleLeavesOutCode() {
    MainWindow window(nullptr, dir_.path() + "/titles.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    ChatPage* chat = window.chatPage();
    const QList<QPair<QString, QString>> cases = {
        {QStringLiteral("Fix this:\n```python\nprint(1\n```\nplease"),
         QStringLiteral("Fix this: please")},
        {QStringLiteral("# Plan\nA trip to Oslo"), QStringLiteral("Plan A trip to Oslo")},
        {QStringLiteral("```\nls -la\n```"), QStringLiteral("ls -la")},
        // Code written inline keeps its words, not its backticks; a line that opens and
        // closes its backticks is no fence.
        {QStringLiteral("Fix this: ```print(1)```"), QStringLiteral("Fix this: print(1)")},
        {QStringLiteral("```print(1)```\nwhy does it print?"),
         QStringLiteral("print(1) why does it print?")},
        {QStringLiteral("Why is `x` None?"), QStringLiteral("Why is x None?")}};
    for (const auto& [message, title] : cases) {
      chat->newConversation();
      QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
      chat->composer()->setPlainText(message);
      chat->send();
      QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 20000);
      QStringList titles;
      for (int r = 0; r < chat->filteredConversations()->rowCount(); ++r)
        titles << chat->filteredConversations()->index(r, 0).data().toString();
      QVERIFY2(titles.contains(title), qPrintable(titles.join(QLatin1String(" | "))));
    }
  }

  // A first message, sent before any conversation exists, is generated with the defaults
  // (not the form's minimums) and those are what the new conversation saves.
  void firstChatHasTheDefaultSettings() {
    const QString path = dir_.path() + "/first.sqlite";
    qint64 id = 0;
    {
      MainWindow window(nullptr, path);
      window.show();
      window.loadModel(kModel);
      QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
      ChatPage* chat = window.chatPage();
      QCOMPARE(chat->currentConversation(), qint64{0});
      const ConversationSettings shown = chat->currentSettings();
      const ConversationSettings defaults;
      QCOMPARE(shown.temperature, defaults.temperature);
      QCOMPARE(shown.top_p, defaults.top_p);
      QCOMPARE(shown.top_k, defaults.top_k);
      QCOMPARE(shown.min_p, defaults.min_p);
      QCOMPARE(shown.max_tokens, defaults.max_tokens);
      QSignalSpy finished(window.engine(), &EngineHost::turnFinished);
      QTest::keyClicks(chat->composer(), QStringLiteral("Hello"));
      QTest::keyClick(chat->composer(), Qt::Key_Return);
      QVERIFY(finished.wait(20000));
      id = chat->currentConversation();
      QVERIFY(id != 0);
    }
    ConversationStore store(path);
    const ConversationSettings saved = store.settings(id);
    QCOMPARE(saved.temperature, 0.7);
    QCOMPARE(saved.top_p, 0.95);
    QCOMPARE(saved.top_k, 40);
    QCOMPARE(saved.max_tokens, 1024);
  }

  // The sampling form takes the sampler's whole top-p range, 0 (only the most likely token)
  // included, as the server and the command line do; what it shows is what a turn runs with.
  void topPTakesTheSamplersRange() {
    MainWindow window(nullptr, dir_.path() + "/top-p.sqlite");
    window.show();
    window.loadModel(kModel);
    QTRY_VERIFY_WITH_TIMEOUT(window.engine()->hasModel(), 20000);
    ChatPage* chat = window.chatPage();
    auto* top_p = chat->findChild<QDoubleSpinBox*>(QStringLiteral("topP"));
    QVERIFY(top_p);
    QCOMPARE(top_p->minimum(), 0.0);
    QCOMPARE(top_p->maximum(), 1.0);
    top_p->setValue(0.0);
    QCOMPARE(chat->currentSettings().top_p, 0.0);
    PreferencesDialog preferences;
    auto* default_top_p = preferences.findChild<QDoubleSpinBox*>(QStringLiteral("topP"));
    QVERIFY(default_top_p);
    QCOMPARE(default_top_p->minimum(), 0.0);
  }

  // A store written before replies could be marked stopped opens, keeps its messages, and
  // takes the mark from then on.
  void anOlderStoreGainsTheStoppedMark() {
    const QString path = dir_.path() + "/older.sqlite";
    {
      QSqlDatabase d = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("old"));
      d.setDatabaseName(path);
      QVERIFY(d.open());
      QSqlQuery q(d);
      QVERIFY(q.exec(QStringLiteral(
          "CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT "
          "NULL, created INTEGER NOT NULL, updated INTEGER NOT NULL, settings TEXT NOT NULL "
          "DEFAULT '{}')")));
      QVERIFY(q.exec(QStringLiteral(
          "CREATE TABLE messages (conversation INTEGER NOT NULL REFERENCES conversations(id) ON "
          "DELETE CASCADE, position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, "
          "thinking TEXT NOT NULL DEFAULT '', PRIMARY KEY (conversation, position))")));
      QVERIFY(q.exec(QStringLiteral("INSERT INTO conversations VALUES (1, 'Old', 0, 0, '{}')")));
      QVERIFY(q.exec(QStringLiteral("INSERT INTO messages VALUES (1, 0, 'user', 'Hi', '')")));
      d.close();
    }
    QSqlDatabase::removeDatabase(QStringLiteral("old"));
    ConversationStore store(path);
    QVERIFY2(store.error().isEmpty(), qPrintable(store.error()));
    QCOMPARE(store.messages(1).size(), 1);
    QVERIFY(!store.messages(1)[0].stopped);
    QVERIFY(store.setMessages(1, {{"user", "Hi", {}}, {"assistant", "Hel", {}, true, "m"}}));
    QVERIFY(store.messages(1)[1].stopped);
    QCOMPARE(store.messages(1)[1].model, QStringLiteral("m"));
  }

  // A conversation exported as Markdown for people and as JSON in the OpenAI chat shape,
  // written whole; a folder that cannot be written to is said in the window.
  void exportsAConversation() {
    const QString path = dir_.path() + "/export.sqlite";
    qint64 id = 0;
    {
      ConversationStore store(path);
      id = store.createConversation(QStringLiteral("Sorting"));
      ConversationSettings settings;
      settings.system_prompt = QStringLiteral("Be brief.");
      store.setSettings(id, settings);
      store.setMessages(id,
                        {{"user", "How do I sort?", {}},
                         {"assistant", "Use sorted().", "The basics.", true, "qwen3-moe", 4, 0}});
    }
    MainWindow window(nullptr, path);
    window.show();
    ChatPage* chat = window.chatPage();
    QVERIFY(chat->exportConversation(id, dir_.path() + "/sorting.md"));
    QFile md(dir_.path() + "/sorting.md");
    QVERIFY(md.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(md.readAll());
    for (const char* part :
         {"# Sorting", "Be brief.", "**You**", "How do I sort?",
          "**qwen3-moe** · 4 tokens · stopped", "<summary>Thinking</summary>", "Use sorted()."})
      QVERIFY2(text.contains(QString::fromUtf8(part)), part);
    QVERIFY(chat->exportConversation(id, dir_.path() + "/sorting.json"));
    QFile js(dir_.path() + "/sorting.json");
    QVERIFY(js.open(QIODevice::ReadOnly));
    const auto doc = nlohmann::json::parse(js.readAll().toStdString());
    QCOMPARE(doc["title"].get<std::string>(), std::string("Sorting"));
    QCOMPARE(doc["messages"].size(), std::size_t{3});
    QCOMPARE(doc["messages"][0]["role"].get<std::string>(), std::string("system"));
    QCOMPARE(doc["messages"][2]["reasoning_content"].get<std::string>(),
             std::string("The basics."));
    QCOMPARE(doc["sampling"]["temperature"].get<double>(), 0.7);
    QVERIFY(!chat->exportConversation(id, QStringLiteral("/proc/nowhere/x.md")));
    QVERIFY2(chat->errorText().contains(QLatin1String("could not be written")),
             qPrintable(chat->errorText()));
  }

  // Ctrl+F finds in the conversation: "1 of 2", Enter to the next, Escape closes the bar
  // (and does not stop anything).
  void findsInTheConversation() {
    const QString path = dir_.path() + "/find.sqlite";
    {
      ConversationStore store(path);
      const qint64 id = store.createConversation(QStringLiteral("Sorting"));
      store.setMessages(id, {{"user", "How do I sort a list?", {}},
                             {"assistant", "Use sorted().", {}},
                             {"user", "And in place?", {}},
                             {"assistant", "list.sort() sorts in place.", {}}});
    }
    MainWindow window(nullptr, path);
    window.show();
    ChatPage* chat = window.chatPage();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QCOMPARE(chat->messageCount(), 4);
    chat->composer()->setFocus();
    QTest::keyClick(chat->composer(), Qt::Key_F, Qt::ControlModifier);
    auto* find = chat->findChild<QLineEdit*>(QStringLiteral("find"));
    QVERIFY(find && find->isVisible());
    QTest::keyClicks(find, QStringLiteral("SORT"));
    QCOMPARE(chat->findStatus(), QStringLiteral("1 of 3"));
    QCOMPARE(chat->currentMatch(), 0);
    QVERIFY(chat->messageAt(0)->highlighted());
    QTest::keyClick(find, Qt::Key_Return);
    QCOMPARE(chat->findStatus(), QStringLiteral("2 of 3"));
    QCOMPARE(chat->currentMatch(), 1);
    QTest::keyClick(find, Qt::Key_Return, Qt::ShiftModifier);
    QCOMPARE(chat->currentMatch(), 0);
    find->clear();
    QTest::keyClicks(find, QStringLiteral("nothing like this"));
    QCOMPARE(chat->findStatus(), QStringLiteral("no match"));
    QTest::keyClick(find, Qt::Key_Escape);
    QVERIFY(!find->isVisible());
    for (int i = 0; i < chat->messageCount(); ++i) QVERIFY(!chat->messageAt(i)->highlighted());
  }

  void systemPromptAndSettingsPersist() {
    const QString path = dir_.path() + "/settings.sqlite";
    qint64 id = 0;
    {
      MainWindow window(nullptr, path);
      ChatPage* chat = window.chatPage();
      chat->newConversation();
      id = chat->currentConversation();
      chat->systemPromptField()->setText(QStringLiteral("Answer like a pirate."));
      emit chat->systemPromptField()->editingFinished();
    }
    ConversationStore store(path);
    QCOMPARE(store.settings(id).system_prompt, QStringLiteral("Answer like a pirate."));
  }
};

QTEST_MAIN(TestChatWindow)
#include "tst_chat_window.moc"
