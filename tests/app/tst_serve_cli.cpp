// `tandem serve` on the built-in demo model, driven by real clients: curl and a plain HTTP
// client, streaming and not, the KV cache reused across requests, stop strings, tools
// through a real template, a client that leaves, a wrong key, and the address rule.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/http_client.h"
#include "tests/support/tandem_process.h"

using nlohmann::json;
using tandem::test::http;
using tandem::test::HttpRequest;
using tandem::test::HttpResponse;

namespace {

HttpRequest post(const std::string& path, const json& body,
                 std::vector<std::pair<std::string, std::string>> headers = {}) {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.body = body.dump();
  r.headers = std::move(headers);
  return r;
}

json user(const std::string& text) {
  return json::array({{{"role", "user"}, {"content", text}}});
}

// A running `tandem serve`, and the port it found.
class Served {
 public:
  Served(const QStringList& extra, const QProcessEnvironment& env) {
    process_.setProcessEnvironment(env);
    process_.start(QStringLiteral(TANDEM_EXECUTABLE),
                   QStringList{"serve", "--port", "0", "--threads", "1"} + extra);
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 60000 && process_.state() != QProcess::NotRunning) {
      process_.waitForReadyRead(200);
      out_ += QString::fromUtf8(process_.readAllStandardOutput());
      const auto m =
          QRegularExpression(QStringLiteral("at http://127\\.0\\.0\\.1:(\\d+)/v1")).match(out_);
      if (m.hasMatch()) {
        port_ = m.captured(1).toInt();
        break;
      }
    }
  }
  ~Served() {
    process_.terminate();
    if (!process_.waitForFinished(10000)) process_.kill();
  }
  int port() const { return port_; }
  QString output() {
    out_ += QString::fromUtf8(process_.readAllStandardOutput());
    return out_ + QString::fromUtf8(process_.readAllStandardError());
  }
  QProcess& process() { return process_; }

 private:
  QProcess process_;
  QString out_;
  int port_ = 0;
};

}  // namespace

