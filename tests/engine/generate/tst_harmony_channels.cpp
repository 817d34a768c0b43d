// gpt-oss's harmony replies split into thinking (the analysis channel) and answer (final,
// commentary) by control token, on a token stream as the model writes it; and a chat with
// the gpt-oss fixture, which speaks harmony through openai's own template.
#include <QtTest>

#include "engine/generate/chat_session.h"
#include "engine/generate/harmony_channels.h"

using namespace tandem;
using namespace tandem::generate;

namespace {

// Ids of the control tokens; text tokens are fed with id 0.
HarmonyChannels::ControlTokens controls() {
  HarmonyChannels::ControlTokens t;
  t.start = 1;
  t.end = 2;
  t.message = 3;
  t.channel = 4;
  t.finished = 5;
  t.call = 6;
  t.constrain = 7;
  return t;
}

struct Step {
  text::TokenId id;
  const char* text;
};

ThinkingDelta run(const std::vector<Step>& steps) {
  HarmonyChannels h(controls());
  ThinkingDelta all;
  for (const Step& s : steps) {
    const ThinkingDelta d = h.push(s.id, s.text);
    all.thinking += d.thinking;
    all.answer += d.answer;
  }
  const ThinkingDelta d = h.finish();
  all.thinking += d.thinking;
  all.answer += d.answer;
  return all;
}

}  // namespace

class TestHarmonyChannels : public QObject {
  Q_OBJECT
 private slots:
  void analysisThenFinal() {
    const ThinkingDelta d = run({{4, ""},
                                 {0, "analysis"},
                                 {3, ""},
                                 {0, "User "},
                                 {0, "greets."},
                                 {2, ""},
                                 {1, ""},
                                 {0, "assistant"},
                                 {4, ""},
                                 {0, "final"},
                                 {3, ""},
                                 {0, "Hello"},
                                 {0, "!"},
                                 {5, ""},
                                 {0, "ignored"}});
    QCOMPARE(d.thinking, std::string("User greets."));
    QCOMPARE(d.answer, std::string("Hello!"));
  }

  // A preamble on commentary is answer; a tool call's header (recipient, constraint) is not
  // shown, its arguments are; <|call|> ends the reply.
  void commentaryAndToolCalls() {
    const ThinkingDelta d = run({{4, ""},
                                 {0, "commentary"},
                                 {3, ""},
                                 {0, "Checking."},
                                 {2, ""},
                                 {1, ""},
                                 {0, "assistant"},
                                 {4, ""},
                                 {0, "commentary to=functions.get_weather "},
                                 {7, ""},
                                 {0, "json"},
                                 {3, ""},
                                 {0, "{\"city\":\"Oslo\"}"},
                                 {6, ""},
                                 {0, "after"}});
    QCOMPARE(d.thinking, std::string());
    QCOMPARE(d.answer, std::string("Checking.{\"city\":\"Oslo\"}"));
  }

  // Control tokens are known by id: the same characters written as text stay text, and an
  // analysis channel named across two tokens is still analysis.
  void textThatLooksLikeATagStaysText() {
    const ThinkingDelta d = run({{4, ""},
                                 {0, "ana"},
                                 {0, "lysis"},
                                 {3, ""},
                                 {0, "<|channel|>final<|message|>x"},
                                 {2, ""},
                                 {1, ""},
                                 {0, "assistant"},
                                 {4, ""},
                                 {0, "final"},
                                 {3, ""},
                                 {0, "ok"}});
    QCOMPARE(d.thinking, std::string("<|channel|>final<|message|>x"));
    QCOMPARE(d.answer, std::string("ok"));
  }

  // A model that never opens a message still said something.
  void noMessageAtAll() {
    const ThinkingDelta d = run({{0, "plain "}, {0, "words"}});
    QCOMPARE(d.thinking, std::string());
    QCOMPARE(d.answer, std::string("plain words"));
  }

  // The gpt-oss fixture: its vocabulary is harmony's, its template openai's, so a turn is
  // read by channel, the history goes back as the template wants it (thinking dropped from
  // earlier turns, the answer on the final channel), and the cache still serves the prefix.
  void chatWithTheGptOssFixture() {
    const std::string folder = TANDEM_TEST_DATA_DIR "/models/gpt-oss";
    auto model = model::LoadedModel::load(folder);
    auto tokenizer = text::load_tokenizer(folder);
    QVERIFY(HarmonyChannels::find(*tokenizer).has_value());
    const std::string qwen = TANDEM_TEST_DATA_DIR "/models/qwen3-moe";
    QVERIFY(!HarmonyChannels::find(*text::load_tokenizer(qwen)).has_value());
    const ChatTemplate chat_template = ChatTemplate::from_model_folder(folder);
    backend::NumaPools pool(2);
    ChatSession chat(*model, *tokenizer, chat_template, pool, 256);
    ChatSettings s;
    s.sampling = SamplingParams::greedy();
    s.max_tokens = 6;
    chat.set_settings(s);
    chat.set_messages({{"user", "Hi", {}}});
    QVERIFY(chat.render_prompt().ends_with("<|start|>user<|message|>Hi<|end|><|start|>assistant"));
    chat.set_messages({});
    const TurnResult first = chat.send("Hi", {});
    // The random model writes no control token: everything it says is the answer.
    QVERIFY(!first.reply.content.empty());
    QCOMPARE(first.reply.thinking, std::string());
    chat.set_messages(
        {{"user", "Hi", {}}, {"assistant", "Hello.", "Greeting back."}, {"user", "Bye", {}}});
    const std::string prompt = chat.render_prompt();
    QVERIFY2(prompt.find("<|start|>assistant<|channel|>final<|message|>Hello.<|end|>") !=
                 std::string::npos,
             prompt.c_str());
    QVERIFY(prompt.find("Greeting back.") == std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestHarmonyChannels)
#include "tst_harmony_channels.moc"
