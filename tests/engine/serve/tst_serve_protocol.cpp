// The OpenAI protocol without the network: requests read and refused with the field named,
// tool calls read back in every family's format (as each model's own template writes them),
// and a streamed reply assembled into content, reasoning, stops and calls.
#include <QtTest>
#include <fstream>
#include <sstream>

#include "engine/generate/harmony_channels.h"
#include "engine/serve/completion.h"
#include "engine/serve/openai_request.h"
#include "engine/serve/tool_calls.h"
#include "engine/template/chat_template.h"
#include "engine/text/tokenizer.h"
#include "engine/text/utf8_stream.h"

using nlohmann::json;
using namespace tandem::serve;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const json kTools = json::array({{{"type", "function"},
                                  {"function",
                                   {{"name", "get_weather"},
                                    {"description", "The weather in a city"},
                                    {"parameters",
                                     {{"type", "object"},
                                      {"properties",
                                       {{"location", {{"type", "string"}}},
                                        {"days", {{"type", "integer"}}},
                                        {"metric", {{"type", "boolean"}}}}},
                                      {"required", {"location"}}}}}}}});

// The request's status and the field it names, or -1 when it was accepted.
std::pair<int, std::string> refusal(const std::string& body, bool chat = true) {
  try {
    const json j = json::parse(body);
    chat ? parse_chat_request(j) : parse_completion_request(j);
  } catch (const RequestError& e) {
    return {e.status(), e.param()};
  }
  return {-1, {}};
}

struct Collected {
  std::string content, reasoning;
  int deltas = 0;
};

}  // namespace

