#include "ui/downloads/delegate.h"

#include <QApplication>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>

#include "ui/downloads/list_model.h"
#include "ui/theme.h"

namespace tandem::ui {
namespace {

constexpr int kButtonGap = 6;
constexpr int kButtonPadding = 10;
constexpr int kBarHeight = 14;

bool isFailed(const QModelIndex& index) {
  return !index.data(DownloadListModel::ErrorRole).toString().isEmpty();
}

}  // namespace

DownloadDelegate::DownloadDelegate(QObject* parent) : QStyledItemDelegate(parent) {}

QString DownloadDelegate::buttonText(const QString& action) {
  if (action == QLatin1String("pause")) return tr("Pause");
  if (action == QLatin1String("resume")) return tr("Resume");
  if (action == QLatin1String("cancel")) return tr("Cancel");
  if (action == QLatin1String("retry")) return tr("Retry");
  if (action == QLatin1String("remove")) return tr("Remove");
  return action;
}

QVector<QRect> DownloadDelegate::buttonRects(const QRect& cell, const QStringList& actions,
                                             const QFontMetrics& metrics) {
  QVector<QRect> rects;
  const int height = std::min(cell.height() - 6, metrics.height() + 10);
  int x = cell.left() + 4;
  for (const auto& action : actions) {
    const int width = metrics.horizontalAdvance(buttonText(action)) + 2 * kButtonPadding;
    rects.push_back(QRect(x, cell.center().y() - height / 2, width, height));
    x += width + kButtonGap;
  }
  return rects;
}

void DownloadDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                             const QModelIndex& index) const {
  if (index.column() == DownloadListModel::ProgressColumn) {
    paintProgress(painter, option, index);
  } else if (index.column() == DownloadListModel::ActionsColumn) {
    QStyleOptionViewItem background = option;
    initStyleOption(&background, index);
    QApplication::style()->drawPrimitive(QStyle::PE_PanelItemViewItem, &background, painter,
                                         option.widget);
    paintButtons(painter, option, index);
  } else {
    QStyleOptionViewItem styled = option;
    if (index.column() == DownloadListModel::StateColumn && isFailed(index)) {
      styled.palette.setColor(QPalette::Text, QColor(theme::colors().error));
    }
    if (index.data(DownloadListModel::IsDownloadRole).toBool() &&
        index.column() == DownloadListModel::NameColumn) {
      styled.font.setWeight(QFont::DemiBold);
    }
    QStyledItemDelegate::paint(painter, styled, index);
  }
}

void DownloadDelegate::paintProgress(QPainter* painter, const QStyleOptionViewItem& option,
                                     const QModelIndex& index) const {
  QStyleOptionViewItem background = option;
  initStyleOption(&background, index);
  background.text.clear();
  QApplication::style()->drawPrimitive(QStyle::PE_PanelItemViewItem, &background, painter,
                                       option.widget);

  const double fraction = index.data(DownloadListModel::ProgressRole).toDouble();
  if (fraction < 0) return;  // the size is not known yet: no bar rather than a false one
  const QString text = index.data(Qt::DisplayRole).toString();
  const QRect cell = option.rect.adjusted(6, 0, -6, 0);
  const QRect bar(cell.left(), cell.center().y() - kBarHeight / 2, cell.width(), kBarHeight);
  painter->save();
  painter->setRenderHint(QPainter::Antialiasing);
  painter->setPen(Qt::NoPen);
  painter->setBrush(QColor(theme::colors().track));
  painter->drawRoundedRect(bar, kBarHeight / 2.0, kBarHeight / 2.0);
  if (fraction > 0) {
    const int state = index.data(DownloadListModel::StateRole).toInt();
    const bool is_download = index.data(DownloadListModel::IsDownloadRole).toBool();
    const bool done = is_download ? state == static_cast<int>(DownloadJobState::Done)
                                  : state == static_cast<int>(hub::FileState::Done);
    QColor fill(theme::colors().accent);
    if (isFailed(index))
      fill = QColor(theme::colors().error);
    else if (done)
      fill = QColor(theme::colors().good);
    else if (is_download ? state == static_cast<int>(DownloadJobState::Paused)
                         : state == static_cast<int>(hub::FileState::Paused))
      fill = QColor(theme::colors().muted_text);
    QRect filled = bar;
    filled.setWidth(std::max(kBarHeight, static_cast<int>(bar.width() * std::min(1.0, fraction))));
    painter->setBrush(fill);
    painter->drawRoundedRect(filled, kBarHeight / 2.0, kBarHeight / 2.0);
  }
  if (!text.isEmpty()) {
    QFont font = option.font;
    font.setPointSizeF(font.pointSizeF() * 0.85);
    painter->setFont(font);
    const QString percent =
        fraction >= 0 ? QStringLiteral("%1%  ").arg(static_cast<int>(fraction * 100)) : QString();
    // Dark text on the track, white where the filled part lies under it.
    painter->setPen(QColor(theme::colors().text));
    painter->drawText(bar, Qt::AlignCenter, percent + text);
    if (fraction > 0) {
      painter->setClipRect(QRect(bar.left(), bar.top(),
                                 static_cast<int>(bar.width() * std::min(1.0, fraction)),
                                 bar.height()));
      painter->setPen(Qt::white);
      painter->drawText(bar, Qt::AlignCenter, percent + text);
    }
  }
  painter->restore();
}

