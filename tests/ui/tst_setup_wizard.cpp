// The setup assistant offscreen: navigation, validation, defaults from the probe and the
// planner, that it remembers its choices, and a repository checked against a stand-in Hub
// off the UI thread, then downloaded.
#include <QAbstractButton>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTreeView>
#include <QTreeWidget>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/model/gguf/set.h"
#include "engine/model/loaded_model.h"
#include "engine/plan/gguf_shape.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"
#include "engine/plan/model_shape.h"
#include "hub_fixture_server.h"
#include "ui/downloads/queue.h"
#include "ui/setup_wizard.h"
#include "ui/sglang_export_dialog.h"
#include "ui/theme.h"

using namespace tandem;
using namespace tandem::ui;

namespace {

HardwareReportPtr recorded(const char* name) {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hardware/" + name + ".json");
  return std::make_shared<const hw::HardwareReport>(
      plan::hardware_from_json(nlohmann::json::parse(in)));
}

QRadioButton* radio(QWizard& w, const QString& startsWith) {
  for (QRadioButton* b : w.currentPage()->findChildren<QRadioButton*>()) {
    if (b->text().startsWith(startsWith)) return b;
  }
  return nullptr;
}

std::string hub_config_text(const char* name) {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hub/" + name + ".json");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

const std::string kMixtral = "mistralai/Mixtral-8x7B-Instruct-v0.1";

// The model page's repository row and what it says.
struct RepositoryRow {
  QLineEdit* name;
  QPushButton* check;
  QLabel* answer;
  QLabel* problem;
};
RepositoryRow repository_row(QWizard& w) {
  QWizardPage* page = w.currentPage();
  return {page->findChild<QLineEdit*>(QStringLiteral("repository")),
          page->findChild<QPushButton*>(QStringLiteral("checkRepository")),
          page->findChild<QLabel*>(QStringLiteral("repositoryAnswer")),
          page->findChild<QLabel*>(QStringLiteral("problem"))};
}

// Chooses the catalog's row of `name` on the model page.
void chooseCatalogModel(QWizard& w, const QString& name) {
  auto* list = w.currentPage()->findChild<QTreeView*>();
  for (int r = 0; r < list->model()->rowCount(); ++r) {
    if (list->model()->index(r, 0).data().toString() == name)
      list->setCurrentIndex(list->model()->index(r, 0));
  }
}

void shot(QWizard& w, const QString& name) {
  const QString dir = qEnvironmentVariable("TANDEM_SCREENSHOT_DIR");
  if (dir.isEmpty()) return;
  QCoreApplication::processEvents();
  w.grab().save(dir + "/wizard-" + name + ".png");
}

}  // namespace

class TestSetupWizard : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    theme::apply(*qApp);
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TandemTest"));
    QCoreApplication::setApplicationName(QStringLiteral("TandemWizardTest"));
    QSettings().clear();
  }
  void cleanupTestCase() { QSettings().clear(); }
  // 500 GiB free where models go, whatever the disk the tests run on: the GGUF release below
  // (11 GiB) fits, Kimi-K2 (about a terabyte) does not.
  void init() {
    SetupWizard::setDiskProbe([](const std::string& path) {
      hw::DiskSpace d;
      d.path = d.measured_path = path;
      d.total_bytes = std::uint64_t{1} << 40;
      d.free_bytes = std::uint64_t{500} << 30;
      return d;
    });
  }
  void cleanup() { SetupWizard::setDiskProbe({}); }

  void walksThroughTheDemoPath() {
    SetupWizard w(recorded("ryzen-avx512-16gb"), nullptr);
    w.show();
    QCOMPARE(w.currentId(), int(SetupWizard::Welcome));
    shot(w, QStringLiteral("1-welcome"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Hardware));
    QVERIFY(w.currentPage()->isComplete());
    shot(w, QStringLiteral("2-hardware"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Model));
    // The demo is the default, and the catalog lists models with a verdict for this machine.
    QVERIFY(radio(w, QStringLiteral("Try the built-in demo"))->isChecked());
    auto* list = w.currentPage()->findChild<QTreeView*>();
    QVERIFY(list->model()->rowCount() >= 8);
    QString verdicts;
    for (int r = 0; r < list->model()->rowCount(); ++r)
      verdicts += list->model()->index(r, 2).data().toString() + "\n";
    QVERIFY2(verdicts.contains(QLatin1String("fits")), qPrintable(verdicts));
    QVERIFY2(!verdicts.contains(QLatin1String("planned")), qPrintable(verdicts));
    // Each format is named once in a row: "INT4 fits", not "INT4 fits with changes · INT4
    // fits" (a plan whose one change was INT4 for INT8 has INT4 fit as it is).
    for (const QString& row : verdicts.split(QLatin1Char('\n'), Qt::SkipEmptyParts)) {
      QStringList formats;
      for (const QString& v : row.split(QStringLiteral(" · ")))
        formats << v.section(QLatin1Char(' '), 0, 0);
      QCOMPARE(formats.removeDuplicates(), 0);
    }
    shot(w, QStringLiteral("3-model"));
    w.next();
    // The demo needs no download.
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
    QCOMPARE(w.currentPage()->findChild<QComboBox*>()->currentData().toString(),
             QStringLiteral("int8"));
    shot(w, QStringLiteral("4-conversion"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Parameters));
    const auto spins = w.currentPage()->findChildren<QSpinBox*>();
    QCOMPARE(spins[0]->value(), 16);  // one thread per physical core of the recorded Ryzen
    // The context goes no further than the positions the demo model takes.
    QCOMPARE(spins[1]->maximum(), 2048);
    spins[1]->setValue(4096);
    QCOMPARE(spins[1]->value(), 2048);
    QCOMPARE(w.choices().context, 2048);
    auto* params = w.currentPage()->findChild<QTreeWidget*>();
    QVERIFY(params->topLevelItemCount() >= 8);
    for (int i = 0; i < params->topLevelItemCount(); ++i) {
      QTreeWidgetItem* item = params->topLevelItem(i);
      QVERIFY(!item->text(2).isEmpty());  // every value has its reason
      // Plain words, with the seeds' name as the detail.
      const QString seeds = item->data(0, Qt::UserRole).toString();
      QVERIFY2(item->text(0) != seeds && !item->text(0).contains(QLatin1Char('-')),
               qPrintable(item->text(0)));
      QVERIFY(item->toolTip(0).contains(seeds));
    }
    shot(w, QStringLiteral("5-parameters"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Finish));
    shot(w, QStringLiteral("6-finish"));
    QCOMPARE(w.choices().source, QStringLiteral("demo"));
    QCOMPARE(w.choices().threads, 16);
    SetupWizard::saveChoices(w.choices());
    QVERIFY(SetupWizard::completedBefore());
    QCOMPARE(SetupWizard::savedChoices().cpu_format, QStringLiteral("int8"));
  }

  void validatesAFolder() {
    SetupWizard w(recorded("laptop-avx2"), nullptr);
    w.show();
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Model));
    auto* path = w.currentPage()->findChild<QLineEdit*>(QStringLiteral("folder"));
    QTemporaryDir empty;
    path->setText(empty.path());
    QVERIFY(!w.currentPage()->isComplete());
    path->setText(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"));
    QVERIFY(w.currentPage()->isComplete());
    QCOMPARE(w.choices().source, QStringLiteral("folder"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
  }

  // A config.json that is not JSON is said to be damaged, not missing.
  void aDamagedConfigIsCalledDamaged() {
    SetupWizard w(recorded("laptop-avx2"), nullptr);
    w.show();
    w.next();
    w.next();
    QTemporaryDir dir;
    {
      QFile f(dir.path() + "/config.json");
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"hidden_size\": 20");
    }
    w.currentPage()->findChild<QLineEdit*>(QStringLiteral("folder"))->setText(dir.path());
    QVERIFY(!w.currentPage()->isComplete());
    QString problems;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) problems += l->text() + "\n";
    QVERIFY2(problems.contains(QLatin1String("is not valid JSON")), qPrintable(problems));
    QVERIFY(!problems.contains(QLatin1String("no config.json")));
  }

  // The format box and the plan agree: choosing INT4 where INT8 is recommended says so, and
  // the settings and the last page are planned for INT4.
  // The settings page hands the model over to SGLang + kt-kernel: the commands in a dialog,
  // saved as an executable script; a model kt-kernel cannot take is said on the page.
  void handsOverToSglang() {
    QTemporaryDir dir;
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    for (int i = 0; i < 4; ++i) w.next();  // the demo: no download
    QCOMPARE(w.currentId(), int(SetupWizard::Parameters));
    auto* button = w.currentPage()->findChild<QPushButton*>(QStringLiteral("exportSglang"));
    QVERIFY(button);
    w.mutableChoices().source = QStringLiteral("catalog");
    w.mutableChoices().catalog_id = QStringLiteral("gpt-oss-20b");
    w.mutableChoices().folder = dir.path() + "/openai/gpt-oss-20b";
    w.replan();
    button->click();
    QString said;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) said += l->text() + "\n";
    QVERIFY2(said.contains(QLatin1String("kt-kernel converts BF16, FP16 or FP8 checkpoints; this "
                                         "one is mxfp4")),
             qPrintable(said));
    QVERIFY(!w.findChild<SglangExportDialog*>());

    w.mutableChoices().catalog_id = QStringLiteral("qwen3-30b-a3b");
    w.mutableChoices().folder = dir.path() + "/Qwen/Qwen3-30B-A3B";
    w.replan();
    button->click();
    auto* dialog = w.findChild<SglangExportDialog*>();
    QString after;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) after += l->text() + "\n";
    QVERIFY2(dialog && dialog->isVisible(), qPrintable(after.right(400)));
    const QString script = dialog->script();
    QVERIFY2(script.contains(QLatin1String("--kt-method AMXINT8")) &&
                 script.contains(QLatin1String("sglang.launch_server")) &&
                 script.contains(dir.path() + "/Qwen/Qwen3-30B-A3B"),
             qPrintable(script));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR"))
      dialog->grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/sglang-export.png");
    QVERIFY(dialog->saveTo(dir.path() + "/run-sglang.sh"));
    QFile saved(dir.path() + "/run-sglang.sh");
    QVERIFY(saved.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(saved.readAll()), script);
    QVERIFY(saved.permissions() & QFileDevice::ExeOwner);
    QVERIFY(!dialog->saveTo(dir.path() + "/no/such/folder/run.sh"));
    QVERIFY(dialog->problemText().contains(QLatin1String("could not be saved")));
    dialog->close();
  }

  void theFormatChosenIsTheFormatPlanned() {
    SetupWizard w(recorded("ryzen-avx512-16gb"), nullptr);
    w.show();
    w.next();
    w.next();
    w.next();  // the demo: no download
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
    auto* box = w.currentPage()->findChild<QComboBox*>();
    QCOMPARE(box->currentData().toString(), QStringLiteral("int8"));
    box->setCurrentIndex(box->findData(QStringLiteral("int4")));
    QString text;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) text += l->text() + "\n";
    QVERIFY2(text.contains(QLatin1String("Recommended for this computer and model: INT8")) &&
                 text.contains(QLatin1String("You chose INT4 instead")),
             qPrintable(text));
    QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int4);
    QString method;
    for (const auto& x : w.plan().parameters)
      if (x.name == "kt-method") method = QString::fromStdString(x.value);
    QVERIFY2(method.endsWith(QLatin1String("INT4")), qPrintable(method));
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Finish));
    QString summary;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) summary += l->text();
    QVERIFY2(summary.contains(QLatin1String("INT4 weights")) && summary.contains(method),
             qPrintable(summary));
    QVERIFY2(!summary.contains(QLatin1String("downloading")), qPrintable(summary));
  }

  // The demo has routed experts, so the format box offers INT4 with 8-bit downs between INT8
  // and INT4, and the plan and the last page take it by its name.
  void int4WithInt8DownsIsOfferedForExperts() {
    SetupWizard w(recorded("ryzen-avx512-16gb"), nullptr);
    w.show();
    w.next();
    w.next();
    w.next();  // the demo
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
    QVERIFY(w.modelHasExperts());
    auto* box = w.currentPage()->findChild<QComboBox*>();
    const int down8 = box->findData(QStringLiteral("int4-down8"));
    QVERIFY(down8 > box->findData(QStringLiteral("int8")));
    QVERIFY(down8 < box->findData(QStringLiteral("int4")));
    QVERIFY2(
        box->itemText(box->findData(QStringLiteral("int4"))).contains(QLatin1String("4 bits too")),
        qPrintable(box->itemText(box->findData(QStringLiteral("int4")))));
    box->setCurrentIndex(down8);
    QString text;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) text += l->text() + "\n";
    QVERIFY2(text.contains(QLatin1String("You chose INT4 (8-bit downs) instead")),
             qPrintable(text));
    QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int4Down8);
    QCOMPARE(w.choices().cpu_format, QStringLiteral("int4-down8"));
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Finish));
    QString summary;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) summary += l->text();
    QVERIFY2(summary.contains(QLatin1String("INT4 (8-bit downs) weights")), qPrintable(summary));
  }

  // Rotated INT8 is offered beside INT8, and recommended where AMX's integer tiles take it:
  // the box starts on it with its reason, choosing plain INT8 instead is planned as INT8, and
  // the pages and the saved choice name it; the model loads in it. Without AMX plain INT8
  // stays the recommendation.
  void int8RotatedIsRecommendedWithAmx() {
    QSettings().clear();  // a first run: no earlier choice for the demo stands
    {
      SetupWizard w(recorded("ryzen-avx512-16gb"), nullptr);
      w.show();
      for (int i = 0; i < 3; ++i) w.next();  // the demo
      auto* box = w.currentPage()->findChild<QComboBox*>();
      QCOMPARE(box->currentData().toString(), QStringLiteral("int8"));
      QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int8);
    }
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    w.next();
    w.next();
    w.next();  // the demo
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
    auto* box = w.currentPage()->findChild<QComboBox*>();
    const int rotated = box->findData(QStringLiteral("int8-rotated"));
    QCOMPARE(rotated, box->findData(QStringLiteral("int8")) + 1);
    QVERIFY2(box->itemText(rotated).contains(QLatin1String("AMX")),
             qPrintable(box->itemText(rotated)));
    QCOMPARE(box->currentIndex(), rotated);
    QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int8Rotated);
    const auto page_text = [&] {
      QString text;
      for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) text += l->text() + "\n";
      return text;
    };
    QVERIFY2(page_text().contains(QLatin1String("Recommended for this computer and model: INT8 "
                                                "rotated. Kernels:")) &&
                 page_text().contains(QLatin1String("integer tiles")),
             qPrintable(page_text()));
    box->setCurrentIndex(box->findData(QStringLiteral("int8")));
    QVERIFY2(page_text().contains(QLatin1String("You chose INT8 instead")), qPrintable(page_text()));
    QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int8);
    box->setCurrentIndex(rotated);
    QCOMPARE(w.plan().cpu_format, tandem::plan::WeightFormat::Int8Rotated);
    QCOMPARE(w.choices().cpu_format, QStringLiteral("int8-rotated"));
    tandem::model::CpuFormat loaded{};
    QVERIFY(tandem::model::parse_cpu_format(w.choices().cpu_format.toStdString(), loaded));
    QCOMPARE(loaded, tandem::model::CpuFormat::Int8Rotated);
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Finish));
    QString summary;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) summary += l->text();
    QVERIFY2(summary.contains(QLatin1String("INT8 rotated weights")) &&
                 summary.contains(QLatin1String("AMXINT8ROTATED")),
             qPrintable(summary));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      w.back();
      w.back();
      for (const QSize size : {QSize(1024, 640), QSize(1600, 1000)}) {
        w.resize(size);
        w.grab().save(
            qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") +
            QStringLiteral("/wizard-int8-rotated-%1x%2.png").arg(size.width()).arg(size.height()));
      }
    }
  }

  // A catalog model whose files are not here yet: the last page says it loads once they are,
  // where the demo's says nothing of a download.
  void theLastPageSaysAModelStillDownloads() {
    DownloadQueue queue;
    SetupWizard w(recorded("xeon-2s-amx-24gb"), &queue);
    w.show();
    w.next();
    w.next();
    chooseCatalogModel(w, QStringLiteral("gpt-oss-20b"));
    QCOMPARE(w.choices().catalog_id, QStringLiteral("gpt-oss-20b"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));
    w.next();
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Finish));
    QString summary;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) summary += l->text();
    QVERIFY2(summary.contains(QLatin1String(", once its files are downloaded (the Downloads page")),
             qPrintable(summary));
  }

  // A download larger than the free disk is not offered (Kimi-K2's is about a terabyte).
  void aDownloadThatDoesNotFitIsNotOffered() {
    DownloadQueue queue;
    SetupWizard w(recorded("xeon-2s-amx-24gb"), &queue);
    w.show();
    w.next();
    w.next();
    chooseCatalogModel(w, QStringLiteral("Kimi-K2-Instruct"));
    QCOMPARE(w.choices().catalog_id, QStringLiteral("kimi-k2-instruct"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));
    QString text;
    for (QLabel* l : w.currentPage()->findChildren<QLabel*>()) text += l->text();
    QVERIFY2(text.contains(QLatin1String("but only")), qPrintable(text));
    for (QPushButton* b : w.currentPage()->findChildren<QPushButton*>()) {
      if (b->text() == QLatin1String("Download now")) QVERIFY(!b->isVisible());
      if (b->text() == QLatin1String("Check the Space Again")) QVERIFY(b->isVisible());
    }
  }

  void catalogModelsNeedTheirDownload() {
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    w.next();
    w.next();
    auto* list = w.currentPage()->findChild<QTreeView*>();
    int row = -1;
    for (int r = 0; r < list->model()->rowCount(); ++r) {
      if (list->model()->index(r, 0).data().toString() == QLatin1String("Qwen3-30B-A3B")) row = r;
    }
    QVERIFY(row >= 0);
    list->setCurrentIndex(list->model()->index(row, 0));
    QVERIFY(w.currentPage()->isComplete());
    QCOMPARE(w.choices().catalog_id, QStringLiteral("qwen3-30b-a3b"));
    QVERIFY(w.choices().folder.endsWith(QLatin1String("models/Qwen/Qwen3-30B-A3B")));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));
    // Not on disk, and no download queue in this test: the page cannot be passed yet.
    QVERIFY(!w.currentPage()->isComplete());
    shot(w, QStringLiteral("download"));
    // The plan for the Xeon puts experts on its GPU.
    QVERIFY(w.plan().uses_gpu);
    QVERIFY(w.plan().gpu_experts_per_layer > 0);
  }

  void catalogModelsTandemRunsHaveAVerdict() {
    // The catalog keeps only what the planner reads; a model of an architecture Tandem runs
    // (GLM-4.5, DeepSeek-V3, Kimi-K2, Qwen3-Next) is not called unrunnable for what it leaves
    // out, and the catalog lists only what runs.
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    w.next();
    w.next();
    auto* list = w.currentPage()->findChild<QTreeView*>();
    int planned = 0;
    for (int r = 0; r < list->model()->rowCount(); ++r) {
      const QString name = list->model()->index(r, 0).data().toString();
      const QString verdict = list->model()->index(r, 2).data().toString();
      QVERIFY2(!verdict.startsWith(QLatin1String("planned")), qPrintable(name + ": " + verdict));
      planned += name.startsWith(QLatin1String("Qwen3-Next")) ? 1 : 0;
      if (name == QLatin1String("DeepSeek-V3-0324"))
        QVERIFY2(list->model()->index(r, 1).data().toString().endsWith(QLatin1String("(FP8)")),
                 qPrintable(list->model()->index(r, 1).data().toString()));
    }
    QCOMPARE(planned, 2);  // Qwen3-Next Instruct and Thinking, with a verdict
  }

  void checksARepositoryOffTheUiThread() {
    tandem::test::HubFixtureServer server;
    const std::string config = hub_config_text("mixtral-8x7b-instruct");
    const auto weights =
        2 * static_cast<std::uint64_t>(
                plan::model_shape_from_config(nlohmann::json::parse(config), "t").total_params());
    server.add_model_repo(kMixtral, config, weights, 19);
    // A slow Hub: each answer takes 300 ms, and the page goes on while it waits.
    server.set_answer_delay_ms(300);
    QSettings().setValue(DownloadQueue::kEndpointKey, QString::fromStdString(server.endpoint()));
    SetupWizard w(recorded("ryzen-avx512-16gb"), nullptr);
    w.show();
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Model));
    const RepositoryRow row = repository_row(w);
    QVERIFY(row.name && row.check && row.answer && row.problem);
    QVERIFY(!row.check->isEnabled());
    row.name->setText(QString::fromStdString(kMixtral));
    QVERIFY(radio(w, QStringLiteral("Or a Hugging Face repository"))->isChecked());
    QVERIFY(!w.currentPage()->isComplete());  // not checked yet
    QVERIFY2(row.problem->text().contains(QLatin1String("Press Check")),
             qPrintable(row.problem->text()));

    QElapsedTimer click;
    click.start();
    QTest::mouseClick(row.check, Qt::LeftButton);
    QVERIFY2(click.elapsed() < 250, "the click waited for the Hub");
    QVERIFY2(row.answer->text().contains(QLatin1String("Asking about")),
             qPrintable(row.answer->text()));
    QVERIFY(!w.currentPage()->isComplete());
    QTRY_VERIFY_WITH_TIMEOUT(w.currentPage()->isComplete(), 15000);
    QVERIFY(click.elapsed() >= 600);  // the listing and config.json, 300 ms each
    const QString answer = row.answer->text();
    QVERIFY2(answer.contains(QLatin1String("a Mixtral model, 46.7 B parameters")),
             qPrintable(answer));
    QVERIFY2(answer.contains(QString::fromStdString(server.endpoint())), qPrintable(answer));
    QVERIFY2(answer.contains(QLatin1String("(BF16, 21 files)")), qPrintable(answer));
    QVERIFY2(answer.contains(QLatin1String("INT8 fits")), qPrintable(answer));
    QVERIFY(row.problem->text().isEmpty());
    QCOMPARE(w.choices().source, QStringLiteral("repository"));
    QCOMPARE(w.choices().repo, QString::fromStdString(kMixtral));
    QVERIFY(
        w.choices().folder.endsWith(QLatin1String("models/") + QString::fromStdString(kMixtral)));
    // The plan is Mixtral's: its 8 experts per layer, INT8 on the CPU, 46.7 B parameters
    // between the RAM and the GPU.
    QCOMPARE(w.plan().verdict, plan::Verdict::Fits);
    QVERIFY2(
        w.plan().ram_total() + w.plan().vram_total() > (40ull << 30),
        qPrintable(
            QStringLiteral("%1 + %2 bytes").arg(w.plan().ram_total()).arg(w.plan().vram_total())));
    for (const std::string f : {"tokenizer.json", "model-00001-of-00019.safetensors"})
      QCOMPARE(server.file_requests(kMixtral, f).size(), std::size_t{0});
    shot(w, QStringLiteral("repository"));

    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));
    const QString status = w.currentPage()->findChild<QLabel*>()->text();
    QVERIFY2(status.contains(QString::fromStdString(kMixtral) + ": ") &&
                 status.contains(QLatin1String("(BF16, 21 files)")),
             qPrintable(status));
    QVERIFY(!w.currentPage()->isComplete());  // no download queue in this test
    QSettings().remove(DownloadQueue::kEndpointKey);
  }

  void repositoryFailuresAreSentencesOnThePage_data() {
    QTest::addColumn<QString>("repo");
    QTest::addColumn<bool>("reachable");
    QTest::addColumn<QString>("expected");
    QTest::newRow("not a name") << "just-a-name" << true << "write it as owner/name";
    QTest::newRow("no such repository") << "nobody/nothing" << true << "There is no repository";
    QTest::newRow("gated") << "someone/gated" << true << "add a token (set HF_TOKEN";
    QTest::newRow("architecture") << "google-bert/bert-base-uncased" << true
                                  << "BertForMaskedLM is not supported. Tandem runs ";
    QTest::newRow("offline") << QString::fromStdString(kMixtral) << false
                             << "model folders on this computer still work";
  }
  void repositoryFailuresAreSentencesOnThePage() {
    QFETCH(QString, repo);
    QFETCH(bool, reachable);
    QFETCH(QString, expected);
    tandem::test::HubFixtureServer server;
    server.add_model_repo("google-bert/bert-base-uncased", hub_config_text("bert-base-uncased"),
                          440'000'000ull, 3);
    server.add_model_repo("someone/gated", hub_config_text("mixtral-8x7b-instruct"), 1000, 1);
    server.set_gated("someone/gated", "hf_secret", true);
    QSettings().setValue(DownloadQueue::kEndpointKey,
                         reachable ? QString::fromStdString(server.endpoint())
                                   : QStringLiteral("http://127.0.0.1:1"));
    SetupWizard w(recorded("laptop-avx2"), nullptr);
    w.show();
    w.next();
    w.next();
    const RepositoryRow row = repository_row(w);
    row.name->setText(repo);
    QTest::mouseClick(row.check, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(row.problem->text().contains(expected), 15000);
    QVERIFY(!w.currentPage()->isComplete());
    QVERIFY(w.repository() == nullptr);
    // Editing the name clears the failure: it was about the name before.
    row.name->setText(repo + QLatin1Char('x'));
    QVERIFY(!row.problem->text().contains(expected));
    QSettings().remove(DownloadQueue::kEndpointKey);
  }

  void aCatalogRepositoryIsAnsweredWithoutTheHub() {
    QSettings().setValue(DownloadQueue::kEndpointKey, QStringLiteral("http://127.0.0.1:1"));
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    w.next();
    w.next();
    const RepositoryRow row = repository_row(w);
    row.name->setText(QStringLiteral("zai-org/glm-4.5-air-fp8"));
    QTest::keyClick(row.name, Qt::Key_Return);
    QTRY_VERIFY_WITH_TIMEOUT(w.repository() != nullptr, 5000);
    QVERIFY2(row.answer->text().contains(QLatin1String("from Tandem's catalog")),
             qPrintable(row.answer->text()));
    QVERIFY2(row.answer->text().contains(QLatin1String("(FP8)")), qPrintable(row.answer->text()));
    QCOMPARE(w.choices().catalog_id, QStringLiteral("glm-4.5-air"));
    QCOMPARE(w.choices().repo, QStringLiteral("zai-org/GLM-4.5-Air-FP8"));
    QVERIFY(w.currentPage()->isComplete());
    QSettings().remove(DownloadQueue::kEndpointKey);
  }

  void aCheckedRepositoryDownloadsThroughTheQueue() {
    // Tiny weights this time, so the download really completes.
    tandem::test::HubFixtureServer server;
    const std::string repo = "tandem-test/tiny-mixtral";
    server.add_model_repo(repo, hub_config_text("mixtral-8x7b-instruct"), 7, 1);
    QSettings().setValue(DownloadQueue::kEndpointKey, QString::fromStdString(server.endpoint()));
    DownloadQueue queue;
    SetupWizard w(recorded("ryzen-avx512-16gb"), &queue);
    w.show();
    w.next();
    w.next();
    const RepositoryRow row = repository_row(w);
    row.name->setText(QString::fromStdString(repo));
    QTest::mouseClick(row.check, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.currentPage()->isComplete(), 15000);
    QDir(w.choices().folder).removeRecursively();  // left by an earlier run that failed
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    auto* start = w.currentPage()->findChild<QPushButton*>(QStringLiteral("primary"));
    QVERIFY(start && start->isVisible());
    QTest::mouseClick(start, Qt::LeftButton);
    QVERIFY(w.currentPage()->isComplete());  // it goes on in the background
    QCOMPARE(queue.model()->ids().size(), 1);
    const DownloadJobSpec spec = queue.model()->spec(queue.model()->ids().front());
    QCOMPARE(spec.repo, QString::fromStdString(repo));
    QCOMPARE(spec.destination, w.choices().folder);
    QVERIFY(spec.include.contains(QStringLiteral("*.safetensors")));
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 15000);
    QCOMPARE(finished.front().at(1).toBool(), true);
    QVERIFY(QFile::exists(w.choices().folder + "/config.json"));
    QVERIFY(QFile::exists(w.choices().folder + "/model-00001-of-00001.safetensors"));
    QVERIFY2(w.currentPage()->findChild<QLabel*>()->text().contains(
                 QLatin1String("has been downloaded")),
             qPrintable(w.currentPage()->findChild<QLabel*>()->text()));
    QDir(w.choices().folder).removeRecursively();
    QSettings().remove(DownloadQueue::kEndpointKey);
  }

  // The quantisation planned for is sized from its files' headers in the background (the
  // largest that fits, Q8_0 here, after the default Q4_K_M's header said what the model is),
  // each file asked once with a ranged request; the page keeps the choice.
  void aGgufQuantisationIsSizedFromItsHeaders() {
    tandem::test::HubFixtureServer server;
    const std::string repo = "someone/Tiny-MoE-GGUF";
    const auto serve = [&](const std::string& path, const char* fixture) {
      server.add_file_from(repo, path,
                           std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + fixture);
    };
    serve("Tiny-MoE-Q8_0.gguf", "qwen3moe-q8_0.gguf");
    serve("Tiny-MoE-Q4_K_M.gguf", "qwen3moe-mixed.gguf");
    QSettings().setValue(DownloadQueue::kEndpointKey, QString::fromStdString(server.endpoint()));
    DownloadQueue queue;
    SetupWizard w(recorded("ryzen-avx512-16gb"), &queue);
    w.show();
    w.next();
    w.next();
    const RepositoryRow row = repository_row(w);
    row.name->setText(QString::fromStdString(repo));
    QTest::mouseClick(row.check, Qt::LeftButton);
    QTRY_VERIFY_WITH_TIMEOUT(w.currentPage()->isComplete(), 15000);
    QCOMPARE(w.choices().quantization, QStringLiteral("Q8_0"));
    QTRY_VERIFY_WITH_TIMEOUT(w.repository() && plan::gguf_sizes_read(*w.repository()), 15000);
    const auto q8 = plan::model_shape_from_gguf(
        model::GgufSet(std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-q8_0.gguf"));
    QCOMPARE(w.repository()->shape.stored.attention, q8.stored.attention);
    QCOMPARE(w.repository()->shape.stored.expert, q8.stored.expert);
    QCOMPARE(w.choices().quantization, QStringLiteral("Q8_0"));
    for (const char* file : {"Tiny-MoE-Q8_0.gguf", "Tiny-MoE-Q4_K_M.gguf"}) {
      const auto read = server.file_requests(repo, file);
      QCOMPARE(read.size(), std::size_t{1});
      QVERIFY(read.front().had_range);
    }
    QSettings().remove(DownloadQueue::kEndpointKey);
  }

  // A catalog model's GGUF release: the button under the list checks it, the page lists its
  // quantisations with their verdicts and picks the largest that fits, another can be
  // chosen, and exactly that one's files are downloaded and then opened.
  void aGgufReleaseIsChosenByQuantisation() {
    tandem::test::HubFixtureServer server;
    const std::string repo = "unsloth/Qwen3-30B-A3B-GGUF";
    const auto add = [&](const std::string& path, std::uint64_t bytes) {
      server.add_file(repo, path, "gguf");
      server.set_listed_size(repo, path, bytes);
    };
    add("Qwen3-30B-A3B-UD-Q2_K_XL.gguf", 11'800'000'000ull);
    add("Qwen3-30B-A3B-Q4_K_M.gguf", 18'560'000'000ull);
    add("Qwen3-30B-A3B-Q8_0.gguf", 32'480'000'000ull);
    add("BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 49'000'000'000ull);
    add("BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf", 12'100'000'000ull);
    QSettings().setValue(DownloadQueue::kEndpointKey, QString::fromStdString(server.endpoint()));
    DownloadQueue queue;
    SetupWizard w(recorded("ryzen-avx512-16gb"), &queue);
    w.show();
    w.next();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Model));
    auto* view = w.currentPage()->findChild<QTreeView*>();
    QVERIFY(view);
    for (int r = 0; r < view->model()->rowCount(); ++r) {
      if (view->model()->index(r, 0).data().toString() == QLatin1String("Qwen3-30B-A3B"))
        view->setCurrentIndex(view->model()->index(r, 0));
    }
    auto* gguf = w.currentPage()->findChild<QPushButton*>(QStringLiteral("catalogGguf"));
    QVERIFY(gguf && gguf->isVisible());
    QVERIFY2(gguf->text().contains(QString::fromStdString(repo)), qPrintable(gguf->text()));
    QTest::mouseClick(gguf, Qt::LeftButton);
    QVERIFY(radio(w, QStringLiteral("Or a Hugging Face repository"))->isChecked());
    QTRY_VERIFY_WITH_TIMEOUT(w.currentPage()->isComplete(), 15000);
    auto* quant = w.currentPage()->findChild<QComboBox*>(QStringLiteral("quantization"));
    QVERIFY(quant && quant->isVisible());
    QCOMPARE(quant->count(), 4);
    QVERIFY2(quant->itemText(0).startsWith(QLatin1String("UD-Q2_K_XL, 11.0 GiB: ")),
             qPrintable(quant->itemText(0)));
    // The largest that fits is chosen, and the choices are its files.
    QString largest;
    for (int i = 0; i < quant->count(); ++i)
      if (quant->itemText(i).endsWith(QLatin1String(": fits")))
        largest = quant->itemData(i).toString();
    QVERIFY(!largest.isEmpty());
    QCOMPARE(quant->currentData().toString(), largest);
    QCOMPARE(w.choices().quantization, largest);
    const QString answer = repository_row(w).answer->text();
    QVERIFY2(answer.contains(largest + QLatin1String(" fits, run as stored")), qPrintable(answer));
    // Another quantisation: the plan and the download follow it.
    quant->setCurrentIndex(0);
    QCOMPARE(w.choices().quantization, QStringLiteral("UD-Q2_K_XL"));
    QCOMPARE(w.choices().files, QStringList{QStringLiteral("Qwen3-30B-A3B-UD-Q2_K_XL.gguf")});
    QCOMPARE(w.recommendedFormat(), plan::WeightFormat::Native);
    QCOMPARE(w.choices().modelPath(),
             w.choices().folder + QStringLiteral("/Qwen3-30B-A3B-UD-Q2_K_XL.gguf"));
    shot(w, QStringLiteral("gguf"));
    QDir(w.choices().folder).removeRecursively();
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Download));

    const QString status = w.currentPage()->findChild<QLabel*>()->text();
    QVERIFY2(status.contains(QLatin1String("Only the UD-Q2_K_XL GGUF files are fetched")),
             qPrintable(status));
    QVERIFY2(status.contains(QLatin1String("11.0 GiB to download (GGUF, 1 file)")),
             qPrintable(status));
    // Tiny files this time, so that the download completes.
    server.set_listed_size(repo, "Qwen3-30B-A3B-UD-Q2_K_XL.gguf", 4);
    QSignalSpy finished(&queue, &DownloadQueue::finished);
    auto* start = w.currentPage()->findChild<QPushButton*>(QStringLiteral("primary"));
    QVERIFY(start && start->isVisible());
    QTest::mouseClick(start, Qt::LeftButton);
    const DownloadJobSpec spec = queue.model()->spec(queue.model()->ids().front());
    QCOMPARE(spec.include, QStringList{QStringLiteral("Qwen3-30B-A3B-UD-Q2_K_XL.gguf")});
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 15000);
    QVERIFY(w.choices().present());
    QVERIFY(!QFile::exists(w.choices().folder + "/Qwen3-30B-A3B-Q4_K_M.gguf"));
    // The format page: the stored blocks are the recommendation and the default.
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
    auto* format = w.currentPage()->findChild<QComboBox*>();
    QVERIFY(format);
    QCOMPARE(format->currentData().toString(), QStringLiteral("native"));
    QVERIFY2(format->currentText().contains(QLatin1String("GGUF")),
             qPrintable(format->currentText()));
    QCOMPARE(w.plan().cpu_format, plan::WeightFormat::Native);
    QDir(w.choices().folder).removeRecursively();
    QSettings().remove(DownloadQueue::kEndpointKey);
  }
};

QTEST_MAIN(TestSetupWizard)
#include "tst_setup_wizard.moc"
