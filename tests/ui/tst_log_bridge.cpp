// One logging path: engine records reach Qt's log, Qt's messages reach the engine's log file.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/log/log.h"
#include "ui/log_bridge.h"

namespace {
QStringList g_seen;
QtMessageHandler g_outer = nullptr;
void capture(QtMsgType, const QMessageLogContext& context, const QString& text) {
  g_seen << QStringLiteral("%1|%2").arg(QString::fromLatin1(context.category), text);
}
}  // namespace

class TestLogBridge : public QObject {
  Q_OBJECT
 private slots:
  void engineRecordsReachQtAndQtReachesTheFile() {
    QTemporaryDir dir;
    const QString file = dir.filePath(QStringLiteral("logs/tandem.log"));
    tandem::log::init({file.toStdString(), false, false});
    QCOMPARE(QString::fromStdString(tandem::log::file_path()), file);

    g_outer = qInstallMessageHandler(capture);
    tandem::ui::install_log_bridge();
    tandem::log::info("engine says {}", 42);
    qWarning("qt says hello");
    tandem::ui::remove_log_bridge();
    qInstallMessageHandler(g_outer);
    tandem::log::logger().flush();

    QVERIFY2(g_seen.contains(QLatin1String("tandem.engine|engine says 42")),
             qPrintable(g_seen.join('\n')));
    // The Qt message went to Qt's previous handler once, not back through the engine.
    QCOMPARE(g_seen.filter(QLatin1String("qt says hello")).size(), 1);

    QFile log(file);
    QVERIFY(log.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(log.readAll());
    QVERIFY(text.contains(QLatin1String("engine says 42")));
    QVERIFY(text.contains(QLatin1String("qt says hello")));
    QCOMPARE(text.count(QLatin1String("engine says 42")), 1);
  }

  void unwritableLogFileIsReportedNotFatal() {
    tandem::log::init({"/proc/no-such-dir/tandem.log", false, false});
    QVERIFY(tandem::log::file_path().empty());
    tandem::log::info("still logging");
  }
};

QTEST_MAIN(TestLogBridge)
#include "tst_log_bridge.moc"
