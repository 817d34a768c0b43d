#include "ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDesktopServices>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHostAddress>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QToolButton>
#include <QUrl>
#include <QVBoxLayout>

#include "engine/forward/runner_settings.h"
#include "engine/log/log.h"
#include "engine/model/demo_model.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/run_profile.h"

#include <nlohmann/json.hpp>
#include "engine/version.h"
#include "server/openai_server.h"
#include "ui/chat_page.h"
#include "ui/conversation/store.h"
#include "ui/conversion_dialog.h"
#include "ui/desktop_integration.h"
#include "ui/downloads/page.h"
#include "ui/downloads/queue.h"
#include "ui/eliding_label.h"
#include "ui/engine_host.h"
#include "ui/live_panel.h"
#include "ui/models_page.h"
#include "ui/preferences_dialog.h"
#include "ui/secret_store.h"
#include "ui/setup_wizard.h"
#include "ui/system_page.h"
#include "ui/theme.h"
#include "ui/throughput_chart.h"

namespace tandem::ui {
namespace {

constexpr auto kGeometryKey = "mainWindow/geometry";
constexpr auto kStateKey = "mainWindow/state";
constexpr auto kPageKey = "mainWindow/page";
constexpr auto kModelKey = "model/folder";

}  // namespace

MainWindow::MainWindow(QWidget* parent, const QString& conversations_path,
                       EngineOverrides overrides)
    : QMainWindow(parent),
      store_(std::make_unique<ConversationStore>(conversations_path)),
      overrides_(std::move(overrides)) {
  setWindowTitle(QStringLiteral("Tandem"));
  engine_ = new EngineHost(this);
  setObjectName(QStringLiteral("mainWindow"));
  // 1280 x 800 where the screen has room; on a smaller one (a 1366 x 768 laptop, a 1024 x 640
  // window on a remote desktop) no more than the room it has, title bar and panels aside.
  QSize first(1280, 800);
  if (const QScreen* screen = QGuiApplication::primaryScreen())
    first = first.boundedTo(screen->availableGeometry().size() * 0.95);
  resize(first);

  probe_ = new ProbeRunner(this);
  connect(probe_, &ProbeRunner::finished, this, &MainWindow::onReport);

  auto* central = new QWidget(this);
  auto* row = new QHBoxLayout(central);
  row->setContentsMargins(0, 0, 0, 0);
  row->setSpacing(0);
  navigation_ = new QListWidget(central);
  navigation_->setObjectName(QStringLiteral("navigation"));
  navigation_->setAccessibleName(tr("Pages"));
  navigation_->setFixedWidth(150);
  navigation_->setFocusPolicy(Qt::NoFocus);
  navigation_->setIconSize(QSize(18, 18));
  navigation_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_FileDialogDetailedView), tr("Chat")));
  navigation_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_ComputerIcon), tr("System")));
  navigation_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_ArrowDown), tr("Downloads")));
  navigation_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_DirIcon), tr("Models")));
  pages_ = new QStackedWidget(central);
  chat_ = new ChatPage(*engine_, *store_, pages_);
  system_ = new SystemPage(pages_);
  pages_->addWidget(chat_);
  pages_->addWidget(system_);
  download_queue_ = new DownloadQueue(this);
  downloads_ = new DownloadsPage(download_queue_, modelsFolder(), pages_);
  pages_->addWidget(downloads_);
  models_ = new ModelsPage(pages_);
  pages_->addWidget(models_);
  connect(models_, &ModelsPage::loadRequested, this, [this](const QString& f) { loadModel(f); });
  connect(engine_, &EngineHost::modelLoaded, models_,
          [this](const ModelInfo& info) { models_->setLoaded(info.folder); });
  row->addWidget(navigation_);
  row->addWidget(pages_, 1);
  setCentralWidget(central);
  connect(navigation_, &QListWidget::currentRowChanged, pages_, &QStackedWidget::setCurrentIndex);
  // What is on disk may have changed (a download finished, a conversion): looked at anew.
  connect(navigation_, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row == static_cast<int>(Page::Models)) models_->refresh();
  });
  connect(chat_, &ChatPage::showSystemRequested, this, [this] { showPage(Page::System); });
  connect(system_, &SystemPage::refreshRequested, this, &MainWindow::detectHardware);
  connect(chat_, &ChatPage::openModelRequested, this, &MainWindow::openModelFolder);
  // The status bar follows a long load as the chat's notice does.
  connect(engine_, &EngineHost::loadProgress, this,
          [this] { model_status_->setText(chat_->loadStatus()); });
  connect(chat_, &ChatPage::loadModelRequested, this,
          [this](const QString& folder) { loadModel(folder); });
  connect(chat_, &ChatPage::turnStats, this,
          [this](double tps, double ttft, qint64 used, qint64 capacity) {
            const QString first =
                ttft < 1.0 ? tr("%1 ms").arg(qRound(ttft * 1000)) : tr("%1 s").arg(ttft, 0, 'f', 1);
            speed_status_->setText(
                tr("%1 tokens/s · first token in %2").arg(tps, 0, 'f', 1).arg(first));
            context_bar_->setRange(0, static_cast<int>(capacity));
            context_bar_->setValue(static_cast<int>(used));
            context_bar_->setFormat(tr("%1 / %2").arg(used).arg(capacity));
            context_bar_->setToolTip(tr("Context used: %1 of %2 tokens").arg(used).arg(capacity));
            context_bar_->setVisible(true);
          });

  live_dock_ = new QDockWidget(tr("Live"), this);
  live_dock_->setObjectName(QStringLiteral("liveDock"));
  live_dock_->setAllowedAreas(Qt::LeftDockWidgetArea | Qt::RightDockWidgetArea |
                              Qt::BottomDockWidgetArea);
  // The panel scrolls when the window is too short for all of it.
  auto* live_scroll = new QScrollArea(live_dock_);
  live_scroll->setWidgetResizable(true);
  live_scroll->setFrameShape(QFrame::NoFrame);
  live_scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  live_ = new LivePanel(live_scroll);
  throughput_ = live_->throughput();
  live_->setMinimumWidth(250);
  live_->setMinimumHeight(560);
  live_scroll->setWidget(live_);
  // The dock no narrower than the panel and its scroll bar: narrower, with the panel kept at
  // its width, its right edge was cut off (a 1024 x 640 screen).
  live_scroll->setMinimumWidth(live_->minimumWidth() +
                               live_scroll->style()->pixelMetric(QStyle::PM_ScrollBarExtent));
  live_dock_->setWidget(live_scroll);
  addDockWidget(Qt::RightDockWidgetArea, live_dock_);
  connect(engine_, &EngineHost::throughputSample, throughput_, &ThroughputChart::addSample);
  connect(engine_, &EngineHost::modelLoaded, this, [this](const ModelInfo& info) {
    const QString where = info.accelerator.isEmpty() ? tr("CPU only")
                          : info.experts > 0         ? tr("%1/%2 experts on the accelerator")
                                                   .arg(info.gpu_experts_per_layer)
                                                   .arg(info.experts)
                                             : tr("on the accelerator");
    model_status_->setText(tr("%1 · %2 layers · %3 threads · context %4 · %5")
                               .arg(info.name)
                               .arg(info.layers)
                               .arg(info.threads)
                               .arg(info.context)
                               .arg(where) +
                           (info.planned_format_fits
                                ? QString()
                                : tr(" · weights as stored: too large to pack here")));
    model_status_->setToolTip(
        model_status_->text() + QStringLiteral("\n") + info.architecture + QStringLiteral("\n") +
        info.placement_note +
        (info.profile.isEmpty() ? QString()
                                : tr("\nSettings from the profile %1").arg(info.profile)) +
        (info.planned_format_reason.isEmpty() ? QString()
         : info.planned_format_fits ? tr("\nWeights packed in %1, the plan's choice for this "
                                         "computer (%2)")
                                          .arg(info.cpu_format, info.planned_format_reason)
                                    : tr("\nWeights left as stored, the slowest to compute: the "
                                         "model %1")
                                          .arg(info.planned_format_reason)));
    accelerator_in_use_ = info.accelerator;
    showAcceleratorStatus();
    // The last reply's rate and context were another model's (its context another size).
    speed_status_->clear();
    context_bar_->setVisible(false);
    QSettings().setValue(kModelKey, info.folder);
    live_->setModel(info);
    system_->setActiveAccelerator(info.accelerator, info.placement_note);
    system_->setActiveCpuKernels(info.cpu_kernels, info.cpu_format, info.widening,
                                 info.widening_detail, info.widens);
  });
  connect(engine_, &EngineHost::modelLoadFailed, this,
          [this](const QString& folder, const QString&, bool kept) {
            if (!kept) {
              model_status_->setText(tr("Could not load %1").arg(QFileInfo(folder).fileName()));
              system_->setActiveCpuKernels({}, {}, {}, {}, false);
            }
          });

  buildMenus();
  buildStatusBar();
  showPage(Page::Chat);
  restoreSettings();
  // Downloads that were running when Tandem closed carry on where they stopped.
  download_queue_->restore();
  detectHardware();
  // The model of the last session; without one (a first start, or its folder is gone) the
  // built-in demo model, so the chat answers before anything is downloaded. The last model
  // may be a folder or a GGUF file.
  QString model = QSettings().value(kModelKey).toString();
  const QFileInfo last(model);
  if (model.isEmpty() ||
      !(last.isDir() || (last.isFile() && model.endsWith(QLatin1String(".gguf")))))
    model = QString::fromStdString(model::demo_model_folder());
  const SetupChoices saved = SetupWizard::savedChoices();
  if (!model.isEmpty() && saved.modelPath() == model) {
    loadModel(model, saved.threads, saved.context, saved.cpu_format);
  } else if (!model.isEmpty()) {
    loadModel(model);
  }
}

