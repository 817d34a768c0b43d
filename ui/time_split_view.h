// Where a token's time goes: one stacked bar per lane (the CPU alone; or the host and the
// accelerator, whose parts overlap in time), each part in its colour, each lane's total at
// its end, and a legend of the parts with their milliseconds that wraps to the width.
#pragma once

#include <QColor>
#include <QStringList>
#include <QWidget>
#include <vector>

namespace tandem::ui {

class TimeSplitView : public QWidget {
  Q_OBJECT
 public:
  struct Part {
    QString name;
    QColor color;
    int lane = 0;
    double ms = 0;  // per token
  };

  explicit TimeSplitView(QWidget* parent = nullptr);

  void setLanes(const QStringList& lanes);
  void setParts(const std::vector<Part>& parts);
  const std::vector<Part>& parts() const { return parts_; }

  QSize sizeHint() const override;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  // Lays the legend out for `width`; returns its height (and fills the item rectangles).
  int legendLayout(int width, std::vector<QRect>* items) const;
  QString legendText(const Part& p) const;

  QStringList lanes_;
  std::vector<Part> parts_;
};

}  // namespace tandem::ui
