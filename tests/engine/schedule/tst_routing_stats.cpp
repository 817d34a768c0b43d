// The expert statistics file that --record-expert-stats writes and the frequency placement
// reads: a round trip, accumulation across runs, and a sentence for every bad file.
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

#include "engine/model/model_spec.h"
#include "engine/schedule/routing_stats.h"

using namespace tandem;
using schedule::RoutingStatistics;

namespace {

model::ModelSpec spec(std::int64_t layers, std::int64_t experts) {
  model::ModelSpec s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.num_layers = layers;
  s.num_experts = experts;
  s.experts_per_token = 2;
  return s;
}

void write(const QString& path, const std::string& text) {
  std::ofstream(path.toStdString()) << text;
}

}  // namespace

class TestRoutingStats : public QObject {
  Q_OBJECT
 private slots:
  void recordsAndAccumulates() {
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/stats.json").toStdString();
    const model::ModelSpec s = spec(2, 3);
    schedule::record_routing_statistics(path, s, {1, 2, 3, 4, 5, 6}, 10);
    schedule::record_routing_statistics(path, s, {10, 0, 0, 0, 0, 1}, 4);
    const RoutingStatistics r = schedule::read_routing_statistics(path);
    QCOMPARE(r.tokens, std::uint64_t{14});
    QCOMPARE(r.counts, (std::vector<std::vector<std::uint64_t>>{{11, 2, 3}, {4, 5, 7}}));
    QCOMPARE(r.architecture, std::string("Qwen3MoeForCausalLM"));
    QVERIFY(r.mismatch(s).empty());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path + ".part")));
    // Another model's file is not added to.
    try {
      schedule::record_routing_statistics(path, spec(2, 4), {0, 0, 0, 0, 0, 0, 0, 0}, 1);
      QFAIL("statistics of another model were added to");
    } catch (const std::runtime_error& e) {
      QVERIFY2(std::string(e.what()).find("another model") != std::string::npos, e.what());
    }
  }

  void badFilesHaveSentences_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("words");
    QTest::newRow("not json") << "{nope"
                              << "not valid JSON";
    QTest::newRow("other format") << R"({"format": "x"})"
                                  << "tandem-expert-stats";
    QTest::newRow("version") << R"({"format": "tandem-expert-stats", "version": 9})"
                             << "version";
    QTest::newRow("missing field")
        << R"({"format": "tandem-expert-stats", "version": 1, "model": {"layers": 1}})"
        << "missing";
    QTest::newRow("short row")
        << R"({"format": "tandem-expert-stats", "version": 1, "model": {"layers": 1, "experts": 3}, "tokens": 1, "counts": [[1, 2]]})"
        << "one count per expert";
  }
  void badFilesHaveSentences() {
    QFETCH(QString, text);
    QFETCH(QString, words);
    QTemporaryDir dir;
    const QString path = dir.path() + "/bad.json";
    write(path, text.toStdString());
    try {
      schedule::read_routing_statistics(path.toStdString());
      QFAIL("a bad file was read");
    } catch (const std::runtime_error& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains(words), e.what());
      QVERIFY2(QString::fromUtf8(e.what()).contains(path), e.what());
    }
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, schedule::read_routing_statistics(
                                                     (dir.path() + "/none").toStdString()));
  }
};

QTEST_GUILESS_MAIN(TestRoutingStats)
#include "tst_routing_stats.moc"
