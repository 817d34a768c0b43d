// The live side panel: tokens per second, the layers x experts heat map of routing hits,
// where each token's time goes, and memory in use. It polls the engine's metrics a few times
// a second (lock-free reads), can be frozen, and exports itself as a PNG.
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "engine/measure/metrics.h"
#include "ui/engine_host.h"

class QLabel;
class QPushButton;
class QTimer;
class QProgressBar;

namespace tandem::ui {

class ExpertHeatmapModel;
class ThroughputChart;
class TimeSplitView;

class HeatmapView : public QWidget {
  Q_OBJECT
 public:
  explicit HeatmapView(ExpertHeatmapModel* model, QWidget* parent = nullptr);
  // Its minimum height, as ThroughputChart: the stretch gives it the height that is left.
  QSize sizeHint() const override { return {260, 110}; }
  // The cell (layer, expert) under `pos`, or an invalid index.
  QModelIndex cellAt(const QPoint& pos) const;
  // Where the cells are drawn (the rest holds the axis labels and the colour scale).
  QRect cellArea() const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

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

  // The loaded model: its metrics, and where its experts run.
  void setModel(const ModelInfo& info);
  // No model loaded.
  void clear();

 public slots:
  void setFrozen(bool frozen);
  void poll();
  bool exportPng(const QString& path);

 private:
  QWidget* content_ = nullptr;
  ThroughputChart* throughput_ = nullptr;
  ExpertHeatmapModel* heatmap_ = nullptr;
  HeatmapView* heatmap_view_ = nullptr;
  QLabel* placement_ = nullptr;
  QLabel* moves_ = nullptr;
  TimeSplitView* split_ = nullptr;
  QProgressBar* ram_ = nullptr;
  QProgressBar* vram_ = nullptr;
  QPushButton* freeze_ = nullptr;
  QTimer* timer_ = nullptr;
  bool frozen_ = false;
  bool accelerator_ = false;
  bool dynamic_ = false;
  std::shared_ptr<const measure::Metrics> metrics_;
  measure::MetricsSnapshot last_;
  qint64 last_ms_ = 0;
  double moves_per_s_ = 0;
  // Per part (the Part list in live_panel.cpp), ms per token in the last poll with tokens.
  std::vector<double> split_ms_per_token_;

  void setLanes();
  void showSplit();
};

}  // namespace tandem::ui