void MainWindow::openModelFolder() {
  const QString start = QSettings().value(kModelKey, modelsFolder()).toString();
  const QString folder = QFileDialog::getExistingDirectory(this, tr("Open Model Folder"), start);
  if (!folder.isEmpty()) loadModel(folder);
}

void MainWindow::openGgufFile() {
  const QString start = QSettings().value(kModelKey, modelsFolder()).toString();
  const QFileInfo info(start);
  const QString file = QFileDialog::getOpenFileName(this, tr("Open GGUF File"),
                                                    info.isFile() ? info.absolutePath() : start,
                                                    tr("GGUF models (*.gguf)"));
  if (!file.isEmpty()) loadModel(file);
}

void MainWindow::openSetupAssistant() {
  auto* wizard = new SetupWizard(probe_->lastReport(), download_queue_, this);
  wizard->setAttribute(Qt::WA_DeleteOnClose);
  connect(probe_, &ProbeRunner::finished, wizard, &SetupWizard::setHardware);
  // Closed without finishing: not opened by itself at the next start.
  connect(wizard, &QWizard::rejected, this, [] { SetupWizard::markDismissed(); });
  // The first start's other question, once the assistant is done with.
  connect(wizard, &QWizard::finished, this, &MainWindow::offerMenuEntry, Qt::QueuedConnection);
  connect(wizard, &QWizard::accepted, this, [this, wizard] {
    const SetupChoices c = wizard->choices();
    SetupWizard::saveChoices(c);
    // What the assistant showed, with the user's changes, is the model's profile from now on.
    if (!wizard->plan().parameters.empty() && !c.folder.isEmpty()) {
      nlohmann::json doc = plan::to_json(wizard->plan());
      for (auto& x : doc["parameters"]) {
        const std::string name = x["name"].get<std::string>();
        if (name == "cpuinfer" && c.threads > 0) x["value"] = std::to_string(c.threads);
        if (name == "context-length" && c.context > 0) x["value"] = std::to_string(c.context);
      }
      doc["model"] = c.modelPath().toStdString();
      try {
        plan::write_run_profile(profileFor(c.modelPath()).toStdString(), doc);
      } catch (const std::exception& e) {
        statusBar()->showMessage(QString::fromUtf8(e.what()), 10000);
      }
    }
    showPage(Page::Chat);
    if (c.present()) {
      loadModel(c.modelPath(), c.threads, c.context, c.cpu_format);
    } else {
      // A download still running: the Downloads page shows it; the model loads when the
      // user opens it once complete.
      showPage(Page::Downloads);
    }
  });
  wizard->show();
}

