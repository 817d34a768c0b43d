// Secrets in the desktop's keyring: a private D-Bus session with a real GNOME Keyring
// (unlocked with a test password) stands in for the user's desktop. The Hub token goes to
// the keyring and not to a file, reads back, is seen by another Secret Service client
// (secret-tool), moves there from a file an earlier run kept, and is removed when cleared;
// without a session bus the 0600 file is used.
#include <sys/stat.h>

#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include "ui/keyring.h"
#include "ui/secret_store.h"

namespace secrets = tandem::ui::secrets;

class TestKeyring : public QObject {
  Q_OBJECT

  QTemporaryDir home_;
  QProcess bus_, keyring_;
  QByteArray address_;

  // What secret-tool, another client of the same service, finds under `name`.
  QString lookup_elsewhere(const QString& name) {
    QProcess p;
    p.start(QStringLiteral("secret-tool"), {"lookup", "name", name});
    if (!p.waitForFinished(10000)) return QStringLiteral("(secret-tool hung)");
    return QString::fromUtf8(p.readAllStandardOutput()).trimmed();
  }

 private slots:
  void initTestCase() {
    QVERIFY(home_.isValid());
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName(QStringLiteral("TandemTest"));
    QCoreApplication::setApplicationName(QStringLiteral("TandemKeyringTest"));
    const QByteArray home = home_.path().toUtf8();
    qputenv("HOME", home);
    qputenv("XDG_DATA_HOME", home + "/share");
    qputenv("XDG_RUNTIME_DIR", home + "/run");
    QVERIFY(QDir().mkpath(home_.path() + "/run"));
    ::chmod((home + "/run").constData(), 0700);
    // A session bus of our own that starts nothing by itself (no service folders), so the
    // only Secret Service on it is the one started below.
    QFile config(home_.path() + "/bus.conf");
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(
        "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\" "
        "\"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
        "<busconfig><type>session</type><listen>unix:dir=" +
        home +
        "</listen><auth>EXTERNAL</auth><policy context=\"default\"><allow send_destination=\"*\" "
        "eavesdrop=\"true\"/><allow eavesdrop=\"true\"/><allow own=\"*\"/></policy></busconfig>\n");
    config.close();
    bus_.start(QStringLiteral("dbus-daemon"),
               {"--config-file=" + config.fileName(), "--nofork", "--print-address=1"});
    QVERIFY2(bus_.waitForStarted(10000), "dbus-daemon did not start");
    QTRY_VERIFY_WITH_TIMEOUT(bus_.canReadLine(), 10000);
    address_ = bus_.readLine().trimmed();
    qputenv("DBUS_SESSION_BUS_ADDRESS", address_);
    keyring_.start(QStringLiteral("gnome-keyring-daemon"),
                   {"--foreground", "--unlock", "--components=secrets"});
    QVERIFY2(keyring_.waitForStarted(10000), "gnome-keyring-daemon did not start");
    keyring_.write("test-password");
    keyring_.closeWriteChannel();
    QTRY_VERIFY_WITH_TIMEOUT(tandem::ui::keyring::available(), 15000);
  }

  void cleanupTestCase() {
    keyring_.kill();
    keyring_.waitForFinished(5000);
    bus_.kill();
    bus_.waitForFinished(5000);
  }

  void keptInTheKeyringNotInAFile() {
    QVERIFY(secrets::in_keyring());
    QVERIFY(secrets::write(QStringLiteral("hub-token"), QStringLiteral("hf_inKeyring1")));
    QVERIFY(!QFileInfo::exists(secrets::path(QStringLiteral("hub-token"))));
    QCOMPARE(secrets::read(QStringLiteral("hub-token")), QStringLiteral("hf_inKeyring1"));
    QCOMPARE(lookup_elsewhere(QStringLiteral("hub-token")), QStringLiteral("hf_inKeyring1"));
    // Replaced, not added beside the old one.
    QVERIFY(secrets::write(QStringLiteral("hub-token"), QStringLiteral("hf_inKeyring2")));
    QCOMPARE(lookup_elsewhere(QStringLiteral("hub-token")), QStringLiteral("hf_inKeyring2"));
  }

  void aFileFromBeforeMovesIntoTheKeyring() {
    QVERIFY(secrets::write(QStringLiteral("server-api-key"), {}));
    const QString file = secrets::path(QStringLiteral("server-api-key"));
    QVERIFY(QDir().mkpath(QFileInfo(file).absolutePath()));
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("k3y-from-a-file\n");
    f.close();
    QCOMPARE(secrets::read(QStringLiteral("server-api-key")), QStringLiteral("k3y-from-a-file"));
    QVERIFY(!QFileInfo::exists(file));
    QCOMPARE(lookup_elsewhere(QStringLiteral("server-api-key")), QStringLiteral("k3y-from-a-file"));
  }

  void clearedIsGone() {
    QVERIFY(secrets::write(QStringLiteral("hub-token"), QStringLiteral("hf_short")));
    QVERIFY(secrets::write(QStringLiteral("hub-token"), {}));
    QCOMPARE(secrets::read(QStringLiteral("hub-token")), QString());
    QCOMPARE(lookup_elsewhere(QStringLiteral("hub-token")), QString());
  }

  // No session bus (a console login, a container): the file, readable by the user only.
  void withoutASessionBusAFile() {
    qunsetenv("DBUS_SESSION_BUS_ADDRESS");
    const QByteArray runtime = qgetenv("XDG_RUNTIME_DIR");
    qunsetenv("XDG_RUNTIME_DIR");
    QVERIFY(!secrets::in_keyring());
    QVERIFY(secrets::write(QStringLiteral("hub-token"), QStringLiteral("hf_inAFile")));
    const QFileInfo info(secrets::path(QStringLiteral("hub-token")));
    QVERIFY(info.exists());
    QCOMPARE(info.permissions() & (QFileDevice::ReadGroup | QFileDevice::ReadOther),
             QFileDevice::Permissions());
    QCOMPARE(secrets::read(QStringLiteral("hub-token")), QStringLiteral("hf_inAFile"));
    qputenv("DBUS_SESSION_BUS_ADDRESS", address_);
    qputenv("XDG_RUNTIME_DIR", runtime);
    QCOMPARE(lookup_elsewhere(QStringLiteral("hub-token")), QString());  // never sent there
    QVERIFY(secrets::write(QStringLiteral("hub-token"), {}));
  }
};

QTEST_GUILESS_MAIN(TestKeyring)
#include "tst_keyring.moc"
