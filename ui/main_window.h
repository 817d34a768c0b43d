// Tandem's main window: navigation, the chat, System and Downloads pages, the live panel and the
// status bar. It owns no engine work; probes run off the UI thread.
#pragma once

#include <QMainWindow>

#include <functional>
#include <memory>
#include <string>

#include "ui/probe_runner.h"

class QListWidget;
class QStackedWidget;
class QLabel;
class QToolButton;
class QDockWidget;
class QProgressBar;

namespace tandem::forward {
struct RunSettings;
}

namespace tandem::ui {

class ElidingLabel;
class ModelsPage;

class ChatPage;
class ConversationStore;
}  // namespace tandem::ui
namespace tandem::server {
class OpenAiServer;
struct ServerOptions;
}  // namespace tandem::server
namespace tandem::ui {
class DownloadQueue;
class DownloadsPage;
class EngineHost;
class SystemPage;
class LivePanel;
class ThroughputChart;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum class Page { Chat = 0, System = 1, Downloads = 2, Models = 3 };

  // What the command line sets for every model the window loads, after the model's profile
  // (--accelerator and the hybrid parameters); false with a sentence when they cannot apply.
  using EngineOverrides = std::function<bool(forward::RunSettings&, std::string& error)>;

  // `conversations_path`: the SQLite file; empty means the default in the data folder.
  explicit MainWindow(QWidget* parent = nullptr, const QString& conversations_path = {},
                      EngineOverrides overrides = {});
  ~MainWindow() override;

  void showPage(Page page);
  Page currentPage() const;

  ProbeRunner* probeRunner() const { return probe_; }
  SystemPage* systemPage() const { return system_; }
  DownloadsPage* downloadsPage() const { return downloads_; }
  DownloadQueue* downloadQueue() const { return download_queue_; }
  ThroughputChart* throughputChart() const { return throughput_; }
  LivePanel* livePanelWidget() const { return live_; }
  ChatPage* chatPage() const { return chat_; }
  ConversationStore& conversationStore() const { return *store_; }

  // The local OpenAI-compatible server on the loaded model, as the status bar's switch
  // turns it on; false, with the reason shown, when it cannot listen.
  bool setServing(bool on);
  server::OpenAiServer* server() const { return server_.get(); }
  QString serverStatusText() const;
  // Help → About's text: version, build, where Tandem runs from, the log file.
  QString aboutText() const;
  // At the first start from an AppImage: the offer of a menu entry (not modal).
  void offerMenuEntry();
  // Its settings, as the Preferences store them.
  static server::ServerOptions serverOptions();
  EngineHost* engine() const { return engine_; }
  QDockWidget* livePanel() const { return live_dock_; }
  QString statusSummary() const;

  // Where models will be stored; the disk probe measures this folder.
  static QString modelsFolder();
  // The profile `tandem recommend --save` and the setup assistant write for a model folder
  // (or catalog id): what the window loads that model with.
  static QString profileFor(const QString& model);

 public slots:
  void detectHardware();
  void openModelFolder();
  void openGgufFile();
  // The setup assistant, modal-less; on Finish its choices are saved and the model loads.
  void openSetupAssistant();
  // The weight-conversion dialog, for `source` when given.
  void openConversion(const QString& source = {});
  void loadModel(const QString& folder, int threads = 0, qint64 context = 0,
                 const QString& cpu_format = {});

 signals:
  void hardwareDetected(tandem::ui::HardwareReportPtr report);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void buildMenus();
  void buildStatusBar();
  void showServerStatus();
  void restoreSettings();
  void saveSettings() const;
  void onReport(const HardwareReportPtr& report);
  void showAbout();
  void showAcceleratorStatus();

  std::unique_ptr<ConversationStore> store_;
  EngineOverrides overrides_;
  EngineHost* engine_ = nullptr;
  ProbeRunner* probe_ = nullptr;
  QListWidget* navigation_ = nullptr;
  QStackedWidget* pages_ = nullptr;
  ChatPage* chat_ = nullptr;
  SystemPage* system_ = nullptr;
  DownloadQueue* download_queue_ = nullptr;
  DownloadsPage* downloads_ = nullptr;
  QDockWidget* live_dock_ = nullptr;
  ThroughputChart* throughput_ = nullptr;
  LivePanel* live_ = nullptr;
  ModelsPage* models_ = nullptr;
  ElidingLabel* model_status_ = nullptr;  // shortened with "…" when the bar is narrow
  QLabel* cpu_status_ = nullptr;
  QLabel* gpu_status_ = nullptr;
  QLabel* speed_status_ = nullptr;
  QToolButton* server_button_ = nullptr;
  std::unique_ptr<server::OpenAiServer> server_;
  QProgressBar* context_bar_ = nullptr;
  QString gpu_found_;           // the usable GPU the probe found
  QString accelerator_in_use_;  // where the loaded model runs; empty: the CPU alone
};

}  // namespace tandem::ui
