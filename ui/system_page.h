// The System page: what the hardware probe found and what it means, in plain language.
#pragma once

#include <QWidget>

#include "ui/probe_runner.h"

class QLabel;
class QVBoxLayout;
class QPushButton;

namespace tandem::ui {

class SystemPage : public QWidget {
  Q_OBJECT
 public:
  explicit SystemPage(QWidget* parent = nullptr);

  void showProbing();
  void setReport(const HardwareReportPtr& report);
  HardwareReportPtr report() const { return report_; }

  // The text shown on the page, for tests and accessibility tools.
  QString findingsText() const;

 signals:
  void refreshRequested();

 private:
  QWidget* makeCard(const QString& title, QLabel** body);

  HardwareReportPtr report_;
  QLabel* status_ = nullptr;
  QPushButton* refresh_ = nullptr;
  QLabel* findings_ = nullptr;
  QLabel* processor_ = nullptr;
  QLabel* memory_ = nullptr;
  QLabel* gpu_ = nullptr;
  QLabel* disk_ = nullptr;
  QLabel* recommended_ = nullptr;
};

}  // namespace tandem::ui