void MainWindow::openConversion(const QString& source) {
  auto* dialog = new ConversionDialog(this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  if (!source.isEmpty()) dialog->setSource(source);
  connect(dialog, &ConversionDialog::loadRequested, this,
          [this](const QString& folder) { loadModel(folder); });
  connect(dialog, &ConversionDialog::finished, this, [this](bool ok, const QString& output) {
    if (ok)
      statusBar()->showMessage(
          tr("Converted weights saved in %1; open that folder to use them.").arg(output), 10000);
  });
  dialog->show();
}

void MainWindow::loadModel(const QString& folder, int threads, qint64 context,
                           const QString& cpu_format) {
  if (engine_->isBusy()) return;
  LoadRequest request;
  request.folder = folder;
  // Refused before the engine is asked: whatever model is loaded stays.
  const auto refuse = [&](const QString& message) {
    if (!engine_->hasModel())
      model_status_->setText(tr("Could not load %1").arg(QFileInfo(folder).fileName()));
    chat_->showLoadFailure(folder, message, engine_->hasModel());
  };
  // The model's saved profile first, then the assistant's choices, then the command line.
  const QString profile = profileFor(folder);
  if (QFileInfo::exists(profile)) {
    try {
      forward::apply_profile(plan::read_run_profile(profile.toStdString()), request.settings);
      request.profile = profile;
    } catch (const std::exception& e) {
      refuse(QString::fromUtf8(e.what()));
      return;
    }
  }
  // Threads: the command line's, else the Preferences', else the profile's or the machine's.
  if (threads <= 0) threads = QSettings().value(QStringLiteral("engine/threads"), 0).toInt();
  if (threads > 0) request.settings.threads = threads;
  // The KV cache: the Preferences', unless they leave it to the plan (the profile's, else
  // BF16); the command line's below, through the overrides.
  const QString kv_cache =
      QSettings().value(QStringLiteral("engine/kvCache"), QStringLiteral("plan")).toString();
  if (kv_cache != QLatin1String("plan") &&
      !backend::parse_kv_cache_format(kv_cache.toStdString(), request.settings.kv_cache)) {
    refuse(tr("the KV cache saved in Preferences (\"%1\") is not one Tandem knows; choose one "
              "there.")
               .arg(kv_cache));
    return;
  }
  if (context > 0) request.settings.context = context;
  if (!cpu_format.isEmpty() &&
      !model::parse_cpu_format(cpu_format.toStdString(), request.settings.load.cpu_format)) {
    refuse(tr("the CPU format \"%1\" is not one Tandem can load; choose int8, int4, bf16 or "
              "native in the setup assistant.")
               .arg(cpu_format));
    return;
  }
  if (overrides_) {
    std::string error;
    if (!overrides_(request.settings, error)) {
      refuse(QString::fromStdString(error));
      return;
    }
  }
  // Nothing chose the CPU format (no profile, no choice of the assistant's, none on the
  // command line): the engine takes the plan's for this computer, as a profile would give it,
  // rather than the stored weights' slow reference path.
  request.plan_cpu_format = request.profile.isEmpty() && cpu_format.isEmpty() &&
                            !request.settings.load.cpu_format_asked &&
                            request.settings.load.cpu_format == model::CpuFormat::Native;
  request.hardware = probe_->lastReport();
  // At start-up the window's probe is still running: the worker waits for it rather than
  // probe the machine a second time.
  if (request.plan_cpu_format && !request.hardware) request.hardware_probe = probe_->running();
  model_status_->setText(tr("Loading %1…").arg(QFileInfo(folder).fileName()));
  engine_->loadModel(request);
}

QString MainWindow::profileFor(const QString& model) {
  const QString name = QFileInfo(model).fileName();
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/profiles/") + (name.isEmpty() ? model : name) + QStringLiteral(".json");
}

MainWindow::~MainWindow() = default;

QString MainWindow::modelsFolder() {
  const QString chosen = QSettings().value(QStringLiteral("paths/models")).toString();
  if (!chosen.isEmpty()) return chosen;
  return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/models");
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  QAction* open = file->addAction(tr("&Open Model Folder…"), this, &MainWindow::openModelFolder);
  open->setShortcut(QKeySequence::Open);
  // A .gguf file (any part of a split set) runs as it is, with no conversion.
  file->addAction(tr("Open &GGUF File…"), this, &MainWindow::openGgufFile)
      ->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
  file->addAction(tr("&New Chat"), this,
                  [this] {
                    showPage(Page::Chat);
                    chat_->newConversation();
                  })
      ->setShortcut(QKeySequence::New);
  file->addSeparator();
  QAction* quit = file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows);
  quit->setShortcut(QKeySequence::Quit);

  QMenu* view = menuBar()->addMenu(tr("&View"));
  QAction* chat = view->addAction(tr("&Chat"), this, [this] { showPage(Page::Chat); });
  chat->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_1));
  QAction* system = view->addAction(tr("&System"), this, [this] { showPage(Page::System); });
  system->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_2));
  QAction* downloads =
      view->addAction(tr("&Downloads"), this, [this] { showPage(Page::Downloads); });
  downloads->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_3));
  view->addSeparator();
  QAction* live = live_dock_->toggleViewAction();
  live->setText(tr("&Live Panel"));
  live->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_L));
  view->addAction(live);

  QMenu* tools = menuBar()->addMenu(tr("&Tools"));
  tools->addAction(tr("Download a &Model…"), this, [this] {
    showPage(Page::Downloads);
    downloads_->askForDownload();
  });
  tools->addAction(tr("&Setup Assistant…"), this, &MainWindow::openSetupAssistant);
  tools->addAction(tr("&Convert Weights…"), this, [this] {
    openConversion(engine_->hasModel() ? engine_->model().folder : QString());
  });
  tools->addAction(tr("&Detect Hardware Again"), this, &MainWindow::detectHardware);
  tools->addSeparator();
  QAction* preferences = tools->addAction(tr("&Preferences…"), this, [this] {
    PreferencesDialog dialog(this);
    dialog.setConversationStore(store_.get(), engine_->isBusy());
    if (dialog.exec() != QDialog::Accepted) return;
    if (dialog.conversationsMoved()) chat_->reloadConversations();
    if (server_) setServing(true);  // on the port and access chosen now
    theme::apply(*qApp);            // a new theme shows at once
  });
  // The desktop's own key for Preferences where it has one (KDE), and Ctrl+, everywhere: GNOME
  // and a bare X server define none.
  QList<QKeySequence> preference_keys = QKeySequence::keyBindings(QKeySequence::Preferences);
  if (!preference_keys.contains(QKeySequence(Qt::CTRL | Qt::Key_Comma)))
    preference_keys << QKeySequence(Qt::CTRL | Qt::Key_Comma);
  preferences->setShortcuts(preference_keys);
  preferences->setObjectName(QStringLiteral("preferencesAction"));
  preferences->setMenuRole(QAction::PreferencesRole);

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("Open &Log Folder"), this, [] {
    const QString file = QString::fromStdString(log::file_path());
    const QString folder = file.isEmpty()
                               ? QStandardPaths::writableLocation(QStandardPaths::AppDataLocation)
                               : QFileInfo(file).absolutePath();
    QDesktopServices::openUrl(QUrl::fromLocalFile(folder));
  });
  help->addSeparator();
  help->addAction(tr("&About Tandem"), this, &MainWindow::showAbout);
}

