// The four placement strategies as the seeds define them, and the sizing of N that the
// planner and the hybrid engine share.
#include <QtTest>

#include "engine/schedule/expert_placement.h"
#include "engine/schedule/hybrid_options.h"

using namespace tandem::schedule;

namespace {

// 4 layers, the first dense (DeepSeek's first_k_dense_replace), 6 experts each.
const std::vector<bool> kLayers = {false, true, true, true};

std::vector<int> per_layer(const ExpertPlacement& p) {
  std::vector<int> out;
  for (std::size_t l = 0; l < p.resident.size(); ++l)
    out.push_back(static_cast<int>(p.count(static_cast<std::int64_t>(l))));
  return out;
}

}  // namespace

class TestExpertPlacement : public QObject {
  Q_OBJECT
 private slots:
  void namesRoundTrip() {
    for (PlacementStrategy s : {PlacementStrategy::Uniform, PlacementStrategy::Frequency,
                                PlacementStrategy::FrontLoading, PlacementStrategy::Random}) {
      PlacementStrategy back = PlacementStrategy::Uniform;
      QVERIFY(parse_strategy(strategy_name(s), back));
      QCOMPARE(back, s);
    }
    PlacementStrategy s;
    QVERIFY(!parse_strategy("hottest", s));
    QVERIFY(strategy_names().find("front-loading") != std::string::npos);
  }

  void uniformTakesTheLowestIdsOfEveryLayer() {
    const ExpertPlacement p = place_experts(PlacementStrategy::Uniform, kLayers, 6, 2, nullptr, 0);
    QCOMPARE(per_layer(p), (std::vector<int>{0, 2, 2, 2}));
    QVERIFY(p.resident[0].empty());  // a dense layer has no experts to place
    for (int l = 1; l < 4; ++l) {
      QVERIFY(p.on_device(l, 0) && p.on_device(l, 1) && !p.on_device(l, 2));
    }
    QCOMPARE(p.count(), std::int64_t{6});
  }

  void frontLoadingFillsTheFirstLayers() {
    const ExpertPlacement p =
        place_experts(PlacementStrategy::FrontLoading, kLayers, 6, 3, nullptr, 0);
    QCOMPARE(per_layer(p), (std::vector<int>{0, 6, 3, 0}));  // 9 = 3 x 3 MoE layers
  }

  void randomIsSeededAndSpansLayers() {
    const ExpertPlacement a = place_experts(PlacementStrategy::Random, kLayers, 6, 2, nullptr, 7);
    const ExpertPlacement b = place_experts(PlacementStrategy::Random, kLayers, 6, 2, nullptr, 7);
    const ExpertPlacement c = place_experts(PlacementStrategy::Random, kLayers, 6, 2, nullptr, 8);
    QCOMPARE(a.resident, b.resident);
    QVERIFY(a.resident != c.resident);
    QCOMPARE(a.count(), std::int64_t{6});
  }

  void frequencyTakesTheMostRouted() {
    RoutingStatistics s;
    s.layers = 4;
    s.experts = 6;
    s.counts = {{0, 0, 0, 0, 0, 0}, {5, 1, 90, 0, 3, 2}, {7, 7, 7, 7, 7, 7}, {0, 80, 0, 60, 1, 0}};
    const ExpertPlacement p = place_experts(PlacementStrategy::Frequency, kLayers, 6, 1, &s, 0);
    // The three hottest cells anywhere: (1, 2) 90, (3, 1) 80, (3, 3) 60.
    QCOMPARE(per_layer(p), (std::vector<int>{0, 1, 0, 2}));
    QVERIFY(p.on_device(1, 2) && p.on_device(3, 1) && p.on_device(3, 3));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, place_experts(PlacementStrategy::Frequency,
                                                                  kLayers, 6, 1, nullptr, 0));
  }

  void countsAreClamped() {
    QCOMPARE(place_experts(PlacementStrategy::Uniform, kLayers, 6, 99, nullptr, 0).count(),
             std::int64_t{18});
    QCOMPARE(place_experts(PlacementStrategy::Random, kLayers, 6, 0, nullptr, 0).count(),
             std::int64_t{0});
  }

  void expertsThatFit() {
    // 10 experts of 100 bytes in 3 layers.
    QCOMPARE(experts_that_fit(2999, 100, 10, 3, false, PlacementStrategy::Uniform),
             std::int64_t{9});
    QCOMPARE(experts_that_fit(3000, 100, 10, 3, false, PlacementStrategy::Uniform),
             std::int64_t{10});
    QCOMPARE(experts_that_fit(299, 100, 10, 3, false, PlacementStrategy::Uniform), std::int64_t{0});
    // Layerwise staging of two layers of the others: N*300 + 2*(10-N)*100 <= free.
    QCOMPARE(experts_that_fit(2000, 100, 10, 3, true, PlacementStrategy::Uniform), std::int64_t{0});
    QCOMPARE(experts_that_fit(2100, 100, 10, 3, true, PlacementStrategy::Uniform), std::int64_t{1});
    // A strategy that may leave a layer empty stages every expert of it.
    QCOMPARE(experts_that_fit(2100, 100, 10, 3, true, PlacementStrategy::FrontLoading),
             std::int64_t{0});
    QCOMPARE(experts_that_fit(2300, 100, 10, 3, true, PlacementStrategy::FrontLoading),
             std::int64_t{1});
    QCOMPARE(staging_bytes(100, 10, 4, PlacementStrategy::Uniform), std::uint64_t{1200});
    QCOMPARE(experts_that_fit(10, 100, 0, 3, false, PlacementStrategy::Uniform), std::int64_t{0});
  }
};

QTEST_GUILESS_MAIN(TestExpertPlacement)
#include "tst_expert_placement.moc"
