#include "ui/throughput_chart.h"

#include <QChart>
#include <QChartView>
#include <QGridLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

#include "ui/theme.h"

namespace tandem::ui {
namespace {

// The next 1, 2 or 5 times a power of ten, so the axis reads 0, 50, 100, ... not 2603.
double nice_ceiling(double v) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(v)));
  for (double step : {1.0, 2.0, 5.0, 10.0}) {
    if (step * magnitude >= v) return step * magnitude;
  }
  return 10.0 * magnitude;
}

// A range and its tick spacing, in the order that never asks the axis for more ticks than
// either the old or the new setting gives (a wide range with a narrow spacing is thousands
// of ticks, laid out on the UI thread).
void set_range(QValueAxis* axis, double lo, double hi, double interval) {
  if (interval >= axis->tickInterval()) {
    axis->setTickInterval(interval);
    axis->setRange(lo, hi);
  } else {
    axis->setRange(lo, hi);
    axis->setTickInterval(interval);
  }
}

// The gap left on the time axis between two replies.
constexpr double kShownGap = 1.0;

}  // namespace

ThroughputChart::ThroughputChart(QWidget* parent) : QWidget(parent) {
  chart_ = new QChart;
  chart_->setTitle(tr("Tokens per second"));
  chart_->legend()->setAlignment(Qt::AlignBottom);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  chart_->setBackgroundRoundness(6);

  time_axis_ = new QValueAxis(chart_);
  time_axis_->setTitleText(tr("generation time, s"));
  time_axis_->setLabelFormat(QStringLiteral("%.0f"));
  time_axis_->setRange(0, window_s_);
  decode_axis_ = new QValueAxis(chart_);
  decode_axis_->setLabelFormat(QStringLiteral("%.0f"));
  prompt_axis_ = new QValueAxis(chart_);
  prompt_axis_->setLabelFormat(QStringLiteral("%.0f"));
  chart_->addAxis(time_axis_, Qt::AlignBottom);
  chart_->addAxis(decode_axis_, Qt::AlignLeft);
  chart_->addAxis(prompt_axis_, Qt::AlignRight);

  // Round ticks (0, 5, 10 or 0, 250, 500), set from each range in updateAxes; the rate axes
  // are told apart by the colour of their labels, as the legend's.
  for (QValueAxis* axis : {time_axis_, decode_axis_, prompt_axis_}) {
    axis->setTickInterval(5);
    axis->setRange(0, 10);
    axis->setTickType(QValueAxis::TicksDynamic);
    axis->setTickAnchor(0);
  }
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumHeight(150);

  empty_ = new QLabel(tr("No generation yet.\nThe chart fills while a model writes."), this);
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setWordWrap(true);
  empty_->setAttribute(Qt::WA_TransparentForMouseEvents);
  empty_->setMinimumHeight(view_->minimumHeight());

  // The hint takes the chart's place while there is nothing to draw.
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->addWidget(view_, 0, 0);
  grid->addWidget(empty_, 0, 0);
  empty_->raise();
  clear();
  theme::follow(this, [this] { restyle(); });
}

void ThroughputChart::restyle() {
  // A chart theme sets colours and fonts both: ours are put back over it.
  chart_->setTheme(theme::scheme() == theme::Scheme::Dark ? QChart::ChartThemeDark
                                                          : QChart::ChartThemeLight);
  chart_->setBackgroundRoundness(6);
  decode_axis_->setLabelsColor(QColor(theme::colors().decode));
  prompt_axis_->setLabelsColor(QColor(theme::colors().prompt));
  // Small fonts: the chart lives in a narrow side panel.
  QFont small = chart_->font();
  small.setPointSizeF(7.5);
  for (QValueAxis* axis : {time_axis_, decode_axis_, prompt_axis_}) {
    axis->setLabelsFont(small);
    axis->setTitleFont(small);
  }
  chart_->legend()->setFont(small);
  QFont title = small;
  title.setPointSizeF(8.5);
  title.setBold(true);
  chart_->setTitleFont(title);
  for (const Segment& seg : segments_) {
    seg.prompt->setPen(QPen(QColor(theme::colors().prompt), 2));
    seg.decode->setPen(QPen(QColor(theme::colors().decode), 2));
  }
  empty_->setStyleSheet(QStringLiteral("color: %1;").arg(theme::colors().muted_text));
}

void ThroughputChart::setWindowSeconds(double seconds) {
  window_s_ = std::max(1.0, seconds);
  updateAxes();
}

int ThroughputChart::sampleCount() const {
  int n = 0;
  for (const Segment& s : segments_)
    n += static_cast<int>(std::max(s.prompt->count(), s.decode->count()));
  return n;
}

