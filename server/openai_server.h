// The local OpenAI-compatible server: /v1/chat/completions, /v1/completions, /v1/models
// and /health over Qt HttpServer, on the model whoever holds it (the desktop app, `tandem
// serve`) lends through serve::CompletionPort. Bound to 127.0.0.1 unless told otherwise, and
// then only with an API key; CORS off unless origins are allowed; bodies, queues and prompts
// bounded; every bad request answered with a 4xx and OpenAI's error object.
#pragma once

#include <QHostAddress>
#include <QObject>
#include <QStringList>
#include <memory>
#include <vector>

#include "engine/serve/completion.h"

class QHttpServer;
class QTcpServer;

namespace tandem::server {

struct ServerOptions {
  QHostAddress address = QHostAddress::LocalHost;
  quint16 port = 8080;       // 0: any free port
  QString api_key;           // required unless the address is this computer's own
  QStringList cors_origins;  // origins allowed to call from a browser; "*" for any
  qint64 max_body_bytes = 8 << 20;
  int max_waiting = 8;  // requests queued behind the running one; more get 429
  serve::RequestLimits limits;
};

class Exchange;

class OpenAiServer : public QObject {
  Q_OBJECT
 public:
  OpenAiServer(serve::CompletionPort& port, ServerOptions options, QObject* parent = nullptr);
  ~OpenAiServer() override;

  // Starts listening; an empty string when it works, else a sentence for the user.
  QString start();
  // Stops listening, and the generations of requests still running or waiting stop at their
  // next token (the window closing, the switch turned off). Also on destruction.
  void stop();
  bool isListening() const;
  QString address() const;  // "http://127.0.0.1:8080"
  quint16 port() const { return bound_port_; }
  const ServerOptions& options() const { return options_; }

  int requestsServed() const { return served_; }
  int inFlight() const { return in_flight_; }
  double lastTokensPerSecond() const { return last_tokens_per_s_; }

 signals:
  // A completion ended (served, failed or cancelled), or one started: for the status bar.
  void activityChanged();

 private:
  friend class Exchange;
  void finished(double tokens_per_s, double seconds);
  void cancel_jobs();

  serve::CompletionPort& port_;
  ServerOptions options_;
  std::unique_ptr<QHttpServer> http_;
  QTcpServer* tcp_ = nullptr;  // owned by http_
  quint16 bound_port_ = 0;
  int in_flight_ = 0;  // running and waiting
  int served_ = 0;
  double last_tokens_per_s_ = 0;
  double mean_seconds_ = 2.0;  // of a request, for Retry-After
  quint64 next_id_ = 1;
  std::vector<std::weak_ptr<serve::CompletionJob>> jobs_;  // submitted, maybe finished
};

}  // namespace tandem::server
