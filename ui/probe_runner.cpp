#include "ui/probe_runner.h"

#include <QtConcurrent/QtConcurrentRun>

namespace tandem::ui {

ProbeRunner::ProbeRunner(QObject* parent) : QObject(parent) {
  qRegisterMetaType<HardwareReportPtr>();
  connect(&watcher_, &QFutureWatcher<HardwareReportPtr>::finished, this, [this] {
    last_ = watcher_.result();
    emit finished(last_);
  });
}

ProbeRunner::~ProbeRunner() {
  watcher_.waitForFinished();
}

void ProbeRunner::start(const QString& diskPath) {
  if (watcher_.isRunning()) return;
  const std::string path = diskPath.toStdString();
  watcher_.setFuture(QtConcurrent::run([path]() -> HardwareReportPtr {
    hw::ProbeOptions options;
    options.disk_path = path;
    return std::make_shared<const hw::HardwareReport>(hw::probe_hardware(options));
  }));
}

bool ProbeRunner::isRunning() const {
  return watcher_.isRunning();
}

QFuture<HardwareReportPtr> ProbeRunner::running() const {
  return watcher_.isRunning() ? watcher_.future() : QFuture<HardwareReportPtr>();
}

}  // namespace tandem::ui
