// What the commands print while a model loads: a line per stage redrawn in place on a
// terminal; in a pipe, a line as each stage starts, its percent every few seconds, and a line
// as it ends.
#include <QtTest>
#include <chrono>
#include <cstdio>

#include "app/load_progress_printer.h"
#include "tests/support/memory_file.h"

using tandem::app::LoadProgressPrinter;
using tandem::model::LoadProgress;
using namespace std::chrono_literals;

namespace {

// Runs the printer into memory and returns what it wrote.
template <typename Fn>
QString capture(bool terminal, Fn&& fn) {
  return tandem::test::written_to_memory([&](std::FILE* out) {
    LoadProgressPrinter printer(out, terminal);
    fn(printer);
  });
}

const LoadProgressPrinter::Clock::time_point t0{};

}  // namespace

class TestLoadProgress : public QObject {
  Q_OBJECT
 private slots:
  void pipeGetsAFewWholeLines() {
    const QString text = capture(false, [](LoadProgressPrinter& p) {
      p.update({"packing the weights", 0, 200}, t0);
      p.update({"packing the weights", 2, 200}, t0 + 1s);  // too soon for a line
      p.update({"packing the weights", 50, 200}, t0 + 10s);
      p.update({"packing the weights", 52, 200}, t0 + 11s);  // too soon again
      p.update({"packing the weights", 200, 200}, t0 + 40s);
      p.update({"splitting the experts", 0, 8}, t0 + 40s);
      p.update({"splitting the experts", 8, 8}, t0 + 41s);
      p.finish();  // nothing is open: nothing more
    });
    QCOMPARE(text, QStringLiteral("loading: packing the weights\n"
                                  "loading: packing the weights  25% (50 of 200, 30s left)\n"
                                  "loading: packing the weights 100% (40s)\n"
                                  "loading: splitting the experts\n"
                                  "loading: splitting the experts 100% (1s)\n"));
  }

  void terminalRedrawsOneLinePerStage() {
    const QString text = capture(true, [](LoadProgressPrinter& p) {
      p.update({"reading the weights", 0, 4}, t0);
      p.update({"reading the weights", 1, 4}, t0 + 500ms);  // under a second: no time left yet
      p.update({"reading the weights", 2, 4}, t0 + 2s);
      p.update({"reading the weights", 4, 4}, t0 + 4s);
    });
    QCOMPARE(text, QStringLiteral("\r\x1b[Kloading: reading the weights   0% (0 of 4)"
                                  "\r\x1b[Kloading: reading the weights  25% (1 of 4)"
                                  "\r\x1b[Kloading: reading the weights  50% (2 of 4, 2s left)"
                                  "\r\x1b[Kloading: reading the weights 100% (4s)\n"));
  }

  // A load that fails part way leaves its line ended, so the error starts a line of its own.
  void anUnfinishedStageIsEnded() {
    const QString failed = capture(true, [](LoadProgressPrinter& p) {
      p.update({"packing the weights", 3, 10}, t0);
      p.finish();
      p.finish();
    });
    QCOMPARE(failed, QStringLiteral("\r\x1b[Kloading: packing the weights  30% (3 of 10)\n"));
    const QString next = capture(true, [](LoadProgressPrinter& p) {
      p.update({"packing the weights", 3, 10}, t0);
      p.update({"splitting the experts", 0, 2}, t0);
    });
    QCOMPARE(next, QStringLiteral("\r\x1b[Kloading: packing the weights  30% (3 of 10)\n"
                                  "\r\x1b[Kloading: splitting the experts   0% (0 of 2)"));
  }

  // A stage with nothing to do is reported done at once.
  void anEmptyStageIsDone() {
    const QString text = capture(false, [](LoadProgressPrinter& p) {
      p.update({"reading the weights", 0, 0}, t0);
    });
    QCOMPARE(text, QStringLiteral("loading: reading the weights 100% (0s)\n"));
  }
};

QTEST_APPLESS_MAIN(TestLoadProgress)
#include "tst_load_progress.moc"
