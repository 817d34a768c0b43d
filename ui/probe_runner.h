// Runs the hardware probe off the UI thread and hands the result back with a signal.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <memory>

#include "engine/hw/hardware_report.h"

namespace tandem::ui {

using HardwareReportPtr = std::shared_ptr<const hw::HardwareReport>;

class ProbeRunner : public QObject {
  Q_OBJECT
 public:
  explicit ProbeRunner(QObject* parent = nullptr);
  ~ProbeRunner() override;

  // Starts a probe unless one is running. `diskPath` is where models will be stored.
  void start(const QString& diskPath);
  bool isRunning() const;
  HardwareReportPtr lastReport() const { return last_; }
  // The probe under way, for a thread that would rather wait for it than probe again; not
  // valid (QFuture::isValid) when none runs.
  QFuture<HardwareReportPtr> running() const;

 signals:
  void finished(tandem::ui::HardwareReportPtr report);

 private:
  QFutureWatcher<HardwareReportPtr> watcher_;
  HardwareReportPtr last_;
};

}  // namespace tandem::ui

Q_DECLARE_METATYPE(tandem::ui::HardwareReportPtr)
