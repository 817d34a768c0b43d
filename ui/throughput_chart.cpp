#include "ui/throughput_chart.h"

#include <QChart>
#include <QChartView>
#include <QGridLayout>
#include <QLabel>
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

}  // namespace

ThroughputChart::ThroughputChart(QWidget* parent) : QWidget(parent) {
  chart_ = new QChart;
  chart_->setTitle(tr("Tokens per second"));
  chart_->legend()->setAlignment(Qt::AlignBottom);
  chart_->setMargins(QMargins(4, 4, 4, 4));
  chart_->setBackgroundRoundness(6);

  prompt_ = new QLineSeries(chart_);
  prompt_->setName(tr("Prompt"));
  prompt_->setPen(QPen(QColor(theme::kPrompt), 2));
  decode_ = new QLineSeries(chart_);
  decode_->setName(tr("Decode"));
  decode_->setPen(QPen(QColor(theme::kDecode), 2));
  chart_->addSeries(prompt_);
  chart_->addSeries(decode_);

  time_axis_ = new QValueAxis(chart_);
  time_axis_->setTitleText(tr("seconds"));
  time_axis_->setLabelFormat(QStringLiteral("%.0f"));
  time_axis_->setRange(0, window_s_);
  rate_axis_ = new QValueAxis(chart_);
  rate_axis_->setLabelFormat(QStringLiteral("%.0f"));
  rate_axis_->setRange(0, 10);
  chart_->addAxis(time_axis_, Qt::AlignBottom);
  chart_->addAxis(rate_axis_, Qt::AlignLeft);
  for (QLineSeries* s : {prompt_, decode_}) {
    s->attachAxis(time_axis_);
    s->attachAxis(rate_axis_);
  }

  // Small fonts: the chart lives in a narrow side panel.
  QFont small = chart_->font();
  small.setPointSizeF(7.5);
  for (QValueAxis* axis : {time_axis_, rate_axis_}) {
    axis->setLabelsFont(small);
    axis->setTitleFont(small);
  }
  chart_->legend()->setFont(small);
  QFont title = small;
  title.setPointSizeF(8.5);
  title.setBold(true);
  chart_->setTitleFont(title);
  time_axis_->setTickCount(4);
  rate_axis_->setTickCount(5);
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumHeight(170);

  empty_ = new QLabel(tr("No generation yet.\nThe chart fills while a model writes."), this);
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setStyleSheet(QStringLiteral("color: %1; background: rgba(255, 255, 255, 200); "
                                       "border-radius: 6px; padding: 8px;")
                            .arg(theme::kMutedText));
  empty_->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Maximum);
  empty_->setAttribute(Qt::WA_TransparentForMouseEvents);

  // The hint sits over the middle of the empty chart; both share one grid cell.
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(0, 0, 0, 0);
  grid->addWidget(view_, 0, 0);
  grid->addWidget(empty_, 0, 0, Qt::AlignCenter);
  empty_->raise();
  updateEmptyState();
}

void ThroughputChart::setWindowSeconds(double seconds) {
  window_s_ = std::max(1.0, seconds);
}

int ThroughputChart::sampleCount() const {
  return static_cast<int>(std::max(prompt_->count(), decode_->count()));
}

void ThroughputChart::addSample(double seconds, double prompt_tps, double decode_tps) {
  if (prompt_tps >= 0) prompt_->append(seconds, prompt_tps);
  if (decode_tps >= 0) decode_->append(seconds, decode_tps);
  const double oldest = seconds - window_s_;
  for (QLineSeries* s : {prompt_, decode_}) {
    int drop = 0;
    while (drop < s->count() && s->at(drop).x() < oldest) ++drop;
    if (drop > 0) s->removePoints(0, drop);
  }
  max_tps_ = 0.0;
  for (QLineSeries* s : {prompt_, decode_}) {
    for (const QPointF& p : s->points()) max_tps_ = std::max(max_tps_, p.y());
  }
  time_axis_->setRange(std::max(0.0, oldest), std::max(window_s_, seconds));
  rate_axis_->setRange(0, nice_ceiling(std::max(10.0, max_tps_ * 1.1)));
  updateEmptyState();
}

void ThroughputChart::clear() {
  prompt_->clear();
  decode_->clear();
  max_tps_ = 0.0;
  time_axis_->setRange(0, window_s_);
  rate_axis_->setRange(0, 10);
  updateEmptyState();
}

void ThroughputChart::updateEmptyState() {
  empty_->setVisible(sampleCount() == 0);
}

}  // namespace tandem::ui
