#include "app/desktop_launch.h"

#include <QApplication>
#include <QIcon>
#include <QPlainTextEdit>
#include <QTimer>
#include <cstdio>
#include <memory>

#include "ui/chat_page.h"
#include "ui/engine_host.h"
#include "ui/live_panel.h"
#include "ui/log_bridge.h"
#include "ui/main_window.h"
#include "ui/setup_wizard.h"
#include "ui/theme.h"

// The icons are compiled into the static tandem_ui library; register them at start-up.
static void init_resources() {
  Q_INIT_RESOURCE(resources);
}

namespace tandem::app {

bool display_available() {
  return !qEnvironmentVariableIsEmpty("DISPLAY") ||
         !qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY") ||
         !qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM");
}

int run_desktop(int argc, char** argv, const DesktopOptions& options) {
  const bool screenshot = !options.screenshot_path.isEmpty();
  if (screenshot && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }
  QApplication app(argc, argv);
  init_resources();
  app.setWindowIcon(QIcon(QStringLiteral(":/tandem/icons/tandem.svg")));
  ui::theme::apply(app);
  ui::install_log_bridge();

  ui::MainWindow window(nullptr, {}, options.engine_overrides);
  if (options.page == QLatin1String("system")) window.showPage(ui::MainWindow::Page::System);
  if (options.page == QLatin1String("chat")) window.showPage(ui::MainWindow::Page::Chat);
  if (options.page == QLatin1String("downloads")) window.showPage(ui::MainWindow::Page::Downloads);
  if (options.page == QLatin1String("models")) window.showPage(ui::MainWindow::Page::Models);

  int status = 0;
  if (screenshot) {
    window.resize(options.size);
    window.show();
    // The screenshot waits for the hardware probe so the System page shows real findings.
    auto save = [&] {
      // The live panel as it stands now, not as of its last poll (a short reply can end
      // between two).
      window.livePanelWidget()->poll();
      QApplication::processEvents();
      const QPixmap pixmap = window.grab();
      if (!pixmap.save(options.screenshot_path, "PNG")) {
        std::fprintf(stderr,
                     "tandem: could not write the screenshot to %s; check that the folder exists "
                     "and is writable.\n",
                     qPrintable(options.screenshot_path));
        status = 1;
      }
      app.quit();
    };
    if (options.prompt.isEmpty()) {
      QObject::connect(&window, &ui::MainWindow::hardwareDetected, &app,
                       [&] { QTimer::singleShot(50, &app, save); });
    } else {
      // A screenshot of a reply as it streams: send the prompt once the model is loaded and
      // capture after a few dozen pieces have arrived.
      QObject::connect(window.engine(), &ui::EngineHost::modelLoaded, &app, [&] {
        window.chatPage()->newConversation();
        window.chatPage()->composer()->setPlainText(options.prompt);
        window.chatPage()->send();
      });
      auto pieces = std::make_shared<int>(0);
      QObject::connect(window.engine(), &ui::EngineHost::turnDelta, &app, [&, pieces] {
        if (++*pieces == 40) QTimer::singleShot(100, &app, save);
      });
      QObject::connect(window.engine(), &ui::EngineHost::turnFinished, &app, [&, pieces] {
        if (*pieces < 40) QTimer::singleShot(400, &app, save);
      });
    }
    QTimer::singleShot(30000, &app, [&] {
      std::fprintf(
          stderr, "tandem: the hardware probe took over 30 s; saving the screenshot without it.\n");
      save();
    });
  } else {
    window.show();
    // The first start walks the user through the setup assistant (the demo model already
    // answers in the chat behind it).
    if (!ui::SetupWizard::completedBefore() && !ui::SetupWizard::dismissedBefore())
      QTimer::singleShot(0, &window, &ui::MainWindow::openSetupAssistant);
    else
      QTimer::singleShot(0, &window, &ui::MainWindow::offerMenuEntry);
  }
  const int code = app.exec();
  ui::remove_log_bridge();
  return status != 0 ? status : code;
}

}  // namespace tandem::app