class TestServeProtocol : public QObject {
  Q_OBJECT
 private slots:
  void readsAChatRequest() {
    std::string text = R"({
      "model": "m", "temperature": 0.2, "top_p": 0.9, "top_k": 20, "min_p": 0.1, "seed": 7,
      "max_tokens": 33, "stop": ["</end>", "\n\n"], "stream": true,
      "stream_options": {"include_usage": true},
      "chat_template_kwargs": {"enable_thinking": false},
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "ARGS"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}]})";
    json body = json::parse(text);
    body["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"location\": \"Oslo\"}";
    const CompletionRequest r = parse_chat_request(body);
    QCOMPARE(r.sampling.temperature, 0.2f);
    QCOMPARE(r.sampling.top_p, 0.9f);
    QCOMPARE(r.sampling.top_k, 20);
    QCOMPARE(r.sampling.seed, std::uint64_t{7});
    QVERIFY(r.seeded);
    QCOMPARE(*r.max_tokens, std::int64_t{33});
    QCOMPARE(r.stop.size(), std::size_t{2});
    QVERIFY(r.stream && r.include_usage);
    QCOMPARE(*r.enable_thinking, false);
    QCOMPARE(r.messages.size(), std::size_t{4});
    QCOMPARE(r.messages[1]["content"], json("Hi there"));
    QCOMPARE(r.messages[2]["tool_calls"][0]["function"]["name"], json("get_weather"));
    QCOMPARE(r.messages[3]["tool_call_id"], json("c1"));
    QCOMPARE(r.tools.size(), std::size_t{1});
  }

  // Absent sampling values are OpenAI's documented defaults; no seed means a fresh one.
  void absentValuesAreOpenAIsDefaults() {
    const json body = json::parse(R"({"messages": [{"role": "user", "content": "x"}]})");
    const CompletionRequest a = parse_chat_request(body);
    const CompletionRequest b = parse_chat_request(body);
    QCOMPARE(a.sampling.temperature, 1.0f);
    QCOMPARE(a.sampling.top_p, 1.0f);
    QCOMPARE(a.sampling.top_k, 0);
    QCOMPARE(a.sampling.min_p, 0.0f);
    QVERIFY(!a.max_tokens && !a.stream && !a.seeded);
    QVERIFY(a.sampling.seed != b.sampling.seed);
  }

  void refusesWhatItCannotDo_data() {
    QTest::addColumn<QString>("body");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("param");
    const auto row = [](const char* name, const char* body, const char* param) {
      QTest::newRow(name) << QString::fromUtf8(body) << 400 << QString::fromUtf8(param);
    };
    row("not an object", R"([1, 2])", "");
    row("no messages", R"({"model": "m"})", "messages");
    row("empty messages", R"({"messages": []})", "messages");
    row("message without role", R"({"messages": [{"content": "x"}]})", "messages[0]");
    row("unknown role", R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role");
    row("missing content", R"({"messages": [{"role": "user"}]})", "messages[0].content");
    row("image part", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
        "messages[0].content");
    row("temperature text",
        R"({"temperature": "hot", "messages": [{"role": "user", "content": "x"}]})", "temperature");
    row("temperature too high",
        R"({"temperature": 9, "messages": [{"role": "user", "content": "x"}]})", "temperature");
    row("max_tokens zero", R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})",
        "max_tokens");
    row("max_tokens fraction",
        R"({"max_tokens": 1.5, "messages": [{"role": "user", "content": "x"}]})", "max_tokens");
    row("two choices", R"({"n": 2, "messages": [{"role": "user", "content": "x"}]})", "n");
    row("stop number", R"({"stop": 5, "messages": [{"role": "user", "content": "x"}]})", "stop");
    row("forced tool",
        R"({"tool_choice": "required", "messages": [{"role": "user", "content": "x"}]})",
        "tool_choice");
    row("tool without name",
        R"({"tools": [{"type": "function", "function": {}}], "messages": [{"role": "user", "content": "x"}]})",
        "tools[0]");
    row("json mode",
        R"({"response_format": {"type": "json_object"}, "messages": [{"role": "user", "content": "x"}]})",
        "response_format");
    row("frequency penalty",
        R"({"frequency_penalty": 0.5, "messages": [{"role": "user", "content": "x"}]})",
        "frequency_penalty");
    row("repetition penalty zero",
        R"({"repetition_penalty": 0, "messages": [{"role": "user", "content": "x"}]})",
        "repetition_penalty");
    row("negative top_k", R"({"top_k": -1, "messages": [{"role": "user", "content": "x"}]})",
        "top_k");
    row("logprobs", R"({"logprobs": true, "messages": [{"role": "user", "content": "x"}]})",
        "logprobs");
    row("seed text", R"({"seed": "a", "messages": [{"role": "user", "content": "x"}]})", "seed");
  }
  void refusesWhatItCannotDo() {
    QFETCH(QString, body);
    QFETCH(int, status);
    QFETCH(QString, param);
    const auto [s, p] = refusal(body.toStdString());
    QCOMPARE(s, status);
    QCOMPARE(QString::fromStdString(p), param);
  }

  void readsAPlainCompletionRequest() {
    const CompletionRequest r =
        parse_completion_request(json::parse(R"({"prompt": ["Once upon"], "max_tokens": 4})"));
    QCOMPARE(*r.prompt, std::string("Once upon"));
    QCOMPARE(refusal(R"({"prompt": ["a", "b"]})", false).second, std::string("prompt"));
    QCOMPARE(refusal(R"({"prompt": "a", "echo": true})", false).second, std::string("echo"));
    QCOMPARE(refusal(R"({"max_tokens": 3})", false).second, std::string("prompt"));
  }

  // A request cannot ask for more than the limits allow, whatever its size.
  void limitsBoundARequest() {
    RequestLimits limits;
    limits.max_messages = 3;
    json body = {{"messages", json::array()}};
    for (int i = 0; i < 4; ++i) body["messages"].push_back({{"role", "user"}, {"content", "x"}});
    QVERIFY_THROWS_EXCEPTION(RequestError, parse_chat_request(body, limits));
    json stops = {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                  {"stop", std::vector<std::string>(17, "a")}};
    QVERIFY_THROWS_EXCEPTION(RequestError, parse_chat_request(stops));
    const RequestError e(429, "busy", {}, "server_busy");
    QCOMPARE(e.body()["error"]["type"], json("rate_limit_error"));
    QCOMPARE(e.body()["error"]["code"], json("server_busy"));
  }

  // Each family's template writes an earlier tool call into the prompt exactly as the model
  // was taught to write one: read back from that text, it is the call that went in.
  void readsBackEveryFamilysToolCalls_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("format");
    QTest::newRow("Qwen3") << "Qwen-Qwen3-0.6B.jinja" << int(ToolFormat::Hermes);
    QTest::newRow("Qwen3-Coder") << "Qwen3-Coder.jinja" << int(ToolFormat::QwenCoder);
    QTest::newRow("GLM-4.6") << "GLM-4.6.jinja" << int(ToolFormat::Glm);
    QTest::newRow("DeepSeek-V3.1")
        << "deepseek-ai-DeepSeek-V3.1.jinja" << int(ToolFormat::DeepSeek);
    QTest::newRow("Kimi-K2") << "moonshotai-Kimi-K2.jinja" << int(ToolFormat::Kimi);
    QTest::newRow("gpt-oss") << "openai-gpt-oss-120b.jinja" << int(ToolFormat::Harmony);
  }
  void readsBackEveryFamilysToolCalls() {
    QFETCH(QString, file);
    QFETCH(int, format);
    const std::string source =
        read(TANDEM_TEST_DATA_DIR "/chat-templates/templates/" + file.toStdString());
    QVERIFY(!source.empty());
    QCOMPARE(int(detect_tool_format(source)), format);
    const tandem::ChatTemplate t(source);
    const std::string question = "What is the weather in Tokyo?";
    nlohmann::ordered_json call = {{"id", "functions.get_weather:0"},
                                   {"type", "function"},
                                   {"function", {{"name", "get_weather"}}}};
    const nlohmann::ordered_json args = {{"location", "Tokyo"}, {"days", 3}, {"metric", true}};
    call["function"]["arguments"] =
        template_wants_argument_objects(source) ? args : nlohmann::ordered_json(args.dump());
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", question}});
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", {call}}});
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", "functions.get_weather:0"}, {"content", "sunny"}});
    const std::string prompt = t.render(messages, nlohmann::ordered_json::parse(kTools.dump()),
                                        true, {{"bos_token", ""}, {"eos_token", ""}});
    const std::size_t after = prompt.find(question);
    QVERIFY(after != std::string::npos);
    // What the assistant wrote: after the question, up to the tool's answer.
    std::string reply = prompt.substr(after + question.size());
    reply = reply.substr(0, reply.find("sunny"));
    std::uint64_t next = 1;
    const ParsedReply parsed = parse_tool_calls(ToolFormat(format), reply, kTools, next);
    QVERIFY2(parsed.calls.size() == 1, reply.c_str());
    QCOMPARE(parsed.calls[0].name, std::string("get_weather"));
    QCOMPARE(json::parse(parsed.calls[0].arguments), json::parse(args.dump()));
    QVERIFY(!parsed.calls[0].id.empty());
  }

  void textThatIsNotACallStaysText() {
    std::uint64_t next = 1;
    const std::string text = "Use the <tool_call> tag like <tool_call>not json</tool_call> here.";
    const ParsedReply p = parse_tool_calls(ToolFormat::Hermes, text, kTools, next);
    QVERIFY(p.calls.empty());
    QCOMPARE(p.content, text);
    const ParsedReply two = parse_tool_calls(
        ToolFormat::Hermes,
        "Checking.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
        kTools, next);
    QCOMPARE(two.calls.size(), std::size_t{2});
    QCOMPARE(two.calls[1].arguments, std::string(R"({"x":1})"));
    QCOMPARE(two.content, std::string("Checking."));
    QVERIFY(two.calls[0].id != two.calls[1].id);
    // Kimi keeps the model's own ids; V3's fenced arguments are read too.
    const ParsedReply kimi =
        parse_tool_calls(ToolFormat::Kimi,
                         "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                         "<|tool_call_argument_begin|>{\"location\": \"Rome\"}<|tool_call_end|>"
                         "<|tool_calls_section_end|>",
                         kTools, next);
    QCOMPARE(kimi.calls.size(), std::size_t{1});
    QCOMPARE(kimi.calls[0].id, std::string("functions.get_weather:0"));
    const ParsedReply v3 = parse_tool_calls(
        ToolFormat::DeepSeek,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        "{\"location\": \"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        kTools, next);
    QCOMPARE(v3.calls.size(), std::size_t{1});
    QCOMPARE(v3.calls[0].arguments, std::string(R"({"location":"Rome"})"));
    QVERIFY(!template_wants_argument_objects("<｜tool▁calls▁begin｜> ```json"));
    QCOMPARE(detect_tool_format("{{ messages }}"), ToolFormat::None);
  }

  // Streamed: the answer goes out as it comes, the call is held back and read at the end.
  void assemblesAStreamedToolCall() {
    Collected c;
    ReplyAssembler a(ToolFormat::Hermes, kTools, {}, "<|im_start|>assistant\n", true, std::nullopt,
                     [&](const StreamDelta& d) {
                       c.content += d.content;
                       c.reasoning += d.reasoning;
                       ++c.deltas;
                     });
    for (const char* piece : {"<think>", "Tokyo", " weather.", "</think>",
                              "\n\nLet me check.\n\n<tool", "_call>\n{\"name\": \"get_weather\", ",
                              "\"arguments\": {\"location\": \"Tokyo\"}}\n</tool_call>"})
      QVERIFY(a.push(0, piece));
    std::uint64_t next = 1;
    a.finish("", next);
    QCOMPARE(c.reasoning, std::string("Tokyo weather."));
    QVERIFY2(c.content.find("tool_call") == std::string::npos, c.content.c_str());
    QCOMPARE(a.result().tool_calls.size(), std::size_t{1});
    QCOMPARE(a.result().tool_calls[0].arguments, std::string(R"({"location":"Tokyo"})"));
    QCOMPARE(a.result().content, std::string("Let me check."));
    QCOMPARE(a.result().reasoning, std::string("Tokyo weather."));
  }

  void stopStringsEndTheAnswer() {
    Collected c;
    ReplyAssembler a(ToolFormat::Hermes, kTools, {"END"}, "", true, std::nullopt,
                     [&](const StreamDelta& d) { c.content += d.content; });
    QVERIFY(a.push(0, "one <tool "));  // looked like a call's start, and was not
    QVERIFY(a.push(0, "two E"));
    QVERIFY(!a.push(0, "ND three"));
    std::uint64_t next = 1;
    a.finish("", next);
    QCOMPARE(c.content, std::string("one <tool two "));
    QCOMPARE(a.result().content, c.content);
    QVERIFY(a.result().tool_calls.empty());
  }

  void plainCompletionsAreAllAnswer() {
    Collected c;
    ReplyAssembler a(ToolFormat::None, json(), {}, "", false, std::nullopt,
                     [&](const StreamDelta& d) { c.content += d.content; });
    a.push(0, "<think>not thinking");
    std::uint64_t next = 1;
    a.finish(" here", next);
    QCOMPARE(c.content, std::string("<think>not thinking here"));
  }

  // gpt-oss: channels by control token, the call named in the header before its arguments.
  void assemblesAHarmonyToolCall() {
    tandem::generate::HarmonyChannels::ControlTokens controls;
    controls.start = 1;
    controls.end = 2;
    controls.message = 3;
    controls.channel = 4;
    controls.finished = 5;
    controls.call = 6;
    controls.constrain = 7;
    // What the model writes, as (token, text) pairs: ids below 10 are the control tokens.
    const std::vector<std::pair<int, std::string>> written = {
        {4, "<|channel|>"}, {10, "analysis"}, {3, "<|message|>"}, {11, "The user"},
        {12, " wants weather."}, {2, "<|end|>"}, {1, "<|start|>"}, {13, "assistant"},
        {4, "<|channel|>"}, {14, "commentary to=functions.get_weather "}, {7, "<|constrain|>"},
        {15, "json"}, {3, "<|message|>"}, {16, "{\"location\":"}, {17, "\"Tokyo\"}"}};
    Collected c;
    ReplyAssembler a(ToolFormat::Harmony, kTools, {}, "<|start|>assistant", true, controls,
                     [&](const StreamDelta& d) {
                       c.content += d.content;
                       c.reasoning += d.reasoning;
                     });
    for (const auto& [id, text] : written) a.push(id, text);
    std::uint64_t next = 1;
    a.finish("", next);
    QCOMPARE(c.reasoning, std::string("The user wants weather."));
    QVERIFY2(c.content.empty(), c.content.c_str());
    QCOMPARE(a.result().tool_calls.size(), std::size_t{1});
    QCOMPARE(a.result().tool_calls[0].name, std::string("get_weather"));
    QCOMPARE(a.result().tool_calls[0].arguments, std::string(R"({"location":"Tokyo"})"));
  }
};

QTEST_GUILESS_MAIN(TestServeProtocol)
#include "tst_serve_protocol.moc"
