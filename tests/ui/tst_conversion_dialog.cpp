// The conversion dialog on a tiny fixture: estimate, convert off the UI thread with the
// verification summary, and cancel then resume.
#include <QComboBox>
#include <QFile>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "engine/model/demo_model.h"
#include "engine/plan/memory_planner.h"
#include "kernels/cpu/isa.h"
#include "ui/conversion_dialog.h"
#include "ui/main_window.h"

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
    dialog.setMethod(QStringLiteral("int8"));  // whatever this CPU's recommendation
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
    // One verdict over the table, and the converted copy offered to load.
    QVERIFY2(dialog.verdictText().startsWith(QStringLiteral("✓ All ")) &&
                 dialog.verdictText().contains(QLatin1String("as close to the original as INT8")),
             qPrintable(dialog.verdictText()));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR"))
      dialog.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/conversion-done.png");
    QSignalSpy load(&dialog, &ConversionDialog::loadRequested);
    auto* button = dialog.findChild<QPushButton*>();
    for (QPushButton* b : dialog.findChildren<QPushButton*>())
      if (b->text() == QLatin1String("Load Converted Model")) button = b;
    QVERIFY(button->isVisible());
    QTest::mouseClick(button, Qt::LeftButton);
    QCOMPARE(load.count(), 1);
    QCOMPARE(load.first().at(0).toString(), dir.path() + "/int8");
  }

  // The methods named in words (INT4 with 8-bit downs, rotated INT8) reach the converter: each
  // suggests a folder named after it, its manifest names it, and its verdict names it in words.
  // Rotated INT8's manifest also names each tensor's rotation.
  void namedMethodsReachTheConverter_data() {
    QTest::addColumn<QString>("method");
    QTest::addColumn<QString>("words");
    QTest::newRow("int4-down8") << "int4-down8"
                                << "as INT4 with 8-bit downs";
    QTest::newRow("int8-rotated") << "int8-rotated"
                                  << "as close to the original as INT8 rotated";
  }

  void namedMethodsReachTheConverter() {
    QFETCH(QString, method);
    QFETCH(QString, words);
    QTemporaryDir dir;
    ConversionDialog dialog;
    dialog.show();
    dialog.setSource(source_);
    dialog.setMethod(method);
    QVERIFY(dialog.output().endsWith(QStringLiteral("qwen3-moe-tandem-") + method));
    dialog.setOutput(dir.path() + "/out");
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    QVERIFY(done.wait(30000));
    QCOMPARE(done.first().at(0).toBool(), true);
    QFile f(dir.path() + "/out/tandem-manifest.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto manifest = nlohmann::json::parse(f.readAll().toStdString());
    QCOMPARE(manifest["method"].get<std::string>(), method.toStdString());
    int rotated = 0;
    for (const auto& [name, t] : manifest["tensors"].items()) rotated += t["rotation"] > 0 ? 1 : 0;
    QCOMPARE(rotated > 0, method == QLatin1String("int8-rotated"));
    QVERIFY2(dialog.verdictText().contains(words), qPrintable(dialog.verdictText()));
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR")) {
      dialog.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/conversion-" + method +
                         ".png");
    }
  }

  // The method offered first is the 8-bit format the plan recommends for this CPU: rotated
  // INT8 with AMX, plain INT8 without; it alone says "recommended", and the other 8-bit item
  // says what AMX would give.
  void recommendsThisCpusEightBitFormat() {
    ConversionDialog dialog;
    auto* box = dialog.findChild<QComboBox*>();
    QVERIFY(box);
    const bool amx = tandem::plan::int8_format_for(tandem::kernels::active_variant()) ==
                     tandem::plan::WeightFormat::Int8Rotated;
    QCOMPARE(amx, tandem::kernels::active_variant() == tandem::kernels::CpuVariant::Amx);
    QCOMPARE(box->currentData().toString(),
             amx ? QStringLiteral("int8-rotated") : QStringLiteral("int8"));
    int recommended = 0;
    for (int i = 0; i < box->count(); ++i)
      recommended += box->itemText(i).contains(QLatin1String("(recommended)")) ? 1 : 0;
    QCOMPARE(recommended, 1);
    QVERIFY(box->currentText().contains(QLatin1String("(recommended)")));
    const QString rotated = box->itemText(box->findData(QStringLiteral("int8-rotated")));
    QVERIFY2(rotated.contains(amx ? QLatin1String("this computer's AMX")
                                  : QLatin1String("AMX, which this computer lacks")),
             qPrintable(rotated));
    dialog.setSource(source_);
    QVERIFY(dialog.output().endsWith(QStringLiteral("qwen3-moe-tandem-") +
                                     box->currentData().toString()));
  }

  // The built-in demo lives inside the installation (read-only in an AppImage): its converted
  // copy is suggested in the models folder, not beside it.
  void theDemoConvertsIntoTheModelsFolder() {
    ConversionDialog dialog;
    dialog.setMethod(QStringLiteral("int8"));
    dialog.setSource(QString::fromStdString(tandem::model::demo_model_folder()));
    QCOMPARE(dialog.output(),
             tandem::ui::MainWindow::modelsFolder() + QStringLiteral("/demo-model-tandem-int8"));
  }

  // The fields are checked as they are typed, in the window's words (no command-line flags):
  // Convert stays off until they can be converted, a message about old text goes when it is
  // edited, and the output folder follows the source until it is chosen.
  void fieldsAreCheckedInPlainWords() {
    ConversionDialog dialog;
    dialog.show();
    QVERIFY(!dialog.canStart());
    QVERIFY2(dialog.estimateText().contains(QLatin1String("Choose the folder of the model")),
             qPrintable(dialog.estimateText()));
    QLineEdit* source = nullptr;
    QLineEdit* output = nullptr;
    const auto edits = dialog.findChildren<QLineEdit*>();
    QCOMPARE(edits.size(), 2);
    source = edits[0];
    output = edits[1];
    // The method offered first: this CPU's 8-bit format (recommendsThisCpusEightBitFormat).
    const QString suffix =
        QStringLiteral("-tandem-") + dialog.findChild<QComboBox*>()->currentData().toString();
    QTemporaryDir empty;
    source->setFocus();
    QTest::keyClicks(source, empty.path());
    QTRY_VERIFY(dialog.estimateText().contains(QLatin1String("has no config.json")));
    QVERIFY(!dialog.estimateText().contains(QLatin1String("--")));
    QVERIFY(!dialog.canStart());
    QCOMPARE(output->text(), empty.path() + suffix);  // suggested from the source
    dialog.start();  // refused with the same sentence, nothing started
    QVERIFY(!dialog.isRunning());
    QVERIFY(dialog.statusText().contains(QLatin1String("has no config.json")));
    source->selectAll();
    QTest::keyClicks(source, source_);
    QVERIFY(dialog.statusText().isEmpty());  // the message was about the old text
    QTRY_VERIFY(dialog.canStart());
    QCOMPARE(output->text(), source_ + suffix);
    QVERIFY2(!dialog.estimateText().contains(QLatin1String("about 0 s")),
             qPrintable(dialog.estimateText()));
    output->selectAll();
    QTest::keyClicks(output, source_);
    QTRY_VERIFY(dialog.estimateText().contains(QLatin1String("a folder of its own")));
    QVERIFY(!dialog.canStart());
    output->clear();
    QTest::keyClicks(output, QStringLiteral("x"));
    output->clear();
    emit output->textEdited(QString());
    QTRY_VERIFY(dialog.estimateText().contains(QLatin1String("Choose the folder the converted")));
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

  // A GGUF file converts like a folder: its copy is named after the file, the dialog says
  // whether converting pays on this CPU for the file's formats, and the copy loads.
  void convertsAGgufFile() {
    const QString gguf = QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/qwen3moe-q8_0.gguf");
    QTemporaryDir dir;
    ConversionDialog dialog;
    dialog.show();
    dialog.setMethod(QStringLiteral("int8"));  // whatever this CPU's recommendation
    dialog.setSource(gguf);
    QVERIFY2(dialog.output().endsWith(QLatin1String("/qwen3moe-q8_0-tandem-int8")),
             qPrintable(dialog.output()));
    dialog.setOutput(dir.path() + "/from-gguf");
    QTRY_VERIFY(dialog.canStart());
    QVERIFY2(dialog.adviceText().contains(QLatin1String("Q8_0")), qPrintable(dialog.adviceText()));
    for (QPushButton* b : dialog.findChildren<QPushButton*>()) {
      // Nothing to load before a conversion has finished.
      if (b->text() == QLatin1String("Load Converted Model")) QVERIFY(!b->isVisible());
    }
    if (!qEnvironmentVariableIsEmpty("TANDEM_SCREENSHOT_DIR"))
      dialog.grab().save(qEnvironmentVariable("TANDEM_SCREENSHOT_DIR") + "/conversion-gguf.png");
    QSignalSpy done(&dialog, &ConversionDialog::finished);
    dialog.start();
    QVERIFY(done.wait(30000));
    QCOMPARE(done.first().at(0).toBool(), true);
    QVERIFY(complete(dir.path() + "/from-gguf"));
    QVERIFY(QFile::exists(dir.path() + "/from-gguf/base.gguf"));

    // A folder has no such advice; a GGUF file that is not there is named.
    dialog.setSource(source_);
    QTRY_VERIFY(dialog.canStart());
    QVERIFY(dialog.adviceText().isEmpty());
    dialog.setSource(dir.path() + "/absent.gguf");
    QTRY_VERIFY(dialog.estimateText().contains(QLatin1String("does not exist")));
    QVERIFY(!dialog.canStart());
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
