#include "app/serve_command.h"

#include <unistd.h>
#include <QCoreApplication>
#include <QHostAddress>
#include <QSocketNotifier>
#include <csignal>
#include <cstdio>

#include "app/load_progress_printer.h"
#include "server/openai_server.h"
#include "ui/engine_host.h"

namespace tandem::app {
namespace {

int g_signal_pipe[2] = {-1, -1};
extern "C" void on_serve_signal(int) {
  const char c = 1;
  [[maybe_unused]] const auto n = ::write(g_signal_pipe[1], &c, 1);
}

}  // namespace

int run_serve(int argc, char** argv, const ServeOptions& o) {
  forward::RunSettings settings;
  settings.load.pools = o.pools;
  settings.threads = o.threads;
  settings.context = o.context;
  std::string error;
  if (!resolve_engine_flags(o.engine, o.threads > 0, o.pools > 0, settings, error)) {
    std::fprintf(stderr, "tandem: %s\n", error.c_str());
    return 2;
  }
  server::ServerOptions options;
  if (!options.address.setAddress(QString::fromStdString(o.host))) {
    std::fprintf(stderr,
                 "tandem: --host %s is not an IP address; give one such as 127.0.0.1 or 0.0.0.0.\n",
                 o.host.c_str());
    return 2;
  }
  options.port = static_cast<quint16>(o.port);
  options.api_key = QString::fromStdString(o.api_key);
  if (options.api_key.isEmpty()) options.api_key = qEnvironmentVariable("TANDEM_API_KEY");
  for (const std::string& origin : o.cors) options.cors_origins << QString::fromStdString(origin);
  options.max_waiting = o.max_waiting;
  options.max_body_bytes = static_cast<qint64>(o.max_body_mib) << 20;

  QCoreApplication app(argc, argv);
  ui::EngineHost engine;
  server::OpenAiServer http(engine, options);
  int status = 0;
  QObject::connect(
      &engine, &ui::EngineHost::loadProgress, &app,
      [](const QString&, const QString& stage, qint64 done, qint64 total) {
        stderr_load_progress().update(
            {stage.toStdString(), static_cast<std::size_t>(done), static_cast<std::size_t>(total)});
      });
  QObject::connect(&engine, &ui::EngineHost::modelLoaded, &app, [&](const ui::ModelInfo& info) {
    stderr_load_progress().finish();
    const QString problem = http.start();
    if (!problem.isEmpty()) {
      std::fprintf(stderr, "tandem: %s\n", problem.toUtf8().constData());
      status = 2;
      app.quit();
      return;
    }
    std::printf("Serving %s (%d threads, context %lld) at %s/v1\n", info.name.toUtf8().constData(),
                info.threads, static_cast<long long>(info.context),
                http.address().toUtf8().constData());
    if (!options.api_key.isEmpty()) std::printf("Clients must send the API key.\n");
    std::printf("Press Ctrl+C to stop.\n");
    std::fflush(stdout);
  });
  QObject::connect(&engine, &ui::EngineHost::modelLoadFailed, &app,
                   [&](const QString&, const QString& message, bool) {
                     stderr_load_progress().finish();
                     std::fprintf(stderr, "tandem: %s\n", message.toUtf8().constData());
                     status = 1;
                     app.quit();
                   });
  // Ctrl+C and SIGTERM end the event loop: running replies stop, sockets close.
  if (::pipe(g_signal_pipe) == 0) {
    auto* notifier = new QSocketNotifier(g_signal_pipe[0], QSocketNotifier::Read, &app);
    QObject::connect(notifier, &QSocketNotifier::activated, &app, [&] {
      char c;
      [[maybe_unused]] const auto n = ::read(g_signal_pipe[0], &c, 1);
      std::printf("Stopping.\n");
      app.quit();
    });
    std::signal(SIGINT, on_serve_signal);
    std::signal(SIGTERM, on_serve_signal);
  }
  ui::LoadRequest request;
  request.folder = QString::fromStdString(o.model);
  request.settings = settings;
  engine.loadModel(request);
  app.exec();
  http.stop();
  return status;
}

}  // namespace tandem::app