void MainWindow::buildStatusBar() {
  model_status_ = new ElidingLabel(tr("No model loaded"), this);
  cpu_status_ = new QLabel(tr("Detecting hardware…"), this);
  gpu_status_ = new QLabel(this);
  speed_status_ = new QLabel(this);
  context_bar_ = new QProgressBar(this);
  context_bar_->setFixedWidth(120);
  context_bar_->setMaximumHeight(18);
  context_bar_->setTextVisible(true);
  context_bar_->setVisible(false);
  statusBar()->addWidget(model_status_, 1);
  server_button_ = new QToolButton(this);
  server_button_->setObjectName(QStringLiteral("serverSwitch"));
  server_button_->setCheckable(true);
  server_button_->setAutoRaise(true);
  server_button_->setAccessibleName(tr("Local server"));
  connect(server_button_, &QToolButton::clicked, this, [this](bool on) { setServing(on); });
  statusBar()->addPermanentWidget(server_button_);
  showServerStatus();
  statusBar()->addPermanentWidget(speed_status_);
  statusBar()->addPermanentWidget(context_bar_);
  statusBar()->addPermanentWidget(cpu_status_);
  statusBar()->addPermanentWidget(gpu_status_);
}

server::ServerOptions MainWindow::serverOptions() {
  QSettings s;
  server::ServerOptions o;
  o.port = static_cast<quint16>(s.value(QStringLiteral("server/port"), 8080).toInt());
  if (s.value(QStringLiteral("server/network"), false).toBool()) o.address = QHostAddress::AnyIPv4;
  o.api_key = secrets::read(QStringLiteral("server-api-key"), QStringLiteral("server/apiKey"));
  for (const QString& origin : s.value(QStringLiteral("server/origins"))
                                   .toString()
                                   .split(QLatin1Char(','), Qt::SkipEmptyParts))
    o.cors_origins << origin.trimmed();
  return o;
}

