// Routes the engine's log records into Qt's logging (category "tandem.engine"), and Qt's own
// messages into the engine's log file, so the desktop app has one logging path.
#pragma once

#include <QLoggingCategory>

Q_DECLARE_LOGGING_CATEGORY(lcEngine)

namespace tandem::ui {

void install_log_bridge();
void remove_log_bridge();

}  // namespace tandem::ui
