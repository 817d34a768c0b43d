// The HTTP side of the local server, on a scripted model: every route, streaming and not,
// tool calls, the API key, CORS, bodies too large, a full queue, clients that leave, and a
// bounded load of concurrent clients with every response whole.
#include <QtTest>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "../support/http_client.h"
#include "engine/serve/completion.h"
#include "server/openai_server.h"

using nlohmann::json;
using tandem::test::http;
using tandem::test::HttpRequest;
using tandem::test::HttpResponse;
using namespace tandem;

namespace {

// A model that writes a fixed reply, a piece every `delay_ms`, on one thread of its own (as
// the engine runs requests one at a time), through the same assembler the real one uses.
class ScriptedPort : public serve::CompletionPort {
 public:
  ScriptedPort() : worker_([this] { loop(); }) {}
  ~ScriptedPort() override {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  std::string served_model() const override { return "scripted"; }
  void submit(std::shared_ptr<serve::CompletionJob> job) override {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    wake_.notify_all();
  }
  std::atomic<int> delay_ms{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> started{0};
  std::atomic<long long> cancel_seen_ms{0};  // when the last cancel was noticed

 private:
  void loop() {
    for (;;) {
      std::shared_ptr<serve::CompletionJob> job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return quit_ || !jobs_.empty(); });
        if (quit_) return;
        job = jobs_.front();
        jobs_.pop_front();
      }
      run(*job);
    }
  }
  void run(serve::CompletionJob& job) {
    ++started;
    const serve::CompletionRequest& r = job.request;
    std::vector<std::string> pieces;
    if (r.prompt) {
      pieces = {" once", " upon", " a", " time"};
    } else if (r.messages.back()["content"].get<std::string>().find("weather") !=
               std::string::npos) {
      pieces = {"<think>Needs", " a tool.</think>", "Checking.\n\n<tool_", "call>\n{\"name\": ",
                "\"get_weather\", \"arguments\": {\"location\": \"Tokyo\"}}\n</tool_call>"};
    } else {
      pieces = {"Hello", " from", " the", " script", "."};
    }
    serve::ReplyAssembler a(r.tools.is_null() ? serve::ToolFormat::None : serve::ToolFormat::Hermes,
                            r.tools, r.stop, "", !r.prompt, std::nullopt, job.on_delta);
    int written = 0;
    bool stopped = false;
    for (const std::string& p : pieces) {
      if (job.cancel.load()) {
        ++cancelled;
        cancel_seen_ms = QDateTime::currentMSecsSinceEpoch();
        stopped = true;
        break;
      }
      if (r.max_tokens && written >= *r.max_tokens) break;
      ++written;
      if (!a.push(0, p)) break;
      if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
    }
    std::uint64_t next = 1;
    a.finish("", next);
    serve::CompletionResult result = a.result();
    result.prompt_tokens = 10;
    result.completion_tokens = written;
    result.cancelled = stopped;
    result.decode_seconds = 0.01;
    result.finish_reason = !result.tool_calls.empty()                 ? "tool_calls"
                           : r.max_tokens && written >= *r.max_tokens ? "length"
                                                                      : "stop";
    job.on_done(result, nullptr);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<serve::CompletionJob>> jobs_;
  bool quit_ = false;
  std::thread worker_;
};

const json kTools = json::array(
    {{{"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"parameters",
         {{"type", "object"}, {"properties", {{"location", {{"type", "string"}}}}}}}}}}});

json chat_body(const std::string& text, bool stream = false) {
  json b = {{"model", "scripted"}, {"messages", {{{"role", "user"}, {"content", text}}}}};
  if (stream) b["stream"] = true;
  return b;
}

HttpRequest post(const std::string& path, const json& body) {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.body = body.dump();
  return r;
}

// Runs the blocking client on another thread while this one serves.
HttpResponse call(int port, const HttpRequest& r) {
  auto f = std::async(std::launch::async, [port, r] { return http(port, r); });
  while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
    QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  return f.get();
}

}  // namespace

class TestOpenAiServer : public QObject {
  Q_OBJECT

  std::unique_ptr<ScriptedPort> port_;
  std::unique_ptr<server::OpenAiServer> server_;

  int start(server::ServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<server::OpenAiServer>(*port_, options);
    const QString problem = server_->start();
    if (!problem.isEmpty()) qWarning() << problem;
    return server_->port();
  }

 private slots:
  void init() { port_ = std::make_unique<ScriptedPort>(); }
  void cleanup() {
    server_.reset();
    QCoreApplication::processEvents();
    port_.reset();
    QCoreApplication::sendPostedEvents(nullptr, QEvent::DeferredDelete);
  }