bool MainWindow::setServing(bool on) {
  if (!on) {
    server_.reset();
    showServerStatus();
    return true;
  }
  server_.reset();  // a running one lets go of its port first
  auto s = std::make_unique<server::OpenAiServer>(*engine_, serverOptions());
  const QString problem = s->start();
  if (!problem.isEmpty()) {
    server_.reset();
    showServerStatus();
    // Not modal: the window goes on while the user reads why.
    auto* box =
        new QMessageBox(QMessageBox::Warning, tr("Local server"), problem, QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("serverProblem"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
    return false;
  }
  server_ = std::move(s);
  connect(server_.get(), &server::OpenAiServer::activityChanged, this,
          &MainWindow::showServerStatus);
  showServerStatus();
  return true;
}

QString MainWindow::serverStatusText() const {
  return server_button_->text();
}

void MainWindow::showServerStatus() {
  const bool on = server_ && server_->isListening();
  server_button_->setChecked(on);
  if (!on) {
    server_button_->setText(tr("Local server: off"));
    server_button_->setToolTip(
        tr("Let editors, agents and scripts use the loaded model through OpenAI's API on this "
           "computer. Port and access are in Preferences."));
    return;
  }
  QString text = tr("Serving at %1").arg(server_->address().mid(7));
  const int n = server_->requestsServed();
  if (n > 0) text += n == 1 ? tr(" · 1 request") : tr(" · %1 requests").arg(n);
  if (server_->inFlight() > 0) text += tr(" · %1 running").arg(server_->inFlight());
  if (server_->lastTokensPerSecond() > 0)
    text += tr(" · %1 tokens/s").arg(server_->lastTokensPerSecond(), 0, 'f', 1);
  server_button_->setText(text);
  server_button_->setToolTip(tr("OpenAI-compatible API at %1/v1 on %2. Click to stop serving.")
                                 .arg(server_->address(), engine_->hasModel()
                                                              ? engine_->model().name
                                                              : tr("the model you load")));
}

void MainWindow::detectHardware() {
  system_->showProbing();
  cpu_status_->setText(tr("Detecting hardware…"));
  probe_->start(modelsFolder());
}

void MainWindow::onReport(const HardwareReportPtr& report) {
  system_->setReport(report);
  if (report) {
    const auto& rec = report->recommendation;
    cpu_status_->setText(
        tr("CPU: %1 · %2 threads")
            .arg(QString::fromUtf8(hw::backend_label(rec.cpu_backend.value).data()))
            .arg(rec.cpu_threads.value));
    const auto& gpus = report->gpus.devices;
    const auto usable =
        std::find_if(gpus.begin(), gpus.end(), [](const hw::GpuDevice& d) { return d.usable; });
    gpu_found_ = usable == gpus.end() ? QString() : QString::fromStdString(usable->name);
    showAcceleratorStatus();
  }
  emit hardwareDetected(report);
}

void MainWindow::showAcceleratorStatus() {
  if (!accelerator_in_use_.isEmpty()) {
    gpu_status_->setText(tr("Accelerator: %1")
                             .arg(accelerator_in_use_.section(QStringLiteral(" ("), 0, 0)
                                      .remove(tr(" accelerator"))));
    gpu_status_->setToolTip(accelerator_in_use_);
  } else if (!gpu_found_.isEmpty()) {
    gpu_status_->setText(tr("GPU: %1 · not in use").arg(gpu_found_));
    gpu_status_->setToolTip(tr("The model runs on the CPU; the System page says why."));
  } else {
    gpu_status_->setText(tr("No GPU: all on CPU"));
    gpu_status_->setToolTip({});
  }
}

void MainWindow::showPage(Page page) {
  navigation_->setCurrentRow(static_cast<int>(page));
}

MainWindow::Page MainWindow::currentPage() const {
  return static_cast<Page>(pages_->currentIndex());
}

QString MainWindow::statusSummary() const {
  return QStringList{
      model_status_->text(), speed_status_->text(),
      context_bar_->isVisible() ? tr("context %1").arg(context_bar_->format()) : QString(),
      cpu_status_->text(), gpu_status_->text()}
      .join(QStringLiteral(" | "));
}

QString MainWindow::aboutText() const {
  const QString image = desktop_integration::appimage_path();
  return tr("<h3>Tandem %1</h3><p>Runs large mixture-of-experts language models on one "
            "workstation, with the GPU and the CPU working in tandem.</p>"
            "<p>Build: %2</p><p>Running from: %3</p><p>Log file: %4</p>")
      .arg(QString::fromUtf8(kTandemVersion), QString::fromUtf8(kTandemBuild).toHtmlEscaped(),
           image.isEmpty() ? QCoreApplication::applicationFilePath().toHtmlEscaped()
                           : tr("the AppImage %1").arg(image.toHtmlEscaped()),
           QString::fromStdString(log::file_path()).toHtmlEscaped());
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About Tandem"), aboutText());
}

void MainWindow::offerMenuEntry() {
  const QString image = desktop_integration::appimage_path();
  if (image.isEmpty() || desktop_integration::installed() || desktop_integration::asked()) return;
  desktop_integration::set_asked();
  auto* box = new QMessageBox(
      QMessageBox::Question, tr("Add Tandem to the menu?"),
      tr("Tandem runs from its AppImage (%1). Add it to your applications menu, with its icon, "
         "so it starts like any other app? Preferences can remove it again.")
          .arg(image),
      QMessageBox::NoButton, this);
  box->setObjectName(QStringLiteral("menuEntryOffer"));
  QPushButton* add = box->addButton(tr("Add to Menu"), QMessageBox::AcceptRole);
  box->addButton(tr("Not Now"), QMessageBox::RejectRole);
  box->setAttribute(Qt::WA_DeleteOnClose);
  connect(box, &QMessageBox::buttonClicked, this, [this, add, image](QAbstractButton* b) {
    if (b != add) return;
    const QString problem = desktop_integration::install(image);
    if (problem.isEmpty()) return;
    // Not modal either: the window goes on while the user reads why.
    auto* failed = new QMessageBox(QMessageBox::Warning, tr("Add Tandem to the menu"),
                                   tr("Tandem could not add its menu entry: %1").arg(problem),
                                   QMessageBox::Ok, this);
    failed->setAttribute(Qt::WA_DeleteOnClose);
    failed->open();
  });
  box->open();
}

void MainWindow::restoreSettings() {
  QSettings settings;
  restoreGeometry(settings.value(kGeometryKey).toByteArray());
  if (!restoreState(settings.value(kStateKey).toByteArray())) {
    // A first start: the live panel as wide as its charts and labels need.
    resizeDocks({live_dock_}, {290}, Qt::Horizontal);
  }
  const int page = settings.value(kPageKey, 0).toInt();
  if (page >= 0 && page < pages_->count()) showPage(static_cast<Page>(page));
}

void MainWindow::saveSettings() const {
  QSettings settings;
  settings.setValue(kGeometryKey, saveGeometry());
  settings.setValue(kStateKey, saveState());
  settings.setValue(kPageKey, pages_->currentIndex());
}

void MainWindow::closeEvent(QCloseEvent* event) {
  saveSettings();
  QMainWindow::closeEvent(event);
}

}  // namespace tandem::ui
