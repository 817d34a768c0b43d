// The live charts: the heat-map model fed with a recorded routing trace, and the panel's
// polling of engine metrics, freezing and export.
#include <QAbstractItemModelTester>
#include <QImage>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/measure/metrics.h"
#include "ui/expert_heatmap_model.h"
#include "ui/live_panel.h"
#include "ui/throughput_chart.h"

using namespace tandem;
using tandem::ui::ExpertHeatmapModel;

namespace {

// A routing trace as the engine records it: (layer, expert) per routed token, for 2 layers
// of 4 experts; expert 2 of layer 0 is hot, layer 1 spreads evenly.
std::vector<std::pair<int, int>> recordedTrace() {
  std::vector<std::pair<int, int>> t;
  for (int i = 0; i < 30; ++i) t.push_back({0, 2});
  for (int i = 0; i < 10; ++i) t.push_back({0, i % 2});
  for (int i = 0; i < 40; ++i) t.push_back({1, i % 4});
  return t;
}

}  // namespace

class TestLivePanel : public QObject {
  Q_OBJECT
 private slots:
  void heatmapFromARecordedTrace() {
    ExpertHeatmapModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setShape(2, 4);
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.columnCount(), 4);
    std::vector<std::uint64_t> delta(8, 0);
    for (auto [layer, expert] : recordedTrace())
      ++delta[static_cast<std::size_t>(layer * 4 + expert)];
    model.addHits(delta);
    QCOMPARE(model.index(0, 2).data(ExpertHeatmapModel::HitsRole).toULongLong(), 30ull);
    QCOMPARE(model.index(1, 3).data(ExpertHeatmapModel::HitsRole).toULongLong(), 10ull);
    QCOMPARE(model.maxHeat(), 30.0);
    // Heat fades when nothing new arrives; totals stay.
    model.addHits(std::vector<std::uint64_t>(8, 0), 0.5);
    QCOMPARE(model.index(0, 2).data(ExpertHeatmapModel::HeatRole).toDouble(), 15.0);
    QCOMPARE(model.index(0, 2).data(ExpertHeatmapModel::HitsRole).toULongLong(), 30ull);
    model.setGpuResident({2});
    QVERIFY(model.index(0, 2).data(ExpertHeatmapModel::GpuResidentRole).toBool());
    QVERIFY(!model.index(1, 2).data(ExpertHeatmapModel::GpuResidentRole).toBool());
    QVERIFY(
        model.index(0, 2).data(Qt::ToolTipRole).toString().contains(QLatin1String("on the GPU")));
    // A delta of the wrong size (another model) is ignored, not misread.
    model.addHits(std::vector<std::uint64_t>(3, 1));
    QCOMPARE(model.index(0, 2).data(ExpertHeatmapModel::HitsRole).toULongLong(), 30ull);
  }

  void panelPollsMetricsFreezesAndExports() {
    auto metrics = std::make_shared<measure::Metrics>(2, 4);
    ui::LivePanel panel;
    panel.resize(300, 700);
    panel.show();
    panel.setMetrics(metrics, QStringLiteral("none"), false);
    QVERIFY(panel.placementText().contains(QLatin1String("all experts run on the CPU")));
    for (auto [layer, expert] : recordedTrace()) metrics->add_hit(layer, expert);
    metrics->add_tokens(10);
    metrics->add_attention_ns(2'000'000);
    metrics->add_cpu_expert_ns(6'000'000);
    metrics->add_other_ns(2'000'000);
    panel.poll();
    QCOMPARE(panel.heatmap()->index(0, 2).data(ExpertHeatmapModel::HitsRole).toULongLong(), 30ull);
    QVERIFY2(panel.timeSplitText().contains(QLatin1String("Attention 0.20 ms")),
             qPrintable(panel.timeSplitText()));
    QVERIFY(panel.timeSplitText().contains(QLatin1String("0.60 ms")));
    // Frozen: new hits wait until it thaws.
    panel.setFrozen(true);
    metrics->add_hit(1, 1);
    panel.poll();
    QCOMPARE(panel.heatmap()->index(1, 1).data(ExpertHeatmapModel::HitsRole).toULongLong(), 10ull);
    panel.setFrozen(false);
    panel.poll();
    QCOMPARE(panel.heatmap()->index(1, 1).data(ExpertHeatmapModel::HitsRole).toULongLong(), 11ull);
    QTemporaryDir dir;
    QVERIFY(panel.exportPng(dir.path() + "/charts.png"));
    QCOMPARE(QImage(dir.path() + "/charts.png").size(), panel.size());
  }
};

QTEST_MAIN(TestLivePanel)
#include "tst_live_panel.moc"
