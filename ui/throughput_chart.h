// Tokens per second over time, for prompt processing and decoding.
#pragma once

#include <QWidget>

class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;
class QLabel;

namespace tandem::ui {

class ThroughputChart : public QWidget {
  Q_OBJECT
 public:
  explicit ThroughputChart(QWidget* parent = nullptr);

  // Seconds shown on the time axis; older samples scroll out and are dropped.
  void setWindowSeconds(double seconds);
  int sampleCount() const;
  double maxTokensPerSecond() const { return max_tps_; }

 public slots:
  // A sample at `seconds` since the session started; a rate below zero means "not measured".
  void addSample(double seconds, double prompt_tokens_per_s, double decode_tokens_per_s);
  void clear();

 private:
  void updateEmptyState();

  QChart* chart_ = nullptr;
  QChartView* view_ = nullptr;
  QLineSeries* prompt_ = nullptr;
  QLineSeries* decode_ = nullptr;
  QValueAxis* time_axis_ = nullptr;
  QValueAxis* rate_axis_ = nullptr;
  QLabel* empty_ = nullptr;
  double window_s_ = 60.0;
  double max_tps_ = 0.0;
};

}  // namespace tandem::ui
