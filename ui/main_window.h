// Tandem's main window: navigation, the chat, System and Downloads pages, the live panel and the
// status bar. It owns no engine work; probes run off the UI thread.
#pragma once

#include <QMainWindow>

#include "ui/probe_runner.h"

class QListWidget;
class QStackedWidget;
class QLabel;
class QDockWidget;

namespace tandem::ui {

class ChatPage;
class DownloadQueue;
class DownloadsPage;
class SystemPage;
class ThroughputChart;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class Page { Chat = 0, System = 1, Downloads = 2 };

  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void showPage(Page page);
  Page currentPage() const;

  ProbeRunner* probeRunner() const { return probe_; }
  SystemPage* systemPage() const { return system_; }
  DownloadsPage* downloadsPage() const { return downloads_; }
  DownloadQueue* downloadQueue() const { return download_queue_; }
  ThroughputChart* throughputChart() const { return throughput_; }
  QDockWidget* livePanel() const { return live_dock_; }
  QString statusSummary() const;

  // Where models will be stored; the disk probe measures this folder.
  static QString modelsFolder();

 public slots:
  void detectHardware();

 signals:
  void hardwareDetected(tandem::ui::HardwareReportPtr report);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildMenus();
  void buildStatusBar();
  void restoreSettings();
  void saveSettings() const;
  void onReport(const HardwareReportPtr& report);
  void showAbout();

  ProbeRunner* probe_ = nullptr;
  QListWidget* navigation_ = nullptr;
  QStackedWidget* pages_ = nullptr;
  ChatPage* chat_ = nullptr;
  SystemPage* system_ = nullptr;
  DownloadQueue* download_queue_ = nullptr;
  DownloadsPage* downloads_ = nullptr;
  QDockWidget* live_dock_ = nullptr;
  ThroughputChart* throughput_ = nullptr;
  QLabel* model_status_ = nullptr;
  QLabel* cpu_status_ = nullptr;
  QLabel* gpu_status_ = nullptr;
};

}  // namespace tandem::ui
