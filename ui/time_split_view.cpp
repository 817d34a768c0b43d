#include "ui/time_split_view.h"

#include <QPainter>
#include <algorithm>

#include "ui/theme.h"

namespace tandem::ui {
namespace {

constexpr int kBarHeight = 16;
constexpr int kLaneGap = 6;
constexpr int kSwatch = 9;

}  // namespace

TimeSplitView::TimeSplitView(QWidget* parent) : QWidget(parent) {
  QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Preferred);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
}

void TimeSplitView::setLanes(const QStringList& lanes) {
  lanes_ = lanes;
  updateGeometry();
  update();
}

void TimeSplitView::setParts(const std::vector<Part>& parts) {
  parts_ = parts;
  updateGeometry();
  update();
}

QString TimeSplitView::legendText(const Part& p) const {
  return QStringLiteral("%1 %2").arg(p.name).arg(p.ms, 0, 'f', p.ms < 10 ? 2 : 1);
}

int TimeSplitView::legendLayout(int width, std::vector<QRect>* items) const {
  const QFontMetrics fm(font());
  int x = 0, y = 0;
  const int line = fm.height() + 2;
  for (const Part& p : parts_) {
    const int w = kSwatch + 4 + fm.horizontalAdvance(legendText(p)) + 10;
    if (x > 0 && x + w > width) {
      x = 0;
      y += line;
    }
    if (items) items->push_back(QRect(x, y, w, line));
    x += w;
  }
  return parts_.empty() ? 0 : y + line;
}

int TimeSplitView::heightForWidth(int width) const {
  const int lanes = std::max<int>(1, static_cast<int>(lanes_.size()));
  return lanes * (kBarHeight + kLaneGap) + 4 + legendLayout(width, nullptr);
}

QSize TimeSplitView::sizeHint() const {
  return {260, heightForWidth(260)};
}

void TimeSplitView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, false);
  const QFontMetrics fm(font());
  int label = 0;
  for (const QString& l : lanes_) label = std::max(label, fm.horizontalAdvance(l));
  label += 6;
  const int total_width = fm.horizontalAdvance(QStringLiteral("00.00 ms")) + 6;
  const int bar_width = std::max(20, width() - label - total_width);
  std::vector<double> totals(static_cast<std::size_t>(lanes_.size()), 0.0);
  for (const Part& part : parts_) {
    if (part.lane >= 0 && part.lane < lanes_.size())
      totals[static_cast<std::size_t>(part.lane)] += part.ms;
  }
  const double scale =
      std::max(1e-9, *std::max_element(totals.begin(), totals.end(), std::less<>()));
  for (int lane = 0; lane < lanes_.size(); ++lane) {
    const int y = lane * (kBarHeight + kLaneGap);
    p.setPen(QColor(theme::colors().muted_text));
    p.drawText(QRect(0, y, label, kBarHeight), Qt::AlignVCenter | Qt::AlignLeft, lanes_[lane]);
    p.fillRect(QRect(label, y, bar_width, kBarHeight), QColor(theme::colors().track));
    double x = label;
    for (const Part& part : parts_) {
      if (part.lane != lane || part.ms <= 0) continue;
      const double w = bar_width * part.ms / scale;
      p.fillRect(QRectF(x, y, w, kBarHeight), part.color);
      x += w;
    }
    p.setPen(palette().color(QPalette::WindowText));
    p.drawText(QRect(label + bar_width + 4, y, total_width, kBarHeight),
               Qt::AlignVCenter | Qt::AlignLeft,
               QStringLiteral("%1 ms").arg(totals[static_cast<std::size_t>(lane)], 0, 'f', 2));
  }
  std::vector<QRect> items;
  legendLayout(width(), &items);
  const int top = static_cast<int>(lanes_.size()) * (kBarHeight + kLaneGap) + 4;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const QRect r = items[i].translated(0, top);
    p.fillRect(QRect(r.left(), r.center().y() - kSwatch / 2, kSwatch, kSwatch), parts_[i].color);
    p.setPen(QColor(theme::colors().muted_text));
    p.drawText(r.adjusted(kSwatch + 4, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft,
               legendText(parts_[i]));
  }
}

}  // namespace tandem::ui
