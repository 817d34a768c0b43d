// What `tandem download` prints: bars redrawn in place on a terminal, plain lines in a pipe.
#include <QtTest>
#include <cstdio>

#include "app/download_progress_printer.h"
#include "tests/support/memory_file.h"

using tandem::app::DownloadProgressPrinter;
using tandem::hub::DownloadProgress;
using tandem::hub::FileProgress;
using tandem::hub::FileState;

namespace {

DownloadProgress progress(FileState first, std::uint64_t first_done, FileState second) {
  DownloadProgress p;
  FileProgress a;
  a.path = "model-00001-of-00002.safetensors";
  a.size = 4u << 20;
  a.bytes_done = first_done;
  a.state = first;
  a.bytes_per_s = 1 << 20;
  FileProgress b;
  b.path = "config.json";
  b.size = 1000;
  b.bytes_done = second == FileState::Done ? 1000 : 0;
  b.state = second;
  if (second == FileState::Failed) b.error = "config.json was not accepted: its git blob id is x";
  p.files = {a, b};
  p.bytes_total = a.size + b.size;
  p.bytes_done = a.bytes_done + b.bytes_done;
  p.bytes_per_s = 1 << 20;
  p.eta_s = 75;
  return p;
}

// Runs the printer into memory and returns what it wrote.
template <typename Fn>
QString capture(bool terminal, Fn&& fn) {
  return tandem::test::written_to_memory([&](std::FILE* out) {
    DownloadProgressPrinter printer(out, terminal);
    fn(printer);
  });
}

}  // namespace

class TestDownloadProgress : public QObject {
  Q_OBJECT
 private slots:
  void durations() {
    QCOMPARE(tandem::app::format_duration(0), std::string("0s"));
    QCOMPARE(tandem::app::format_duration(59.6), std::string("1m00s"));
    QCOMPARE(tandem::app::format_duration(185), std::string("3m05s"));
    QCOMPARE(tandem::app::format_duration(3720), std::string("1h02m"));
  }

  void terminalRedrawsBarsInPlace() {
    const QString text = capture(true, [](DownloadProgressPrinter& printer) {
      printer.update(progress(FileState::Downloading, 1u << 20, FileState::Queued));
      printer.update(progress(FileState::Downloading, 3u << 20, FileState::Done));
      printer.finish(progress(FileState::Done, 4u << 20, FileState::Done));
    });
    // The second drawing moves up over the first (one file line and the total line).
    QVERIFY2(text.contains(QLatin1String("\x1b[2A\x1b[J")), qPrintable(text));
    QVERIFY(text.contains(QLatin1String("[====")));
    QVERIFY(text.contains(QLatin1String(" 25% ")));
    QVERIFY(text.contains(QLatin1String("1.0 MiB/s")));
    QVERIFY(text.contains(QLatin1String("ETA 1m15s")));
    // A finished file is announced once, above the live block.
    QCOMPARE(text.count(QLatin1String("done     config.json")), 1);
    QCOMPARE(text.count(QLatin1String("done     model-00001-of-00002.safetensors")), 1);
    QVERIFY(text.contains(QLatin1String("total (2/2 files)")));
  }

  void pipeGetsPlainLines() {
    const QString text = capture(false, [](DownloadProgressPrinter& printer) {
      printer.update(progress(FileState::Downloading, 1u << 20, FileState::Queued));
      printer.finish(progress(FileState::Downloading, 2u << 20, FileState::Failed));
    });
    QVERIFY2(!text.contains(QLatin1Char('\x1b')), qPrintable(text));
    QVERIFY(text.contains(
        QLatin1String("start model-00001-of-00002.safetensors (1.0 MiB of 4.0 MiB already here)")));
    QVERIFY(text.contains(QLatin1String("failed config.json: config.json was not accepted")));
    QVERIFY(text.contains(QLatin1String("progress 50% 2.0 MiB of 4.0 MiB, 1.0 MiB/s, ETA 1m15s")));
  }
};

QTEST_GUILESS_MAIN(TestDownloadProgress)
#include "tst_download_progress.moc"