class TestServeCli : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  QProcessEnvironment env() const {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert(QStringLiteral("HOME"), home_.path());
    e.insert(QStringLiteral("XDG_DATA_HOME"), home_.path() + "/data");
    e.insert(QStringLiteral("XDG_CONFIG_HOME"), home_.path() + "/config");
    e.insert(QStringLiteral("XDG_CACHE_HOME"), home_.path() + "/.cache");
    e.insert(QStringLiteral("TANDEM_LOG_TO_FILE"), QStringLiteral("0"));
    e.remove(QStringLiteral("TANDEM_API_KEY"));
    return e;
  }

 private slots:
  void servesTheDemoModel() {
    Served s({}, env());
    QVERIFY2(s.port() > 0, qPrintable(s.output()));
    const int port = s.port();
    HttpRequest models;
    models.path = "/v1/models";
    QCOMPARE(json::parse(http(port, models).body)["data"][0]["id"], json("demo-model"));

    // Streamed: pieces, a finish reason, [DONE], usage at the end.
    json body = {{"messages", user("Tell me a story.")},
                 {"max_tokens", 24},
                 {"temperature", 0},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    const HttpResponse streamed = http(port, post("/v1/chat/completions", body));
    QCOMPARE(streamed.status, 200);
    QVERIFY(streamed.events.size() > 3);
    QCOMPARE(streamed.events.back(), std::string("[DONE]"));
    std::string text;
    for (std::size_t i = 0; i + 1 < streamed.events.size(); ++i) {
      const json e = json::parse(streamed.events[i]);
      if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content"))
        text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
    QVERIFY(!text.empty());
    const json usage = json::parse(streamed.events[streamed.events.size() - 2])["usage"];
    QCOMPARE(usage["completion_tokens"], json(24));

    // The same request not streamed: the same greedy text; the prompt comes from the cache.
    body.erase("stream");
    body.erase("stream_options");
    const json whole = json::parse(http(port, post("/v1/chat/completions", body)).body);
    QCOMPARE(whole["choices"][0]["message"]["content"].get<std::string>(), text);
    QCOMPARE(whole["choices"][0]["finish_reason"], json("length"));
    QVERIFY(whole["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);

    // A client resending the conversation with the reply and a new turn pays only for those.
    json next = body;
    next["messages"].push_back({{"role", "assistant"}, {"content", text}});
    next["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
    const json more = json::parse(http(port, post("/v1/chat/completions", next)).body);
    const int prompt = more["usage"]["prompt_tokens"].get<int>();
    const int cached = more["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    QVERIFY2(cached > prompt / 2, qPrintable(QStringLiteral("%1 of %2").arg(cached).arg(prompt)));

    // A stop string cuts the reply before it.
    const std::size_t space = text.find(' ', text.size() / 2);
    QVERIFY(space != std::string::npos);
    const std::string stop = text.substr(space, 3);
    body["stop"] = stop;
    const json stopped = json::parse(http(port, post("/v1/chat/completions", body)).body);
    QCOMPARE(stopped["choices"][0]["message"]["content"].get<std::string>(),
             text.substr(0, text.find(stop)));
    QCOMPARE(stopped["choices"][0]["finish_reason"], json("stop"));

    // The demo's template has no tool calls: asking for tools is refused with a sentence.
    json tools = body;
    tools["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
    const HttpResponse refused = http(port, post("/v1/chat/completions", tools));
    QCOMPARE(refused.status, 400);
    QVERIFY(json::parse(refused.body)["error"]["message"].get<std::string>().find("tool") !=
            std::string::npos);

    // A client that leaves mid-stream: the server stops and answers the next one at once.
    json longer = {{"messages", user("Go on forever.")}, {"max_tokens", 1500}, {"stream", true}};
    HttpRequest leave = post("/v1/chat/completions", longer);
    int seen = 0;
    leave.on_event = [&](const std::string&) { return ++seen < 3; };
    http(port, leave);
    QElapsedTimer t;
    t.start();
    const json after = json::parse(
        http(port, post("/v1/chat/completions", {{"messages", user("Hi")}, {"max_tokens", 2}}))
            .body);
    QCOMPARE(after["usage"]["completion_tokens"], json(2));
    qInfo("the request after a client left was answered in %lld ms", t.elapsed());

    // curl, as people try a server first.
    QProcess curl;
    curl.start(
        QStringLiteral("curl"),
        {"-sS", "-N", QStringLiteral("http://127.0.0.1:%1/v1/chat/completions").arg(port), "-H",
         "Content-Type: application/json", "-d",
         R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "stream": true})"});
    QVERIFY2(curl.waitForFinished(30000), "curl did not finish");
    const QString curled = QString::fromUtf8(curl.readAllStandardOutput());
    QVERIFY2(curled.contains(QLatin1String("chat.completion.chunk")) &&
                 curled.trimmed().endsWith(QLatin1String("data: [DONE]")),
             qPrintable(curled + curl.readAllStandardError()));
  }

  // The real engine under a bounded load: 8 clients, 200 requests, streaming and not, every
  // answer whole; the server's memory does not grow with the requests served.
  void boundedLoadOnTheRealEngine() {
    Served s({}, env());
    QVERIFY2(s.port() > 0, qPrintable(s.output()));
    const int port = s.port();
    const auto rss_kib = [&] {
      QFile status(QStringLiteral("/proc/%1/status").arg(s.process().processId()));
      if (!status.open(QIODevice::ReadOnly)) return -1LL;
      for (const QByteArray& line : status.readAll().split('\n'))
        if (line.startsWith("VmRSS:")) return line.mid(6).trimmed().split(' ').first().toLongLong();
      return -1LL;
    };
    const auto round = [&](int clients, int each) {
      std::atomic<int> whole{0};
      std::vector<std::thread> threads;
      for (int c = 0; c < clients; ++c)
        threads.emplace_back([&, c] {
          for (int i = 0; i < each; ++i) {
            const bool stream = (c + i) % 2 == 0;
            json body = {{"messages", user("Hello number " + std::to_string(c * 1000 + i))},
                         {"max_tokens", 4}};
            if (stream) body["stream"] = true;
            const HttpResponse a = http(port, post("/v1/chat/completions", body));
            const bool ok =
                a.status == 200 &&
                (stream ? !a.events.empty() && a.events.back() == "[DONE]"
                        : json::parse(a.body)["choices"][0]["message"].contains("content"));
            if (ok) ++whole;
          }
        });
      for (auto& t : threads) t.join();
      return whole.load();
    };
    QCOMPARE(round(8, 5), 40);  // warm: caches and buffers at their working size
    const long long before = rss_kib();
    QCOMPARE(round(8, 25), 200);
    const long long after = rss_kib();
    qInfo("server memory: %lld KiB after 40 requests, %lld KiB after 240", before, after);
    QVERIFY(before > 0 && after > 0);
    QVERIFY2(after - before < 32 * 1024,
             qPrintable(QStringLiteral("grew %1 KiB").arg(after - before)));
    HttpRequest health;
    health.path = "/health";
    QCOMPARE(http(port, health).status, 200);
  }

  // Tools rendered through a real model's template (Qwen3's) on the demo's weights.
  void toolsGoThroughTheModelsTemplate() {
    QTemporaryDir model;
    const QString demo = QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model");
    for (const QString& f :
         {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"})
      QVERIFY(QFile::copy(demo + "/" + f, model.path() + "/" + f));
    QFile tc(demo + "/tokenizer_config.json");
    QVERIFY(tc.open(QIODevice::ReadOnly));
    json config = json::parse(tc.readAll().toStdString());
    QFile qwen(
        QStringLiteral(TANDEM_TEST_DATA_DIR "/chat-templates/templates/Qwen-Qwen3-0.6B.jinja"));
    QVERIFY(qwen.open(QIODevice::ReadOnly));
    config["chat_template"] = qwen.readAll().toStdString();
    QFile out(model.path() + "/tokenizer_config.json");
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write(QByteArray::fromStdString(config.dump()));
    out.close();
    Served s({"-m", model.path()}, env());
    QVERIFY2(s.port() > 0, qPrintable(s.output()));
    const json body = {
        {"messages",
         {{{"role", "user"}, {"content", "Weather in Oslo?"}},
          {{"role", "assistant"},
           {"content", nullptr},
           {"tool_calls",
            {{{"id", "c1"},
              {"type", "function"},
              {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Oslo\"}"}}}}}}},
          {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "cold"}}}},
        {"tools",
         {{{"type", "function"},
           {"function",
            {{"name", "get_weather"},
             {"parameters",
              {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}}},
        {"max_tokens", 8}};
    const HttpResponse a = http(s.port(), post("/v1/chat/completions", body));
    QCOMPARE(a.status, 200);
    const json j = json::parse(a.body);
    QVERIFY(j["choices"][0]["finish_reason"].is_string());
    // The tools and the earlier call were in the prompt: far more than the words alone.
    QVERIFY(j["usage"]["prompt_tokens"].get<int>() > 100);
    json bad = body;
    bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = "not json";
    QCOMPARE(http(s.port(), post("/v1/chat/completions", bad)).status, 400);
  }

  // The tool-caller fixture's weights answer every chat with one call: it comes back as
  // OpenAI's tool_calls, whole and streamed, out of the real engine, tokenizer and template.
  void aRealToolCallComesBack() {
    Served s({"-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/tool-caller")}, env());
    QVERIFY2(s.port() > 0, qPrintable(s.output()));
    json body = {
        {"messages", user("Weather in Tokyo?")},
        {"temperature", 0},
        {"tools", json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}})}};
    const json whole = json::parse(http(s.port(), post("/v1/chat/completions", body)).body);
    const json& m = whole["choices"][0]["message"];
    QCOMPARE(whole["choices"][0]["finish_reason"], json("tool_calls"));
    QVERIFY(m["content"].is_null());
    QCOMPARE(m["tool_calls"][0]["function"]["name"], json("get_weather"));
    QCOMPARE(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
             json({{"location", "Tokyo"}}));
    body["stream"] = true;
    const HttpResponse streamed = http(s.port(), post("/v1/chat/completions", body));
    json calls;
    std::string content;
    for (const std::string& e : streamed.events) {
      if (e == "[DONE]") continue;
      const json d = json::parse(e)["choices"][0]["delta"];
      if (d.contains("tool_calls")) calls = d["tool_calls"];
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    QCOMPARE(content, std::string());
    QCOMPARE(calls.size(), std::size_t{1});
    QCOMPARE(calls[0]["function"]["name"], json("get_weather"));
    // Without tools the same words are just text.
    body.erase("tools");
    body.erase("stream");
    const json text = json::parse(http(s.port(), post("/v1/chat/completions", body)).body);
    QVERIFY(text["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>") == 0);
  }

  void aKeyIsAskedForAndChecked() {
    QProcessEnvironment e = env();
    e.insert(QStringLiteral("TANDEM_API_KEY"), QStringLiteral("k3y"));
    Served s({}, e);
    QVERIFY2(s.port() > 0, qPrintable(s.output()));
    const json body = {{"messages", user("Hi")}, {"max_tokens", 2}};
    QCOMPARE(http(s.port(), post("/v1/chat/completions", body)).status, 401);
    QCOMPARE(http(s.port(), post("/v1/chat/completions", body, {{"Authorization", "Bearer k3y"}}))
                 .status,
             200);
    const tandem::test::Run open =
        tandem::test::run_tandem({"serve", "--host", "0.0.0.0", "--port", "0"}, env());
    QCOMPARE(open.code, 2);
    QVERIFY2(open.err.contains(QLatin1String("API key")), qPrintable(open.err));
  }
};

QTEST_GUILESS_MAIN(TestServeCli)
#include "tst_serve_cli.moc"
