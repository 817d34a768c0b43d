// Tokens per second while the model writes: decoding on the left axis, prompt processing on
// the right (often ten times faster, so one axis would flatten the other). The time axis
// counts generation time: the idle time between replies is closed up to a short gap, and
// each reply is its own line, never joined to the one before.
#pragma once

#include <QVector>
#include <QWidget>
#include <algorithm>

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
  // The same whether the chart or its empty hint shows, so the panel keeps its width; as tall
  // as the chart's minimum: the live panel's scroll area sizes it by preferred heights (its
  // word-wrapped labels make it height-for-width), and the stretch gives the chart whatever
  // height is left.
  QSize sizeHint() const override { return {280, 150}; }

  // Seconds of generation shown on the time axis; older samples scroll out and are dropped.
  void setWindowSeconds(double seconds);
  int sampleCount() const;
  double maxTokensPerSecond() const { return std::max(max_decode_, max_prompt_); }
  double maxDecodeTokensPerSecond() const { return max_decode_; }
  double maxPromptTokensPerSecond() const { return max_prompt_; }
  // Replies shown (line segments of each kind).
  int segmentCount() const { return segments_.size(); }
  // Where the last sample was placed on the time axis.
  double lastX() const { return last_x_; }

  // More than this many seconds without a sample ends a reply's line.
  static constexpr double kGapSeconds = 1.5;

 public slots:
  // A sample at `seconds` (any clock that only goes forward); a rate below zero means "not
  // measured".
  void addSample(double seconds, double prompt_tokens_per_s, double decode_tokens_per_s);
  void clear();

 private:
  struct Segment {
    QLineSeries* prompt = nullptr;
    QLineSeries* decode = nullptr;
  };
  void startSegment();
  void updateAxes();
  void restyle();
  void updateEmptyState();

  QChart* chart_ = nullptr;
  QChartView* view_ = nullptr;
  QVector<Segment> segments_;
  QValueAxis* time_axis_ = nullptr;
  QValueAxis* decode_axis_ = nullptr;
  QValueAxis* prompt_axis_ = nullptr;
  QLabel* empty_ = nullptr;
  double window_s_ = 60.0;
  double max_decode_ = 0.0, max_prompt_ = 0.0;
  double last_seconds_ = -1.0;  // the clock of the last sample
  double last_x_ = 0.0;         // where it went on the axis
};

}  // namespace tandem::ui
