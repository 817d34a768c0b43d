#include <QtTest>
#include <limits>
#include <set>
#include <stdexcept>

#include "engine/generate/sampler.h"

using namespace tandem::generate;

class TestSampler : public QObject {
  Q_OBJECT
 private slots:
  void greedyTakesTheLargest() {
    Sampler s(SamplingParams::greedy());
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
    QCOMPARE(s.sample(logits, {}), 1);
  }

  void repetitionPenaltyDemotesSeenTokens() {
    SamplingParams p = SamplingParams::greedy();
    p.repetition_penalty = 1.5f;
    Sampler s(p);
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
    const std::vector<std::int32_t> history = {1};
    QCOMPARE(s.sample(logits, history), 3);  // 2.0 / 1.5 < 1.9
  }

  // A setting outside its range is refused with a sentence naming it: a penalty of 0 would
  // divide the seen tokens' logits by zero and make them certain, a negative top-k or a NaN
  // would sample from another distribution than the one asked for.
  void settingsOutsideTheirRangesAreRefused_data() {
    QTest::addColumn<int>("field");
    QTest::addColumn<float>("value");
    QTest::addColumn<QString>("named");
    const float nan = std::numeric_limits<float>::quiet_NaN();
    QTest::newRow("temperature below 0") << 0 << -0.5f << "temperature";
    QTest::newRow("temperature past 2") << 0 << 2.5f << "temperature";
    QTest::newRow("temperature NaN") << 0 << nan << "temperature";
    QTest::newRow("top-k below 0") << 1 << -3.0f << "top-k";
    QTest::newRow("top-p past 1") << 2 << 1.5f << "top-p";
    QTest::newRow("min-p below 0") << 3 << -0.1f << "min-p";
    QTest::newRow("min-p NaN") << 3 << nan << "min-p";
    QTest::newRow("penalty 0") << 4 << 0.0f << "repetition penalty";
    QTest::newRow("penalty past 10") << 4 << 11.0f << "repetition penalty";
  }
  void settingsOutsideTheirRangesAreRefused() {
    QFETCH(int, field);
    QFETCH(float, value);
    QFETCH(QString, named);
    SamplingParams p;
    QVERIFY(sampling_problem(p).empty());
    switch (field) {
      case 0:
        p.temperature = value;
        break;
      case 1:
        p.top_k = static_cast<std::int32_t>(value);
        break;
      case 2:
        p.top_p = value;
        break;
      case 3:
        p.min_p = value;
        break;
      default:
        p.repetition_penalty = value;
        break;
    }
    const QString problem = QString::fromStdString(sampling_problem(p));
    QVERIFY2(problem.startsWith(QStringLiteral("The ") + named + QStringLiteral(" must be")),
             qPrintable(problem));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, Sampler{p});
  }

  void theRangesEndsAreTaken() {
    SamplingParams p;
    p.temperature = kMaxTemperature;
    p.top_k = 0;
    p.top_p = 0.0f;
    p.min_p = 1.0f;
    p.repetition_penalty = kMaxRepetitionPenalty;
    QCOMPARE(sampling_problem(p), std::string());
    p.temperature = 0.0f;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 0.01f;
    QCOMPARE(sampling_problem(p), std::string());
  }

  void sameSeedSameTokens() {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 42;
    std::vector<float> logits(50);
    for (int i = 0; i < 50; ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
    Sampler a(p), b(p);
    std::vector<std::int32_t> ta, tb;
    for (int i = 0; i < 64; ++i) {
      ta.push_back(a.sample(logits, {}));
      tb.push_back(b.sample(logits, {}));
    }
    QCOMPARE(ta, tb);
    QVERIFY(std::set<std::int32_t>(ta.begin(), ta.end()).size() > 5);  // it really samples
    p.seed = 43;
    Sampler c(p);
    std::vector<std::int32_t> tc;
    for (int i = 0; i < 64; ++i) tc.push_back(c.sample(logits, {}));
    QVERIFY(tc != ta);
  }

  void filtersRestrictTheCandidates_data() {
    QTest::addColumn<int>("topK");
    QTest::addColumn<float>("topP");
    QTest::addColumn<float>("minP");
    QTest::addColumn<QList<int>>("allowed");
    // probabilities at temperature 1: about 0.64, 0.24, 0.09, 0.03
    QTest::newRow("top-k 2") << 2 << 1.0f << 0.0f << QList<int>{0, 1};
    QTest::newRow("top-p 0.7") << 0 << 0.7f << 0.0f << QList<int>{0, 1};
    QTest::newRow("top-p 0.5") << 0 << 0.5f << 0.0f << QList<int>{0};
    QTest::newRow("min-p 0.1") << 0 << 1.0f << 0.1f << QList<int>{0, 1, 2};
    QTest::newRow("min-p 0.3") << 0 << 1.0f << 0.3f << QList<int>{0, 1};
  }

  void filtersRestrictTheCandidates() {
    QFETCH(int, topK);
    QFETCH(float, topP);
    QFETCH(float, minP);
    QFETCH(QList<int>, allowed);
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = topK;
    p.top_p = topP;
    p.min_p = minP;
    p.seed = 7;
    Sampler s(p);
    const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
    std::set<int> seen;
    for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits, {}));
    QCOMPARE(QList<int>(seen.begin(), seen.end()), allowed);
  }
};

QTEST_GUILESS_MAIN(TestSampler)
#include "tst_sampler.moc"
