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
  // The accelerator the loaded model runs on (empty: the CPU alone) and why.
  void setActiveAccelerator(const QString& description, const QString& note);
  HardwareReportPtr report() const { return report_; }

  // The text shown on the page, for tests and accessibility tools.
  QString findingsText() const;

 signals:
  void refreshRequested();

 private:
  QWidget* makeCard(const QString& title, QLabel** body);
  void showAccelerators();

  HardwareReportPtr report_;
  QLabel* status_ = nullptr;
  QPushButton* refresh_ = nullptr;
  QLabel* findings_ = nullptr;
  QLabel* processor_ = nullptr;
  QLabel* memory_ = nullptr;
  QLabel* gpu_ = nullptr;
  QLabel* disk_ = nullptr;
  QLabel* recommended_ = nullptr;
  QString gpu_rows_;  // the GPUs the probe found, as table rows
  QString active_, active_note_;
};

}  // namespace tandem::ui
