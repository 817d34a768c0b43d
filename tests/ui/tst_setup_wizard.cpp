// The setup assistant offscreen: navigation, validation, defaults from the probe and the
// planner, and that it remembers its choices.
#include <QAbstractButton>
#include <QComboBox>
#include <QLineEdit>
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

#include "engine/plan/memory_planner.h"
#include "ui/setup_wizard.h"
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
    QVERIFY2(verdicts.contains(QLatin1String("planned")),
             qPrintable(verdicts));  // Qwen3-Next
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
    auto* params = w.currentPage()->findChild<QTreeWidget*>();
    QVERIFY(params->topLevelItemCount() >= 8);
    for (int i = 0; i < params->topLevelItemCount(); ++i)
      QVERIFY(!params->topLevelItem(i)->text(2).isEmpty());  // every value has its reason
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
    auto* path = w.currentPage()->findChild<QLineEdit*>();
    QTemporaryDir empty;
    path->setText(empty.path());
    QVERIFY(!w.currentPage()->isComplete());
    path->setText(QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"));
    QVERIFY(w.currentPage()->isComplete());
    QCOMPARE(w.choices().source, QStringLiteral("folder"));
    w.next();
    QCOMPARE(w.currentId(), int(SetupWizard::Conversion));
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
    // (GLM-4.5, DeepSeek-V3, Kimi-K2) is not called unrunnable for what it leaves out.
    SetupWizard w(recorded("xeon-2s-amx-24gb"), nullptr);
    w.show();
    w.next();
    w.next();
    auto* list = w.currentPage()->findChild<QTreeView*>();
    int planned = 0;
    for (int r = 0; r < list->model()->rowCount(); ++r) {
      const QString name = list->model()->index(r, 0).data().toString();
      const QString verdict = list->model()->index(r, 2).data().toString();
      const bool next = name.startsWith(QLatin1String("Qwen3-Next"));
      QVERIFY2(verdict.startsWith(QLatin1String("planned")) == next,
               qPrintable(name + ": " + verdict));
      planned += next ? 1 : 0;
      if (name == QLatin1String("DeepSeek-V3-0324"))
        QVERIFY2(list->model()->index(r, 1).data().toString().endsWith(QLatin1String("(FP8)")),
                 qPrintable(list->model()->index(r, 1).data().toString()));
    }
    QCOMPARE(planned, 1);
  }
};

QTEST_MAIN(TestSetupWizard)
#include "tst_setup_wizard.moc"
