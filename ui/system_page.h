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
  // The packed CPU kernels the loaded model runs on and its weights' format ("native": as its
  // files store them, none packed), and on AMX where its products are widened (a line, and the
  // measurement's figures; `widens`: whether any product is widened); all empty: no model.
  void setActiveCpuKernels(const QString& kernels, const QString& format, const QString& widening,
                           const QString& widening_detail, bool widens);
  HardwareReportPtr report() const { return report_; }

  // The text shown on the page, for tests and accessibility tools.
  QString findingsText() const;

 signals:
  void refreshRequested();

 private:
  QWidget* makeCard(const QString& title, QLabel** body);
  void showAccelerators();
  void showProcessor();

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
  QString processor_rows_;  // what the probe found of the processor, as table rows
  QString cpu_kernels_, cpu_format_, widening_, widening_detail_;
  bool widens_ = false;
};

}  // namespace tandem::ui
