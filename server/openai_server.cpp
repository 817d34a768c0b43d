#include "server/openai_server.h"

#include <QDateTime>
#include <QHttpServer>
#include <QHttpServerRequest>
#include <QHttpServerResponder>
#include <QMetaObject>
#include <QPointer>
#include <QTcpServer>
#include <QTcpSocket>
#include <QUrl>
#include <algorithm>
#include <cmath>

#include "engine/log/log.h"

namespace tandem::server {

using nlohmann::json;
using Status = QHttpServerResponder::StatusCode;

namespace {

constexpr const char* kReceived = "tandemReceived";

// What the server writes: model text may hold invalid UTF-8, written as U+FFFD.
QByteArray json_bytes(const json& j) {
  return QByteArray::fromStdString(serve::json_text(j));
}

QByteArray header(const QHttpServerRequest& request, QByteArrayView name) {
  for (const auto& [key, value] : request.headers())
    if (key.compare(name, Qt::CaseInsensitive) == 0) return value;
  return {};
}

QByteArray error_body(int status, const std::string& message, const std::string& param = {},
                      const std::string& code = {}) {
  return json_bytes(serve::RequestError(status, message, param, code).body());
}

// Counts what each connection sends before a request is whole, and closes it with a 413
// when that passes the limit, so a huge body is never buffered in full.
class LimitedTcpServer : public QTcpServer {
 public:
  LimitedTcpServer(qint64 limit, QObject* parent) : QTcpServer(parent), limit_(limit) {}

 protected:
  void incomingConnection(qintptr descriptor) override {
    auto* socket = new QTcpSocket(this);
    if (!socket->setSocketDescriptor(descriptor)) {
      delete socket;
      return;
    }
    socket->setProperty(kReceived, qint64{0});
    // Connected before the HTTP server's own reader: it sees the bytes first.
    connect(socket, &QTcpSocket::readyRead, socket, [socket, limit = limit_] {
      const qint64 received = socket->property(kReceived).toLongLong() + socket->bytesAvailable();
      socket->setProperty(kReceived, received);
      if (received <= limit) return;
      socket->readAll();  // dropped: the HTTP server sees nothing of it
      const QByteArray body =
          error_body(413, "The request is larger than the server accepts (" +
                              std::to_string(limit >> 20) + " MiB). Send a shorter conversation.");
      socket->write(
          "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
          "Connection: close\r\nContent-Length: " +
          QByteArray::number(body.size()) + "\r\n\r\n" + body);
      socket->disconnectFromHost();
    });
    addPendingConnection(socket);
  }

 private:
  qint64 limit_;
};

}  // namespace

// One request, from its arrival to its last byte. It lives until the engine has called its
// job's on_done, even when the client went away first, so the engine's thread never posts
// to a deleted object.
class Exchange : public QObject {
 public:
  enum class Kind { Chat, Text };

  Exchange(OpenAiServer* server, QHttpServerResponder&& responder, Kind kind,
           QList<std::pair<QByteArray, QByteArray>> cors)
      : server_(server),
        responder_(std::move(responder)),
        socket_(responder_.socket()),
        kind_(kind),
        cors_(std::move(cors)) {
    created_ = QDateTime::currentSecsSinceEpoch();
    started_ms_ = QDateTime::currentMSecsSinceEpoch();
  }

