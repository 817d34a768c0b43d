#include "ui/log_bridge.h"

#include "engine/log/log.h"

Q_LOGGING_CATEGORY(lcEngine, "tandem.engine")

namespace tandem::ui {
namespace {

QtMessageHandler g_previous = nullptr;
// Set while a Qt message is being written into the engine log, so that the record is not
// forwarded back into Qt (which would print it twice or loop).
thread_local bool t_from_qt = false;

void handle_qt_message(QtMsgType type, const QMessageLogContext& context, const QString& text) {
  const bool engine_record = context.category && qstrcmp(context.category, "tandem.engine") == 0;
  if (!engine_record) {
    t_from_qt = true;
    const std::string message = context.category && qstrcmp(context.category, "default") != 0
                                    ? std::string(context.category) + ": " + text.toStdString()
                                    : text.toStdString();
    switch (type) {
      case QtDebugMsg:
        log::debug("{}", message);
        break;
      case QtInfoMsg:
        log::info("{}", message);
        break;
      case QtWarningMsg:
        log::warn("{}", message);
        break;
      case QtCriticalMsg:
      case QtFatalMsg:
        log::error("{}", message);
        break;
    }
    t_from_qt = false;
  }
  if (g_previous) g_previous(type, context, text);
}

}  // namespace

void install_log_bridge() {
  log::set_forwarder([](log::Level level, std::string_view message) {
    if (t_from_qt) return;
    const QString text = QString::fromUtf8(message.data(), static_cast<qsizetype>(message.size()));
    switch (level) {
      case log::Level::Trace:
      case log::Level::Debug:
        qCDebug(lcEngine).noquote() << text;
        break;
      case log::Level::Info:
        qCInfo(lcEngine).noquote() << text;
        break;
      case log::Level::Warn:
        qCWarning(lcEngine).noquote() << text;
        break;
      case log::Level::Error:
        qCCritical(lcEngine).noquote() << text;
        break;
    }
  });
  QtMessageHandler previous = qInstallMessageHandler(handle_qt_message);
  if (previous != handle_qt_message) g_previous = previous;
}

void remove_log_bridge() {
  log::set_forwarder({});
  qInstallMessageHandler(g_previous);
  g_previous = nullptr;
}

}  // namespace tandem::ui
