#include "ui/eliding_label.h"

#include <QPainter>
#include <QStyle>

namespace tandem::ui {

ElidingLabel::ElidingLabel(const QString& text, QWidget* parent) : QLabel(text, parent) {
  setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
}

QSize ElidingLabel::minimumSizeHint() const {
  return {fontMetrics().horizontalAdvance(QStringLiteral("…")) * 4,
          QLabel::minimumSizeHint().height()};
}

QString ElidingLabel::shownText() const {
  const QRect r = contentsRect().adjusted(margin(), 0, -margin(), 0);
  return fontMetrics().elidedText(text(), Qt::ElideRight, r.width());
}

void ElidingLabel::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QRect r = contentsRect().adjusted(margin(), 0, -margin(), 0);
  const QString shown = shownText();
  style()->drawItemText(&p, r, static_cast<int>(alignment()) | Qt::TextSingleLine, palette(),
                        isEnabled(), shown, foregroundRole());
}

}  // namespace tandem::ui
