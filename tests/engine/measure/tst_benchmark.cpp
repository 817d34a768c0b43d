// `tandem bench`'s measurement loop on the demo model: one measurement per repetition for
// prompt and decode, the warm-up pass reported but never counted, and the roofline figures
// derived from the measured bandwidth. Correctness only: no timing is asserted.
#include <QtTest>

#include "engine/measure/benchmark.h"
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
};

QTEST_GUILESS_MAIN(TestBenchmark)
#include "tst_benchmark.moc"
