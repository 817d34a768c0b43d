// The live charts: the heat-map model fed with a recorded routing trace, and the panel's
// polling of engine metrics, freezing and export.
#include <QAbstractItemModelTester>
#include <QImage>
#include <QLabel>
#include <QPushButton>
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
    QVERIFY(model.index(0, 2)
                .data(Qt::ToolTipRole)
                .toString()
                .contains(QLatin1String("on the accelerator")));
    // A delta of the wrong size (another model) is ignored, not misread.
    model.addHits(std::vector<std::uint64_t>(3, 1));
    QCOMPARE(model.index(0, 2).data(ExpertHeatmapModel::HitsRole).toULongLong(), 30ull);
  }

  // Without an accelerator the panel says why in a few words, so the sentence fits under the
  // heat map; the whole note is its tooltip.
  void noAcceleratorSaysWhyBriefly() {
    ui::LivePanel panel;
    panel.resize(280, 600);
    ui::ModelInfo info;
    info.metrics = std::make_shared<measure::Metrics>(2, 4);
    info.experts = 4;
    info.no_accelerator_reason = QStringLiteral("no NVIDIA GPU was found");
    info.placement_note = QStringLiteral("no NVIDIA GPU was found: everything runs on the CPU");
    panel.setModel(info);
    QCOMPARE(
        panel.placementText(),
        QStringLiteral("No accelerator: all experts run on the CPU (no NVIDIA GPU was found)."));
    bool tooltip = false;
    for (QLabel* l : panel.findChildren<QLabel*>())
      tooltip = tooltip || l->toolTip() == info.placement_note;
    QVERIFY(tooltip);
  }

  void panelPollsMetricsFreezesAndExports() {
    auto metrics = std::make_shared<measure::Metrics>(2, 4);
    ui::LivePanel panel;
    panel.resize(300, 700);
    panel.show();
    ui::ModelInfo info;
    info.metrics = metrics;
    info.experts = 4;
    panel.setModel(info);
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
    // Idle, the map keeps the last reply's heat instead of fading to white.
    const double heat = panel.heatmap()->index(0, 2).data(ExpertHeatmapModel::HeatRole).toDouble();
    for (int i = 0; i < 20; ++i) panel.poll();
    QCOMPARE(panel.heatmap()->index(0, 2).data(ExpertHeatmapModel::HeatRole).toDouble(), heat);
    // A cell under the pointer is the one the tooltip names.
    auto* view = panel.findChild<ui::HeatmapView*>();
    const QRect area = view->cellArea();
    const QPoint in_cell(area.left() + area.width() * 5 / 8, area.top() + area.height() / 4);
    QCOMPARE(view->cellAt(in_cell), panel.heatmap()->index(0, 2));
    QVERIFY(!view->cellAt(QPoint(1, 1)).isValid());  // the axis labels, not a cell
    // The export holds the charts, not the Freeze and Export buttons above them.
    QTemporaryDir dir;
    QVERIFY(panel.exportPng(dir.path() + "/charts.png"));
    const QImage exported(dir.path() + "/charts.png");
    QCOMPARE(exported.width(), panel.width() - 12);  // the panel's margins
    QVERIFY(exported.height() < panel.height() - panel.findChild<QPushButton*>()->height());
  }

  // With an accelerator: the host's lane and the accelerator's, the outline of what is
  // resident read from the engine (so moves show), and the moves per second.
  void panelShowsTheAcceleratorsLane() {
    auto metrics = std::make_shared<measure::Metrics>(2, 4);
    metrics->set_accelerator(true);
    metrics->set_resident(0, 1, true);
    ui::ModelInfo info;
    info.metrics = metrics;
    info.experts = 4;
    info.accelerator = QStringLiteral("emulated accelerator (1 GiB)");
    info.gpu_experts_per_layer = 1;
    info.placement_strategy = QStringLiteral("uniform");
    info.dynamic_update = true;
    ui::LivePanel panel;
    panel.resize(300, 700);
    panel.setModel(info);
    QVERIFY(panel.placementText().contains(QLatin1String("1 of 4 experts per layer")));
    QVERIFY(panel.heatmap()->index(0, 1).data(ExpertHeatmapModel::GpuResidentRole).toBool());
    metrics->add_tokens(4);
    metrics->add_forward_ns(4'000'000);
    metrics->add_cpu_expert_ns(2'000'000);
    metrics->add_waiting_ns(1'000'000);
    metrics->add_other_ns(1'000'000);
    metrics->add_attention_ns(1'200'000);
    metrics->add_gpu_expert_ns(800'000);
    metrics->add_bus_ns(400'000);
    metrics->add_moves(3, 3000);
    metrics->set_resident(0, 1, false);  // moved off
    metrics->set_resident(1, 2, true);   // and another on
    panel.poll();
    const QString split = panel.timeSplitText();
    QVERIFY2(
        split.contains(QLatin1String("host: ")) && split.contains(QLatin1String("accelerator: ")),
        qPrintable(split));
    QVERIFY2(split.contains(QLatin1String("CPU experts 0.50 ms")), qPrintable(split));
    QVERIFY2(split.contains(QLatin1String("Waiting 0.25 ms")), qPrintable(split));
    QVERIFY2(split.contains(QLatin1String("Accelerator experts 0.20 ms")), qPrintable(split));
    QVERIFY2(split.contains(QLatin1String("Bus 0.10 ms")), qPrintable(split));
    QVERIFY2(split.contains(QLatin1String("Idle 0.40 ms")),
             qPrintable(split));  // 4 - 1.2 - 0.8 - 0.4 ms
    QVERIFY(!panel.heatmap()->index(0, 1).data(ExpertHeatmapModel::GpuResidentRole).toBool());
    QVERIFY(panel.heatmap()->index(1, 2).data(ExpertHeatmapModel::GpuResidentRole).toBool());
    auto* moves = panel.findChild<QLabel*>(QStringLiteral("moves"));
    QVERIFY(moves && moves->text().contains(QLatin1String("3 in all")));
  }
};

QTEST_MAIN(TestLivePanel)
#include "tst_live_panel.moc"