  void answersAChat() {
    const int port = start();
    QVERIFY(port > 0);
    const HttpResponse r = call(port, post("/v1/chat/completions", chat_body("Hi")));
    QCOMPARE(r.status, 200);
    const json j = json::parse(r.body);
    QCOMPARE(j["object"], json("chat.completion"));
    QCOMPARE(j["model"], json("scripted"));
    QCOMPARE(j["choices"][0]["message"]["role"], json("assistant"));
    QCOMPARE(j["choices"][0]["message"]["content"], json("Hello from the script."));
    QCOMPARE(j["choices"][0]["finish_reason"], json("stop"));
    QCOMPARE(j["usage"]["completion_tokens"], json(5));
    QCOMPARE(j["usage"]["total_tokens"], json(15));
    QVERIFY(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  }

  void streamsAChat() {
    const int port = start();
    json body = chat_body("Hi", true);
    body["stream_options"] = {{"include_usage", true}};
    const HttpResponse r = call(port, post("/v1/chat/completions", body));
    QCOMPARE(r.status, 200);
    QCOMPARE(r.headers.at("content-type"), std::string("text/event-stream"));
    QVERIFY(r.events.size() >= 4);
    QCOMPARE(r.events.back(), std::string("[DONE]"));
    std::string text;
    std::string finish;
    bool usage = false;
    const json first = json::parse(r.events.front());
    QCOMPARE(first["choices"][0]["delta"]["role"], json("assistant"));
    for (std::size_t i = 0; i + 1 < r.events.size(); ++i) {
      const json e = json::parse(r.events[i]);
      QCOMPARE(e["object"], json("chat.completion.chunk"));
      if (e.contains("usage")) {
        usage = e["usage"]["completion_tokens"] == 5 && e["choices"].empty();
        continue;
      }
      const json& c = e["choices"][0];
      if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"].get<std::string>();
    }
    QCOMPARE(text, std::string("Hello from the script."));
    QCOMPARE(finish, std::string("stop"));
    QVERIFY(usage);
  }

  void toolCallsComeBackAsToolCalls() {
    const int port = start();
    json body = chat_body("What is the weather in Tokyo?");
    body["tools"] = kTools;
    const json j = json::parse(call(port, post("/v1/chat/completions", body)).body);
    const json& m = j["choices"][0]["message"];
    QCOMPARE(j["choices"][0]["finish_reason"], json("tool_calls"));
    QCOMPARE(m["content"], json("Checking."));
    QCOMPARE(m["reasoning_content"], json("Needs a tool."));
    QCOMPARE(m["tool_calls"].size(), std::size_t{1});
    QCOMPARE(m["tool_calls"][0]["type"], json("function"));
    QCOMPARE(m["tool_calls"][0]["function"]["name"], json("get_weather"));
    QCOMPARE(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
             json({{"location", "Tokyo"}}));

    body["stream"] = true;
    const HttpResponse s = call(port, post("/v1/chat/completions", body));
    std::string content;
    json calls;
    for (const std::string& e : s.events) {
      if (e == "[DONE]") continue;
      const json d = json::parse(e)["choices"][0]["delta"];
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) calls = d["tool_calls"];
    }
    QVERIFY2(content.find("tool_call") == std::string::npos, content.c_str());
    QCOMPARE(calls.size(), std::size_t{1});
    QCOMPARE(calls[0]["index"], json(0));
    QCOMPARE(calls[0]["function"]["name"], json("get_weather"));
  }

