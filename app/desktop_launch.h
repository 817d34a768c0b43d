#pragma once

#include <QSize>
#include <QString>
#include <functional>
#include <string>

namespace tandem::forward {
struct RunSettings;
}

namespace tandem::app {

struct DesktopOptions {
  QString screenshot_path;  // non-empty: render the main window offscreen to this PNG and exit
  QString page;             // "chat", "system" or "downloads"
  QString prompt;  // with a screenshot: sent in a new chat, captured while the reply streams
  QSize size{1280, 800};
  // --accelerator and the hybrid parameters given on the command line, applied to every model
  // the window loads after its profile.
  std::function<bool(forward::RunSettings&, std::string&)> engine_overrides;
};

// True when a window can be shown: a display, or a Qt platform chosen explicitly.
bool display_available();

int run_desktop(int argc, char** argv, const DesktopOptions& options);

}  // namespace tandem::app
