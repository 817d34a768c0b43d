// The live side panel: tokens per second, the layers x experts heat map of routing hits,
// where each token's time goes, and memory in use. It polls the engine's metrics a few times
// a second (lock-free reads), can be frozen, and exports itself as a PNG.
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "engine/measure/metrics.h"

class QLabel;
class QPushButton;
class QTimer;
class QChart;
class QHorizontalStackedBarSeries;
class QBarSet;
class QValueAxis;
class QProgressBar;

namespace tandem::ui {

class ExpertHeatmapModel;
class ThroughputChart;

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  explicit HeatmapView(ExpertHeatmapModel* model, QWidget* parent = nullptr);
  QSize sizeHint() const override { return {260, 160}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  ExpertHeatmapModel* model_;
};

class LivePanel : public QWidget {
  Q_OBJECT
 public:
  explicit LivePanel(QWidget* parent = nullptr);

  ThroughputChart* throughput() const { return throughput_; }
  ExpertHeatmapModel* heatmap() const { return heatmap_; }
  bool isFrozen() const { return frozen_; }
  QString placementText() const;
  QString timeSplitText() const;

  // The engine's metrics for the loaded model; null when none is loaded.
  void setMetrics(std::shared_ptr<const measure::Metrics> metrics,
                  const QString& placement_strategy, bool gpu);
  void setVramUse(std::uint64_t used_bytes, std::uint64_t total_bytes);

 public slots:
  void setFrozen(bool frozen);
  void poll();
  bool exportPng(const QString& path);

 private:
  ThroughputChart* throughput_ = nullptr;
  ExpertHeatmapModel* heatmap_ = nullptr;
  HeatmapView* heatmap_view_ = nullptr;
  QLabel* placement_ = nullptr;
  QChart* split_chart_ = nullptr;
  QHorizontalStackedBarSeries* split_series_ = nullptr;
  std::vector<QBarSet*> split_sets_;
  QValueAxis* split_axis_ = nullptr;
  QProgressBar* ram_ = nullptr;
  QProgressBar* vram_ = nullptr;
  QPushButton* freeze_ = nullptr;
  QTimer* timer_ = nullptr;
  bool frozen_ = false;
  std::shared_ptr<const measure::Metrics> metrics_;
  measure::MetricsSnapshot last_;
  std::vector<double> split_ms_per_token_;
};

}  // namespace tandem::ui
