// A one-line label that shortens its text with "…" when it has less room than it needs
// (the status bar at 1024 px), with the whole text as its tooltip then.
#pragma once

#include <QLabel>

namespace tandem::ui {

class ElidingLabel : public QLabel {
  Q_OBJECT
 public:
  explicit ElidingLabel(const QString& text = {}, QWidget* parent = nullptr);

  QSize minimumSizeHint() const override;
  // The text as shown now (elided or whole).
  QString shownText() const;

 protected:
  void paintEvent(QPaintEvent* event) override;
};

}  // namespace tandem::ui