void ThroughputChart::startSegment() {
  Segment s;
  s.prompt = new QLineSeries(chart_);
  s.prompt->setName(tr("Prompt"));
  s.prompt->setPen(QPen(QColor(theme::colors().prompt), 2));
  s.decode = new QLineSeries(chart_);
  s.decode->setName(tr("Decode"));
  s.decode->setPen(QPen(QColor(theme::colors().decode), 2));
  // Points too: a prompt is often one sample, which a line alone would not show.
  s.prompt->setPointsVisible(true);
  s.decode->setPointsVisible(true);
  chart_->addSeries(s.prompt);
  chart_->addSeries(s.decode);
  s.prompt->attachAxis(time_axis_);
  s.prompt->attachAxis(prompt_axis_);
  s.decode->attachAxis(time_axis_);
  s.decode->attachAxis(decode_axis_);
  // One legend entry per kind, however many replies.
  if (!segments_.isEmpty()) {
    for (QLineSeries* series : {s.prompt, s.decode})
      for (QLegendMarker* m : chart_->legend()->markers(series)) m->setVisible(false);
  }
  segments_.push_back(s);
}

void ThroughputChart::addSample(double seconds, double prompt_tps, double decode_tps) {
  if (prompt_tps < 0 && decode_tps < 0) return;
  // Idle time between replies is closed up; a new reply starts a new line.
  double x = last_x_;
  if (segments_.isEmpty() || last_seconds_ < 0) {
    x = 0;
    if (segments_.isEmpty()) startSegment();
  } else if (seconds - last_seconds_ > kGapSeconds) {
    x = last_x_ + kShownGap;
    startSegment();
  } else {
    x = last_x_ + std::max(0.0, seconds - last_seconds_);
  }
  last_seconds_ = seconds;
  last_x_ = x;
  Segment& s = segments_.back();
  if (prompt_tps >= 0) s.prompt->append(x, prompt_tps);
  if (decode_tps >= 0) s.decode->append(x, decode_tps);
  // What scrolled out of the window goes, and so do replies left with nothing.
  const double oldest = x - window_s_;
  for (Segment& seg : segments_) {
    for (QLineSeries* series : {seg.prompt, seg.decode}) {
      int drop = 0;
      while (drop < series->count() && series->at(drop).x() < oldest) ++drop;
      if (drop > 0) series->removePoints(0, drop);
    }
  }
  while (segments_.size() > 1 && segments_.front().prompt->count() == 0 &&
         segments_.front().decode->count() == 0) {
    chart_->removeSeries(segments_.front().prompt);
    chart_->removeSeries(segments_.front().decode);
    delete segments_.front().prompt;
    delete segments_.front().decode;
    segments_.pop_front();
    // The first reply shown carries the legend entries.
    for (QLineSeries* series : {segments_.front().prompt, segments_.front().decode})
      for (QLegendMarker* m : chart_->legend()->markers(series)) m->setVisible(true);
  }
  updateAxes();
  updateEmptyState();
}

void ThroughputChart::updateAxes() {
  max_decode_ = max_prompt_ = 0.0;
  for (const Segment& s : segments_) {
    for (const QPointF& p : s.decode->points()) max_decode_ = std::max(max_decode_, p.y());
    for (const QPointF& p : s.prompt->points()) max_prompt_ = std::max(max_prompt_, p.y());
  }
  // From 10 s up to the window, then scrolling.
  const double t0 = std::max(0.0, last_x_ - window_s_);
  const double t1 = std::max(std::min(10.0, window_s_), nice_ceiling(std::max(1.0, last_x_)));
  set_range(time_axis_, t0, t1, nice_ceiling((t1 - t0) / 4.0));
  const double decode_top = nice_ceiling(std::max(10.0, max_decode_ * 1.1));
  const double prompt_top = nice_ceiling(std::max(10.0, max_prompt_ * 1.1));
  set_range(decode_axis_, 0, decode_top, decode_top / 2);
  set_range(prompt_axis_, 0, prompt_top, prompt_top / 2);
}

void ThroughputChart::clear() {
  for (const Segment& s : segments_) {
    chart_->removeSeries(s.prompt);
    chart_->removeSeries(s.decode);
    delete s.prompt;
    delete s.decode;
  }
  segments_.clear();
  startSegment();  // the legend shows what the lines will be
  last_seconds_ = -1.0;
  last_x_ = 0.0;
  updateAxes();
  updateEmptyState();
}

void ThroughputChart::updateEmptyState() {
  const bool empty = sampleCount() == 0;
  empty_->setVisible(empty);
  view_->setVisible(!empty);
}

}  // namespace tandem::ui
