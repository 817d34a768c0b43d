// Paints the downloads list: progress bars in the Progress column and, on a download's
// row, its buttons (pause, resume, cancel, retry, remove) in the last column. A click on a
// button is reported with actionTriggered; the model holds all the state.
#pragma once

#include <QStyledItemDelegate>

namespace tandem::ui {

class DownloadDelegate : public QStyledItemDelegate {
  Q_OBJECT
 public:
  explicit DownloadDelegate(QObject* parent = nullptr);

  void paint(QPainter* painter, const QStyleOptionViewItem& option,
             const QModelIndex& index) const override;
  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
  bool editorEvent(QEvent* event, QAbstractItemModel* model, const QStyleOptionViewItem& option,
                   const QModelIndex& index) override;

  // Where each of `actions` is drawn inside `cell`, in order.
  static QVector<QRect> buttonRects(const QRect& cell, const QStringList& actions,
                                    const QFontMetrics& metrics);
  static QString buttonText(const QString& action);

 signals:
  void actionTriggered(quint64 downloadId, const QString& action);

 private:
  void paintProgress(QPainter* painter, const QStyleOptionViewItem& option,
                     const QModelIndex& index) const;
  void paintButtons(QPainter* painter, const QStyleOptionViewItem& option,
                    const QModelIndex& index) const;
};

}  // namespace tandem::ui
