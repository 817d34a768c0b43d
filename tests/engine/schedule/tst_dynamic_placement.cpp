// The dynamic expert update: a histogram that forgets, moves that only swap a layer's clearly
// hotter outsider for its coldest resident, within a byte budget, and moves that run on the
// copy queue: the step that starts one returns before it arrives, and the expert enters the
// table only once it has.
#include <QtTest>

#include <chrono>
#include <thread>

#include "engine/backend/emulated/emulated_backend.h"
#include "engine/model/loaded_model.h"
#include "engine/schedule/dynamic_placement.h"

using namespace tandem;
using namespace tandem::schedule;

namespace {

std::string fixture(const char* name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name;
}

}  // namespace

class TestDynamicPlacement : public QObject {
  Q_OBJECT
 private slots:
  void histogramForgets() {
    RoutingHistogram h(1, 2, 10);
    h.add({8, 2}, 0);
    QCOMPARE(h.heat(0, 0), 8.0);
    h.add({0, 2}, 10);  // one half-life later
    QCOMPARE(h.heat(0, 0), 4.0);
    QCOMPARE(h.heat(0, 1), 3.0);
  }

  void movesSwapWithinALayerOnlyWhenClearlyHotter() {
    const auto model = model::LoadedModel::load(fixture("qwen3-moe"));  // MoE layers 0 and 2
    backend::EmulatedBackend device(backend::EmulatedOptions{}, model->spec());
    const ExpertPlacement uniform =
        place_experts(PlacementStrategy::Uniform, model->spec().layer_is_moe, 6, 2, nullptr, 0);
    ExpertResidency residency(device, model->weights(), uniform);
    RoutingHistogram h(3, 6, 1e9);
    // Layer 0: expert 4 far hotter than resident expert 1; expert 5 only a little hotter
    // than resident 0. Layer 2: an outsider barely above its residents.
    h.add({10, 3, 0, 0, 40, 12, 0, 0, 0, 0, 0, 0, 5, 5, 6, 0, 0, 0}, 0);
    const std::vector<ExpertMove> moves = plan_moves(h, residency, 10);
    QCOMPARE(moves.size(), std::size_t{1});
    QCOMPARE(moves[0].out_layer, std::int64_t{0});
    QCOMPARE(moves[0].out_expert, std::int64_t{1});
    QCOMPARE(moves[0].in_layer, std::int64_t{0});
    QCOMPARE(moves[0].in_expert, std::int64_t{4});
    QCOMPARE(plan_moves(h, residency, 0).size(), std::size_t{0});
  }

  void aMoveArrivesWithoutAnyoneWaiting() {
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    const auto model = model::LoadedModel::load(fixture("qwen3-moe"), load);
    backend::EmulatedOptions slow;
    slow.bus_bytes_per_s = 1e6;  // one INT8 expert of ~12 KB: about 12 ms
    backend::EmulatedBackend device(slow, model->spec());
    const ExpertPlacement uniform =
        place_experts(PlacementStrategy::Uniform, model->spec().layer_is_moe, 6, 1, nullptr, 0);
    ExpertResidency residency(device, model->weights(), uniform);
    device.synchronize();
    DynamicPlacement dynamic(residency, 3, 6, 1e9, residency.expert_bytes());
    std::vector<std::uint64_t> hits(18, 0);
    hits[3] = 50;  // layer 0, expert 3
    const DynamicPlacement::Step first = dynamic.step(hits, 1);
    QCOMPARE(first.started, 1);
    QCOMPARE(first.arrived, 0);
    // Started, not arrived: neither expert is on the device; the CPU computes both.
    QVERIFY(!residency.on_device(0, 0));
    QVERIFY(!residency.on_device(0, 3));
    QVERIFY(residency.in_flight(0, 3));
    QCOMPARE(residency.moves_in_flight(), std::int64_t{1});
    QCOMPARE(dynamic.moved_bytes(), residency.expert_bytes());
    device.synchronize();
    const DynamicPlacement::Step second = dynamic.step(std::vector<std::uint64_t>(18, 0), 1);
    QCOMPARE(second.arrived, 1);
    QVERIFY(residency.on_device(0, 3));
    QCOMPARE(residency.resident(0), std::int64_t{1});
    QCOMPARE(residency.moves_in_flight(), std::int64_t{0});
  }

  void theBudgetCarriesOverForLargeExperts() {
    const auto model = model::LoadedModel::load(fixture("qwen3-moe"));
    backend::EmulatedBackend device(backend::EmulatedOptions{}, model->spec());
    ExpertResidency residency(
        device, model->weights(),
        place_experts(PlacementStrategy::Uniform, model->spec().layer_is_moe, 6, 1, nullptr, 0));
    // A third of an expert per step: a move every third step.
    DynamicPlacement dynamic(residency, 3, 6, 1e9, residency.expert_bytes() / 3 + 1);
    std::vector<std::uint64_t> hits(18, 0);
    hits[2] = hits[3] = hits[4] = 100;
    int started = 0;
    for (int step = 0; step < 3; ++step) started += dynamic.step(hits, 1).started;
    QCOMPARE(started, 1);
  }
};

QTEST_GUILESS_MAIN(TestDynamicPlacement)
#include "tst_dynamic_placement.moc"
