// The conversion dialog on a tiny fixture: estimate, convert off the UI thread with the
// verification summary, and cancel then resume.
#include <QComboBox>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "ui/conversion_dialog.h"

using tandem::ui::ConversionDialog;

class TestConversionDialog : public QObject {
  Q_OBJECT
  const QString source_ = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");

  static bool complete(const QString& folder) {
    QFile f(folder + "/tandem-manifest.json");
    if (!f.open(QIODevice::ReadOnly)) return false;
    const auto manifest = nlohmann::json::parse(f.readAll().toStdString(), nullptr, false);
    return manifest.is_object() && manifest.value("complete", false);
  }

 private slots:
  void convertsWithVerification() {
    QTemporaryDir dir;
    ConversionDialog dialog;
    dialog.show();
    dialog.setSource(source_);
    QVERIFY(dialog.output().endsWith(QLatin1String("qwen3-moe-tandem-int8")));
    dialog.setOutput(dir.path() + "/int8");
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    QVERIFY(dialog.isRunning());  // the work is on another thread: start() returned at once
    QVERIFY(done.wait(30000));
    QCOMPARE(done.first().at(0).toBool(), true);
    QVERIFY2(dialog.statusText().startsWith(QLatin1String("Done")),
             qPrintable(dialog.statusText()));
    QVERIFY(dialog.verifiedTensors() > 0);
    QVERIFY(complete(dir.path() + "/int8"));
  }

  // The BF16 choice for the dense matrices reaches the converter and its manifest; with the
  // BF16 method it has no meaning and is off.
  void denseMatricesInBf16() {
    QTemporaryDir dir;
    ConversionDialog dialog;
    dialog.setSource(source_);
    dialog.setOutput(dir.path() + "/int8-dense");
    dialog.setDenseBf16(true);
    QVERIFY(dialog.denseBf16());
    dialog.setMethod(QStringLiteral("bf16"));
    QVERIFY(!dialog.denseBf16());
    dialog.setMethod(QStringLiteral("int8"));
    dialog.setOutput(dir.path() + "/int8-dense");
    QVERIFY(dialog.denseBf16());
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    QVERIFY(done.wait(30000));
    QCOMPARE(done.first().at(0).toBool(), true);
    QFile f(dir.path() + "/int8-dense/tandem-manifest.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto manifest = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(manifest.value("dense_format", std::string()), std::string("bf16"));
  }

  void cancelThenResume() {
    QTemporaryDir dir;
    ConversionDialog dialog;
    dialog.setSource(source_);
    dialog.setMethod(QStringLiteral("int4"));
    dialog.setOutput(dir.path() + "/int4");
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    dialog.cancel();
    QVERIFY(done.wait(30000));
    if (dialog.wasCancelled()) {
      QCOMPARE(done.first().at(0).toBool(), false);
      QVERIFY(dialog.statusText().contains(QLatin1String("resumes")));
      QVERIFY(!complete(dir.path() + "/int4"));  // nothing looks finished
    }
    done.clear();
    dialog.start();
    QVERIFY(done.wait(30000));
    QCOMPARE(done.first().at(0).toBool(), true);
    QVERIFY(complete(dir.path() + "/int4"));
  }

  void refusesAFolderThatIsNotAModel() {
    QTemporaryDir empty;
    ConversionDialog dialog;
    dialog.setSource(empty.path());
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    if (dialog.isRunning()) QVERIFY(done.wait(30000));
    QVERIFY(!dialog.statusText().isEmpty());
    QVERIFY(!dialog.statusText().startsWith(QLatin1String("Done")));
  }
};

QTEST_MAIN(TestConversionDialog)
#include "tst_conversion_dialog.moc"
