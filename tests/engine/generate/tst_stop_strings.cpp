#include <QtTest>

#include "engine/generate/stop_strings.h"

using tandem::generate::StopStringFilter;

class TestStopStrings : public QObject {
  Q_OBJECT
 private slots:
  void holdsBackPossiblePrefixes() {
    StopStringFilter f({"</s>", "\n\nUser:"});
    QCOMPARE(f.push("Hello <"), std::string("Hello "));
    QCOMPARE(f.push("b>"), std::string("<b>"));  // not a stop after all: released
    QCOMPARE(f.push(" done\n"), std::string(" done"));
    QCOMPARE(f.push("\nUs"), std::string());
    QCOMPARE(f.push("er: hi"), std::string());
    QVERIFY(f.stopped());
    QCOMPARE(f.push("more"), std::string());
    QCOMPARE(f.finish(), std::string());
  }

  void stopInsideOnePiece() {
    StopStringFilter f({"STOP"});
    QCOMPARE(f.push("abcSTOPdef"), std::string("abc"));
    QVERIFY(f.stopped());
  }

  void finishReleasesTheTail() {
    StopStringFilter f({"###"});
    QCOMPARE(f.push("x #"), std::string("x "));
    QVERIFY(!f.stopped());
    QCOMPARE(f.finish(), std::string("#"));
  }

  void noStopsPassesEverything() {
    StopStringFilter f({});
    QCOMPARE(f.push("anything"), std::string("anything"));
    StopStringFilter empty({""});
    QCOMPARE(empty.push("x"), std::string("x"));
  }
};

QTEST_GUILESS_MAIN(TestStopStrings)
#include "tst_stop_strings.moc"