  void begin(std::shared_ptr<serve::CompletionJob> job, std::string model, std::string id) {
    job_ = job;
    model_ = std::move(model);
    id_ = std::move(id);
    stream_ = job->request.stream;
    include_usage_ = job->request.include_usage;
    // A client that goes away stops its generation at the next token.
    if (socket_)
      connect(socket_, &QTcpSocket::disconnected, this, [job] { job->cancel.store(true); });
    Exchange* raw = this;
    job->on_delta = [raw](const serve::StreamDelta& d) {
      QMetaObject::invokeMethod(
          raw, [raw, d] { raw->delta(d); }, Qt::QueuedConnection);
    };
    job->on_done = [raw](const serve::CompletionResult& r, const serve::RequestError* e) {
      std::optional<serve::RequestError> error;
      if (e != nullptr) error.emplace(*e);
      QMetaObject::invokeMethod(
          raw, [raw, r, error] { raw->done(r, error ? &*error : nullptr); }, Qt::QueuedConnection);
    };
    if (stream_ && connected()) {
      responder_.writeStatusLine(Status::Ok);
      writeHeaders({{"Content-Type", "text/event-stream"},
                    {"Cache-Control", "no-cache"},
                    {"Transfer-Encoding", "chunked"}});
      if (kind_ == Kind::Chat) event(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
    }
  }

 private:
  bool connected() const { return socket_ && socket_->state() == QAbstractSocket::ConnectedState; }

  void writeHeaders(std::initializer_list<std::pair<QByteArray, QByteArray>> headers) {
    for (const auto& [k, v] : headers) responder_.writeHeader(k, v);
    for (const auto& [k, v] : cors_) responder_.writeHeader(k, v);
    responder_.writeBody("");  // ends the header block
  }

  void writeChunk(const QByteArray& data) {
    if (!connected()) return;
    responder_.writeBody(QByteArray::number(data.size(), 16) + "\r\n" + data + "\r\n");
  }
  void event(const json& j) { writeChunk("data: " + json_bytes(j) + "\n\n"); }

  json chunk(const json& delta, const json& finish) const {
    json c = {{"id", id_}, {"created", created_}, {"model", model_}};
    if (kind_ == Kind::Chat) {
      c["object"] = "chat.completion.chunk";
      c["choices"] = json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}});
    } else {
      c["object"] = "text_completion";
      c["choices"] = json::array({{{"index", 0},
                                   {"text", delta.value("content", std::string())},
                                   {"logprobs", nullptr},
                                   {"finish_reason", finish}}});
    }
    return c;
  }

  void delta(const serve::StreamDelta& d) {
    if (!stream_) return;
    json delta = json::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.content.empty()) delta["content"] = d.content;
    if (kind_ == Kind::Text && d.content.empty()) return;
    event(chunk(delta, nullptr));
  }

  static json usage(const serve::CompletionResult& r) {
    return {{"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.completion_tokens},
            {"total_tokens", r.prompt_tokens + r.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
  }

  static json tool_calls(const serve::CompletionResult& r, bool indexed) {
    json calls = json::array();
    for (std::size_t i = 0; i < r.tool_calls.size(); ++i) {
      const serve::ToolCall& c = r.tool_calls[i];
      json j = {{"id", c.id},
                {"type", "function"},
                {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
      if (indexed) j["index"] = i;
      calls.push_back(std::move(j));
    }
    return calls;
  }

  void done(const serve::CompletionResult& r, const serve::RequestError* error) {
    const double tps = r.decode_seconds > 0 && r.completion_tokens > 1
                           ? (r.completion_tokens - 1) / r.decode_seconds
                           : 0.0;
    if (connected()) {
      if (error != nullptr) {
        if (stream_) {
          event(error->body());
          writeChunk("data: [DONE]\n\n");
          responder_.writeBody("0\r\n\r\n");
        } else {
          respond(error->status(), json_bytes(error->body()));
        }
      } else if (stream_) {
        if (kind_ == Kind::Chat && !r.tool_calls.empty())
          event(chunk({{"tool_calls", tool_calls(r, true)}}, nullptr));
        event(chunk(json::object(), r.finish_reason));
        if (include_usage_) {
          json u = chunk(json::object(), nullptr);
          u["choices"] = json::array();
          u["usage"] = usage(r);
          event(u);
        }
        writeChunk("data: [DONE]\n\n");
        responder_.writeBody("0\r\n\r\n");
      } else {
        json body = {{"id", id_}, {"created", created_}, {"model", model_}, {"usage", usage(r)}};
        if (kind_ == Kind::Chat) {
          json message = {
              {"role", "assistant"},
              {"content",
               r.content.empty() && !r.tool_calls.empty() ? json(nullptr) : json(r.content)}};
          if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
          if (!r.tool_calls.empty()) message["tool_calls"] = tool_calls(r, false);
          body["object"] = "chat.completion";
          body["choices"] = json::array(
              {{{"index", 0}, {"message", message}, {"finish_reason", r.finish_reason}}});
        } else {
          body["object"] = "text_completion";
          body["choices"] = json::array({{{"index", 0},
                                          {"text", r.content},
                                          {"logprobs", nullptr},
                                          {"finish_reason", r.finish_reason}}});
        }
        respond(200, json_bytes(body));
      }
    }
    if (server_)
      server_->finished(error == nullptr && !r.cancelled ? tps : -1.0,
                        (QDateTime::currentMSecsSinceEpoch() - started_ms_) / 1000.0);
    job_.reset();
    deleteLater();
  }

 public:
  void respond(int status, const QByteArray& body, const QByteArray& retry_after = {}) {
    if (!connected()) return;
    responder_.writeStatusLine(static_cast<Status>(status));
    if (!retry_after.isEmpty()) responder_.writeHeader("Retry-After", retry_after);
    writeHeaders({{"Content-Type", "application/json"},
                  {"Content-Length", QByteArray::number(body.size())}});
    responder_.writeBody(body);
    if (socket_) socket_->setProperty(kReceived, qint64{0});
  }

 private:
  QPointer<OpenAiServer> server_;
  QHttpServerResponder responder_;
  QPointer<QTcpSocket> socket_;
  Kind kind_;
  QList<std::pair<QByteArray, QByteArray>> cors_;
  std::shared_ptr<serve::CompletionJob> job_;
  std::string model_;
  std::string id_;
  qint64 created_ = 0;
  qint64 started_ms_ = 0;
  bool stream_ = false;
  bool include_usage_ = false;
};

OpenAiServer::OpenAiServer(serve::CompletionPort& port, ServerOptions options, QObject* parent)
    : QObject(parent), port_(port), options_(std::move(options)) {}

OpenAiServer::~OpenAiServer() {
  cancel_jobs();  // no signal from here: the receivers may be going too
}

void OpenAiServer::cancel_jobs() {
  for (const auto& weak : jobs_)
    if (const auto job = weak.lock()) job->cancel.store(true);
  jobs_.clear();
}

bool OpenAiServer::isListening() const {
  return http_ != nullptr && tcp_ != nullptr && tcp_->isListening();
}

QString OpenAiServer::address() const {
  QHostAddress shown = options_.address;
  if (shown == QHostAddress::Any || shown == QHostAddress::AnyIPv4) shown = QHostAddress::LocalHost;
  const QString host = shown.protocol() == QAbstractSocket::IPv6Protocol
                           ? QStringLiteral("[%1]").arg(shown.toString())
                           : shown.toString();
  return QStringLiteral("http://%1:%2").arg(host).arg(bound_port_);
}

void OpenAiServer::stop() {
  cancel_jobs();
  http_.reset();
  tcp_ = nullptr;
  bound_port_ = 0;
  emit activityChanged();
}

void OpenAiServer::finished(double tokens_per_s, double seconds) {
  in_flight_ = std::max(0, in_flight_ - 1);
  mean_seconds_ = 0.8 * mean_seconds_ + 0.2 * seconds;
  if (tokens_per_s >= 0) {
    ++served_;
    last_tokens_per_s_ = tokens_per_s;
  }
  emit activityChanged();
}

QString OpenAiServer::start() {
  stop();
  if (!options_.address.isLoopback() && options_.api_key.isEmpty())
    return tr("Serving on %1 lets other computers use the model, so it needs an API key: give one "
              "(--api-key, or in the server settings), or serve on 127.0.0.1.")
        .arg(options_.address.toString());
  http_ = std::make_unique<QHttpServer>();
  auto* tcp = new LimitedTcpServer(options_.max_body_bytes + (64 << 10), http_.get());
  if (!tcp->listen(options_.address, options_.port)) {
    const QString why = tcp->errorString();
    http_.reset();
    return tr("The server cannot listen on %1 port %2: %3. Choose another port (--port).")
        .arg(options_.address.toString())
        .arg(options_.port)
        .arg(why);
  }
  tcp_ = tcp;
  bound_port_ = tcp->serverPort();
  http_->bind(tcp);

  // Every request comes here: the routes are few, and each answers its errors itself.
  http_->setMissingHandler([this](const QHttpServerRequest& request,
                                  QHttpServerResponder&& responder) {
    const QString path = request.url().path();
    const auto method = request.method();
    using Method = QHttpServerRequest::Method;

    QList<std::pair<QByteArray, QByteArray>> cors;
    const QByteArray origin = header(request, "Origin");
    if (!origin.isEmpty() && (options_.cors_origins.contains(QStringLiteral("*")) ||
                              options_.cors_origins.contains(QString::fromUtf8(origin)))) {
      cors = {{"Access-Control-Allow-Origin", origin},
              {"Vary", "Origin"},
              {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
              {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"}};
    }
    auto* exchange = new Exchange(this, std::move(responder),
                                  path.endsWith(QLatin1String("/completions")) &&
                                          !path.endsWith(QLatin1String("/chat/completions"))
                                      ? Exchange::Kind::Text
                                      : Exchange::Kind::Chat,
                                  cors);
    const auto answer = [exchange](int status, const QByteArray& body) {
      exchange->respond(status, body);
      exchange->deleteLater();
    };
    if (method == Method::Options) {
      if (cors.isEmpty())
        return answer(403,
                      error_body(403, "Cross-origin requests are not allowed by this server."));
      return answer(204, {});
    }
    if (!options_.api_key.isEmpty() && path != QLatin1String("/health")) {
      const QByteArray given = header(request, "Authorization");
      const QByteArray wanted = "Bearer " + options_.api_key.toUtf8();
      // Compared in full, whatever differs first.
      bool same = given.size() == wanted.size();
      unsigned char diff = 0;
      for (qsizetype i = 0; same && i < wanted.size(); ++i) diff |= given[i] ^ wanted[i];
      if (!same || diff != 0)
        return answer(401, error_body(401,
                                      "The API key is missing or wrong: send "
                                      "'Authorization: Bearer <key>' with the key this server "
                                      "was started with.",
                                      {}, "invalid_api_key"));
    }
    const std::string model = port_.served_model();
    if (path == QLatin1String("/health")) {
      if (method != Method::Get) return answer(405, error_body(405, "Use GET for /health."));
      return answer(model.empty() ? 503 : 200,
                    json_bytes(json{{"status", model.empty() ? "no model loaded" : "ok"},
                                    {"model", model.empty() ? json(nullptr) : json(model)}}));
    }
    if (path == QLatin1String("/v1/models") || path.startsWith(QLatin1String("/v1/models/"))) {
      if (method != Method::Get) return answer(405, error_body(405, "Use GET for /v1/models."));
      const json entry = {
          {"id", model}, {"object", "model"}, {"created", 0}, {"owned_by", "tandem"}};
      if (path == QLatin1String("/v1/models"))
        return answer(
            200, json_bytes(json{{"object", "list"},
                                 {"data", model.empty() ? json::array() : json::array({entry})}}));
      const std::string asked = QUrl::fromPercentEncoding(path.mid(11).toUtf8()).toStdString();
      if (model.empty() || asked != model)
        return answer(
            404,
            error_body(404,
                       "There is no model '" + asked + "' here; this server has " +
                           (model.empty() ? std::string("none loaded") : "'" + model + "'") + ".",
                       "model", "model_not_found"));
      return answer(200, json_bytes(entry));
    }
    const bool chat = path == QLatin1String("/v1/chat/completions");
    const bool text = path == QLatin1String("/v1/completions");
    if (!chat && !text)
      return answer(404, error_body(404, "There is nothing at " + path.toStdString() +
                                             ". This server answers /v1/chat/completions, "
                                             "/v1/completions, /v1/models and /health."));
    if (method != Method::Post)
      return answer(405, error_body(405, "Use POST for " + path.toStdString() + "."));
    if (model.empty())
      return answer(503,
                    error_body(503, "No model is loaded yet; load one in Tandem, then try again."));

    auto job = std::make_shared<serve::CompletionJob>();
    try {
      const QByteArray raw = request.body();
      json body = json::parse(raw.begin(), raw.end(), nullptr, false);
      if (body.is_discarded())
        throw serve::RequestError(400, "The request body is not valid JSON.");
      job->request = chat ? serve::parse_chat_request(body, options_.limits)
                          : serve::parse_completion_request(body, options_.limits);
    } catch (const serve::RequestError& e) {
      return answer(e.status(), json_bytes(e.body()));
    } catch (const std::exception& e) {
      // A shape the checks above did not foresee: still the client's request at fault.
      return answer(400,
                    error_body(400, std::string("The request could not be read: ") + e.what()));
    }
    if (in_flight_ >= 1 + options_.max_waiting) {
      const int wait = std::clamp(static_cast<int>(std::ceil(mean_seconds_ * in_flight_)), 1, 120);
      exchange->respond(429,
                        error_body(429,
                                   "The server is busy with " + std::to_string(in_flight_) +
                                       " requests; try again in " + std::to_string(wait) + " s.",
                                   {}, "server_busy"),
                        QByteArray::number(wait));
      exchange->deleteLater();
      return;
    }
    ++in_flight_;
    emit activityChanged();
    exchange->begin(job, model, (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id_++));
    std::erase_if(jobs_, [](const auto& weak) { return weak.expired(); });
    jobs_.push_back(job);
    port_.submit(job);
  });
  log::info("server: serving {} at {}", port_.served_model(), address().toStdString());
  emit activityChanged();
  return {};
}

}  // namespace tandem::server
