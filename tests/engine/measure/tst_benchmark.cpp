// `tandem bench`'s measurement loop on the demo model: one measurement per repetition for
// prompt and decode, the warm-up pass reported but never counted, and the roofline figures
// derived from the measured bandwidth. Correctness only: no timing is asserted.
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "engine/measure/benchmark.h"
#include "engine/measure/trace.h"
#include "engine/model/loaded_model.h"

using namespace tandem;

namespace {
const std::string kDemo = std::string(TANDEM_SOURCE_DIR) + "/resources/demo-model";
}

class TestBenchmark : public QObject {
  Q_OBJECT
 private slots:
  void countsRepetitionsAndSkipsWarmup_data() {
    QTest::addColumn<bool>("warmup");
    QTest::newRow("with warm-up") << true;
    QTest::newRow("without") << false;
  }

  void countsRepetitionsAndSkipsWarmup() {
    QFETCH(bool, warmup);
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    const auto model = model::LoadedModel::load(kDemo, load);
    measure::BenchOptions o;
    o.prompt_tokens = 12;
    o.decode_tokens = 5;
    o.repetitions = 3;
    o.warmup = warmup;
    backend::NumaPools pool(2, model->pools());
    forward::ModelRunner runner(*model, pool);
    std::vector<std::string> lines;
    const measure::BenchResult r =
        measure::run_benchmark(runner, pool, o, [&](const std::string& l) { lines.push_back(l); });
    QCOMPARE(r.prompt.tokens_per_s.size(), std::size_t(3));
    QCOMPARE(r.decode.tokens_per_s.size(), std::size_t(3));
    for (double v : r.prompt.tokens_per_s) QVERIFY(v > 0);
    for (double v : r.decode.tokens_per_s) QVERIFY(v > 0);
    const auto warm = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("warm-up") != std::string::npos;
    });
    QCOMPARE(warm, warmup ? 2 : 0);  // one prompt line and one decode line
    QCOMPARE(lines.size(), std::size_t(warmup ? 8 : 6));
    QVERIFY(r.read_bandwidth_bytes_per_s > 0);
    QCOMPARE(r.active_bytes_per_token, model->active_weight_bytes_per_token());
    QVERIFY(qFuzzyCompare(r.roofline_tokens_per_s(),
                          r.read_bandwidth_bytes_per_s / double(r.active_bytes_per_token)));
    QVERIFY(qFuzzyCompare(r.roofline_fraction(), r.decode.mean() / r.roofline_tokens_per_s()));
  }

  // -d: every test starts from a cache holding `depth` tokens, filled anew (uncounted) before
  // each; the prompt test runs only its own tokens on top of them. Every token the model
  // ran is counted by its metrics: per repetition the depth twice, the prompt and the decode.
  void depthIsFilledBeforeEachTest() {
    const auto model = model::LoadedModel::load(kDemo);
    measure::BenchOptions o;
    o.prompt_tokens = 12;
    o.decode_tokens = 5;
    o.depth_tokens = 16;
    o.repetitions = 2;
    o.warmup = false;
    backend::NumaPools pool(2, model->pools());
    forward::ModelRunner runner(*model, pool);
    std::vector<std::string> lines;
    const measure::BenchResult r =
        measure::run_benchmark(runner, pool, o, [&](const std::string& l) { lines.push_back(l); });
    QCOMPARE(r.prompt.tokens_per_s.size(), std::size_t(2));
    QCOMPARE(r.decode.tokens_per_s.size(), std::size_t(2));
    QCOMPARE(runner.metrics()->snapshot().tokens, std::uint64_t(2 * (16 + 12 + 16 + 5)));
    QVERIFY2(lines.front().find("pp12 @ d16 run 1") != std::string::npos, lines.front().c_str());
    QVERIFY2(lines.back().find("tg5 @ d16 run 2") != std::string::npos, lines.back().c_str());
  }

  // --trace: a Chrome trace of the counted runs, with the engine thread's operations and
  // every worker's share of the loops under the operation's name; nothing of the warm-up.
  void traceShowsEveryThread() {
    const auto model = model::LoadedModel::load(kDemo);
    measure::BenchOptions o;
    o.prompt_tokens = 40;
    o.decode_tokens = 3;
    o.repetitions = 1;
    o.trace = true;
    backend::NumaPools pool(2, model->pools(), /*pin=*/false);
    forward::ModelRunner runner(*model, pool);
    measure::run_benchmark(runner, pool, o);
    QVERIFY(!trace::enabled());
    QTemporaryDir dir;
    const std::string path = dir.filePath("trace.json").toStdString();
    std::string error;
    QVERIFY2(trace::write_chrome_json(path, &error), error.c_str());
    std::ifstream in(path);
    const auto json = nlohmann::json::parse(in);
    std::map<int, std::string> thread_names;
    std::map<int, std::set<std::string>> spans;
    double first = 1e300;
    for (const auto& e : json["traceEvents"]) {
      const int tid = e["tid"].get<int>();
      if (e["ph"] == "M") {
        thread_names[tid] = e["args"]["name"].get<std::string>();
        continue;
      }
      QCOMPARE(e["ph"].get<std::string>(), std::string("X"));
      QVERIFY(e["dur"].get<double>() >= 0);
      first = std::min(first, e["ts"].get<double>());
      spans[tid].insert(e["name"].get<std::string>());
    }
    QVERIFY(first >= 0);  // nothing from before the counted runs began
    int engine = -1, worker = -1;
    for (const auto& [tid, name] : thread_names) {
      if (name == "engine") engine = tid;
      if (name.rfind("worker ", 0) == 0) worker = tid;
    }
    QVERIFY2(engine > 0 && worker > 0, json.dump().substr(0, 400).c_str());
    for (const char* op : {"attention", "matmul", "rms_norm", "cpu_experts"})
      QVERIFY2(spans[engine].count(op) == 1, op);
    // The worker's share of the loops, under the operations that started them.
    QVERIFY(spans[worker].count("attention") == 1);
    QVERIFY(spans[worker].count("cpu_experts") == 1);
    QVERIFY(trace::event_count() > 0);
    // The worker's busy share: the union of its spans over the whole recording's time,
    // computed here again from the written trace.
    std::vector<std::pair<double, double>> intervals;
    double end = 0;
    for (const auto& e : json["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
      end = std::max(end, b + d);
      if (e["tid"].get<int>() == worker) intervals.emplace_back(b, b + d);
    }
    std::sort(intervals.begin(), intervals.end());
    double inside = 0, from = intervals.front().first, to = intervals.front().second;
    for (const auto& [b, e] : intervals) {
      if (b > to) {
        inside += to - from;
        from = b;
      }
      to = std::max(to, e);
    }
    inside += to - from;
    const double expected = inside / (end - first);
    bool found = false;
    for (const trace::ThreadShare& t : trace::busy_shares()) {
      if (t.name != thread_names[worker]) continue;
      found = true;
      QVERIFY2(std::abs(t.busy - expected) < 1e-3,
               qPrintable(QStringLiteral("%1 vs %2").arg(t.busy).arg(expected)));
      QVERIFY(t.busy > 0 && t.busy <= 1);
    }
    QVERIFY(found);
  }
};

QTEST_GUILESS_MAIN(TestBenchmark)
#include "tst_benchmark.moc"