  void answersPlainCompletionsModelsAndHealth() {
    const int port = start();
    const json c = json::parse(
        call(port, post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}})).body);
    QCOMPARE(c["object"], json("text_completion"));
    QCOMPARE(c["choices"][0]["text"], json(" once upon a"));
    QCOMPARE(c["choices"][0]["finish_reason"], json("length"));
    HttpRequest get;
    get.path = "/v1/models";
    const json models = json::parse(call(port, get).body);
    QCOMPARE(models["data"][0]["id"], json("scripted"));
    get.path = "/v1/models/scripted";
    QCOMPARE(call(port, get).status, 200);
    get.path = "/v1/models/other";
    QCOMPARE(call(port, get).status, 404);
    get.path = "/health";
    const HttpResponse h = call(port, get);
    QCOMPARE(h.status, 200);
    QCOMPARE(json::parse(h.body)["status"], json("ok"));
  }

  // Whatever is wrong with a request, the answer is a 4xx with OpenAI's error object.
  void badRequestsGetErrorObjects_data() {
    QTest::addColumn<QString>("method");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("body");
    QTest::addColumn<int>("status");
    QTest::newRow("not json") << "POST"
                              << "/v1/chat/completions"
                              << "{bad" << 400;
    QTest::newRow("empty body") << "POST"
                                << "/v1/chat/completions"
                                << "" << 400;
    QTest::newRow("wrong type") << "POST"
                                << "/v1/chat/completions"
                                << R"({"messages": "hi"})" << 400;
    QTest::newRow("huge number")
        << "POST"
        << "/v1/chat/completions"
        << R"({"max_tokens": 1e300, "messages": [{"role": "user", "content": "x"}]})" << 400;
    QTest::newRow("deep nesting") << "POST"
                                  << "/v1/chat/completions" << QString(2000, QLatin1Char('['))
                                  << 400;
    QTest::newRow("no prompt") << "POST"
                               << "/v1/completions"
                               << "{}" << 400;
    QTest::newRow("unknown path") << "GET"
                                  << "/v2/anything"
                                  << "" << 404;
    QTest::newRow("get on chat") << "GET"
                                 << "/v1/chat/completions"
                                 << "" << 405;
    QTest::newRow("post on models") << "POST"
                                    << "/v1/models"
                                    << "{}" << 405;
  }
  void badRequestsGetErrorObjects() {
    QFETCH(QString, method);
    QFETCH(QString, path);
    QFETCH(QString, body);
    QFETCH(int, status);
    const int port = start();
    HttpRequest r;
    r.method = method.toStdString();
    r.path = path.toStdString();
    r.body = body.toStdString();
    const HttpResponse a = call(port, r);
    QCOMPARE(a.status, status);
    const json e = json::parse(a.body);
    QVERIFY(e["error"]["message"].is_string() && !e["error"]["message"].get<std::string>().empty());
    QVERIFY(e["error"]["type"].is_string());
    // And the server goes on serving.
    QCOMPARE(call(port, post("/v1/chat/completions", chat_body("Hi"))).status, 200);
  }

  void theApiKeyIsRequiredWhenSet() {
    server::ServerOptions options;
    options.api_key = QStringLiteral("s3cret");
    const int port = start(options);
    HttpRequest r = post("/v1/chat/completions", chat_body("Hi"));
    HttpResponse a = call(port, r);
    QCOMPARE(a.status, 401);
    QCOMPARE(json::parse(a.body)["error"]["code"], json("invalid_api_key"));
    r.headers = {{"Authorization", "Bearer wrong!"}};
    QCOMPARE(call(port, r).status, 401);
    r.headers = {{"authorization", "Bearer s3cret"}};
    QCOMPARE(call(port, r).status, 200);
    HttpRequest health;
    health.path = "/health";
    QCOMPARE(call(port, health).status, 200);
  }

  // Off this computer's own address, the server does not start without a key.
  void anotherAddressNeedsAKey() {
    server::ServerOptions options;
    options.address = QHostAddress::AnyIPv4;
    options.port = 0;
    server::OpenAiServer s(*port_, options);
    const QString problem = s.start();
    QVERIFY2(problem.contains(QLatin1String("API key")), qPrintable(problem));
    QVERIFY(!s.isListening());
    options.api_key = QStringLiteral("k");
    server::OpenAiServer keyed(*port_, options);
    QVERIFY(keyed.start().isEmpty());
    QVERIFY(keyed.isListening());
  }

  void corsOnlyForAllowedOrigins() {
    server::ServerOptions options;
    options.cors_origins = {QStringLiteral("http://localhost:3000")};
    const int port = start(options);
    HttpRequest r = post("/v1/chat/completions", chat_body("Hi"));
    r.headers = {{"Origin", "http://localhost:3000"}};
    HttpResponse a = call(port, r);
    QCOMPARE(a.headers["access-control-allow-origin"], std::string("http://localhost:3000"));
    r.headers = {{"Origin", "http://evil.example"}};
    a = call(port, r);
    QVERIFY(!a.headers.count("access-control-allow-origin"));
    HttpRequest preflight;
    preflight.method = "OPTIONS";
    preflight.path = "/v1/chat/completions";
    preflight.headers = {{"Origin", "http://localhost:3000"}};
    QCOMPARE(call(port, preflight).status, 204);
    preflight.headers = {{"Origin", "http://evil.example"}};
    QCOMPARE(call(port, preflight).status, 403);
  }

  // A body past the limit is refused before it is read in full; the server goes on.
  void aBodyTooLargeIsRefused() {
    server::ServerOptions options;
    options.max_body_bytes = 1 << 20;
    const int port = start(options);
    json body = chat_body(std::string(3 << 20, 'a'));
    const HttpResponse a = call(port, post("/v1/chat/completions", body));
    // 413, or the connection closed on it (a client still sending may see only the close).
    QVERIFY2(a.status == 413 || a.status == 0, qPrintable(QString::number(a.status)));
    qInfo("a body of 3 MiB was answered with status %d", a.status);
    if (a.status == 413) QVERIFY(json::parse(a.body)["error"]["message"].is_string());
    QCOMPARE(call(port, post("/v1/chat/completions", chat_body("Hi"))).status, 200);
  }

  // One runs, `max_waiting` wait; the next is told to come back later.
  void aFullQueueAnswers429() {
    server::ServerOptions options;
    options.max_waiting = 1;
    const int port = start(options);
    port_->delay_ms = 150;
    std::vector<std::future<HttpResponse>> running;
    for (int i = 0; i < 2; ++i) {
      running.push_back(std::async(std::launch::async, [port] {
        return http(port, post("/v1/chat/completions", chat_body("Hi")));
      }));
      QTRY_COMPARE(server_->inFlight(), i + 1);
    }
    const HttpResponse refused = call(port, post("/v1/chat/completions", chat_body("Hi")));
    QCOMPARE(refused.status, 429);
    QVERIFY(refused.headers.count("retry-after"));
    QVERIFY(std::stoi(refused.headers.at("retry-after")) >= 1);
    QCOMPARE(json::parse(refused.body)["error"]["type"], json("rate_limit_error"));
    for (auto& f : running) {
      while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
      QCOMPARE(f.get().status, 200);
    }
    QTRY_COMPARE(server_->inFlight(), 0);
  }

  // A client that goes away mid-stream stops its generation within a second; one that left
  // while waiting is never started.
  void aClientThatLeavesStopsItsGeneration() {
    const int port = start();
    port_->delay_ms = 100;
    HttpRequest r = post("/v1/chat/completions", chat_body("Hi", true));
    r.on_event = [](const std::string&) { return false; };  // leave after the first event
    const HttpResponse a = call(port, r);
    const qint64 left = QDateTime::currentMSecsSinceEpoch();
    QCOMPARE(a.status, 200);
    QTRY_COMPARE_WITH_TIMEOUT(port_->cancelled.load(), 1, 2000);
    QVERIFY(port_->cancel_seen_ms - left < 1000);
    QTRY_COMPARE(server_->inFlight(), 0);
  }

  // Turning the server off (or closing the window) stops the generations it started.
  void stoppingTheServerStopsItsGenerations() {
    const int port = start();
    port_->delay_ms = 200;
    auto client = std::async(std::launch::async, [port] {
      return http(port, post("/v1/chat/completions", chat_body("Hi", true)));
    });
    QTRY_COMPARE(port_->started.load(), 1);
    server_->stop();
    QTRY_COMPARE_WITH_TIMEOUT(port_->cancelled.load(), 1, 2000);
    while (client.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
      QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
  }

  // 8 clients, 200 requests, streaming and not: every answer whole, nothing left behind.
  void boundedLoad() {
    server::ServerOptions options;
    options.max_waiting = 8;
    const int port = start(options);
    std::atomic<int> complete{0};
    std::atomic<int> broken{0};
    std::vector<std::future<void>> clients;
    for (int c = 0; c < 8; ++c) {
      clients.push_back(std::async(std::launch::async, [&, c] {
        for (int i = 0; i < 25; ++i) {
          const bool stream = (c + i) % 2 == 0;
          const HttpResponse a = http(port, post("/v1/chat/completions", chat_body("Hi", stream)));
          std::string text;
          if (a.status == 200 && stream && !a.events.empty() && a.events.back() == "[DONE]") {
            for (std::size_t e = 0; e + 1 < a.events.size(); ++e) {
              const json d = json::parse(a.events[e])["choices"][0]["delta"];
              if (d.contains("content")) text += d["content"].get<std::string>();
            }
          } else if (a.status == 200 && !stream) {
            text = json::parse(a.body)["choices"][0]["message"]["content"].get<std::string>();
          }
          (text == "Hello from the script." ? complete : broken)++;
        }
      }));
    }
    for (auto& f : clients) {
      while (f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
    }
    QCOMPARE(broken.load(), 0);
    QCOMPARE(complete.load(), 200);
    QTRY_COMPARE(server_->inFlight(), 0);
    QCOMPARE(server_->requestsServed(), 200);
  }
};

QTEST_GUILESS_MAIN(TestOpenAiServer)
#include "tst_openai_server.moc"