void DownloadDelegate::paintButtons(QPainter* painter, const QStyleOptionViewItem& option,
                                    const QModelIndex& index) const {
  const QStringList actions = index.data(DownloadListModel::ActionsRole).toStringList();
  const QVector<QRect> rects = buttonRects(option.rect, actions, option.fontMetrics);
  painter->save();
  painter->setRenderHint(QPainter::Antialiasing);
  for (int i = 0; i < actions.size(); ++i) {
    const QRectF r = QRectF(rects[i]).adjusted(0.5, 0.5, -0.5, -0.5);
    const bool primary =
        actions[i] == QLatin1String("resume") || actions[i] == QLatin1String("retry");
    const bool on_selection = option.state & QStyle::State_Selected;
    painter->setPen(QColor(primary ? (on_selection ? "#ffffff" : theme::colors().accent)
                                   : theme::colors().border));
    painter->setBrush(primary ? QColor(theme::colors().accent) : QColor(theme::colors().surface));
    painter->drawRoundedRect(r, 5, 5);
    painter->setPen(primary ? QColor(Qt::white) : QColor(theme::colors().text));
    painter->drawText(rects[i], Qt::AlignCenter, buttonText(actions[i]));
  }
  painter->restore();
}

QSize DownloadDelegate::sizeHint(const QStyleOptionViewItem& option,
                                 const QModelIndex& index) const {
  QSize size = QStyledItemDelegate::sizeHint(option, index);
  size.setHeight(std::max(size.height(), option.fontMetrics.height() + 16));
  if (index.column() == DownloadListModel::ActionsColumn) {
    const QVector<QRect> rects =
        buttonRects(QRect(0, 0, 1000, size.height()),
                    index.data(DownloadListModel::ActionsRole).toStringList(), option.fontMetrics);
    size.setWidth(rects.isEmpty() ? 0 : rects.back().right() + 8);
  }
  if (index.column() == DownloadListModel::ProgressColumn)
    size.setWidth(std::max(size.width(), 220));
  return size;
}

bool DownloadDelegate::editorEvent(QEvent* event, QAbstractItemModel* model,
                                   const QStyleOptionViewItem& option, const QModelIndex& index) {
  if (index.column() == DownloadListModel::ActionsColumn &&
      event->type() == QEvent::MouseButtonRelease) {
    const auto* mouse = static_cast<QMouseEvent*>(event);
    const QStringList actions = index.data(DownloadListModel::ActionsRole).toStringList();
    const QVector<QRect> rects = buttonRects(option.rect, actions, option.fontMetrics);
    for (int i = 0; i < rects.size(); ++i) {
      if (rects[i].contains(mouse->position().toPoint())) {
        emit actionTriggered(index.data(DownloadListModel::DownloadIdRole).toULongLong(),
                             actions[i]);
        return true;
      }
    }
  }
  return QStyledItemDelegate::editorEvent(event, model, option, index);
}

}  // namespace tandem::ui
