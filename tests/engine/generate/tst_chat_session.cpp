// ChatSession on a tiny model: the model's own template, KV-cache reuse across turns
// (checked by the prefill counts), stop, regenerate, edit and context overflow.
#include <QtTest>
#include <set>
#include <thread>

#include "engine/generate/chat_session.h"

using namespace tandem;
using namespace tandem;
using namespace tandem::generate;
using backend::NumaPools;
using model::LoadedModel;

class TestChatSession : public QObject {
  Q_OBJECT
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> template_;
  std::unique_ptr<NumaPools> pool_;

  ChatSettings greedy(std::int64_t max_tokens) {
    ChatSettings s;
    s.sampling = SamplingParams::greedy();
    s.max_tokens = max_tokens;
    return s;
  }

 private slots:
  void initTestCase() {
    const std::string folder = TANDEM_TEST_DATA_DIR "/models/qwen3-moe";
    model_ = LoadedModel::load(folder);
    tokenizer_ = text::load_tokenizer(folder);
    template_ = std::make_unique<ChatTemplate>(ChatTemplate::from_model_folder(folder));
    pool_ = std::make_unique<NumaPools>(2);
  }

  void rendersTheModelsTemplate() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    ChatSettings s = greedy(4);
    s.system_prompt = "Be brief.";
    chat.set_settings(s);
    chat.set_messages({{"user", "Hi", {}}});
    QCOMPARE(
        chat.render_prompt(),
        std::string("<|im_start|>system\nBe "
                    "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
  }

  // Each turn prefills only the tokens that are new since the previous one.
  void laterTurnsPrefillOnlyNewTokens() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    chat.set_settings(greedy(6));
    std::string streamed;
    const TurnResult first = chat.send(
        "Hello there", [&](const ThinkingDelta& d) { streamed += d.answer + d.thinking; });
    const auto firstPrompt = tokenizer_->encode(
        "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n", true, false);
    QCOMPARE(first.stats.cached_tokens, std::int64_t{0});
    QCOMPARE(first.stats.prompt_tokens, static_cast<std::int64_t>(firstPrompt.size()));
    QCOMPARE(streamed, first.reply.content + first.reply.thinking);
    QCOMPARE(chat.messages().size(), std::size_t{2});

    for (const char* next : {"Tell me more", "And then?"}) {
      const std::int64_t before = chat.context_used();
      const std::string reply = chat.messages().back().content;
      const TurnResult turn = chat.send(next, {});
      // Everything in the cache is reused; what is prefilled is the end of the previous
      // reply's turn and the new user turn, tokenized on their own.
      const auto fresh = tokenizer_->encode(std::string("<|im_end|>\n<|im_start|>user\n") + next +
                                                "<|im_end|>\n<|im_start|>assistant\n",
                                            true, false);
      QCOMPARE(turn.stats.cached_tokens, before);
      QCOMPARE(turn.stats.prompt_tokens, static_cast<std::int64_t>(fresh.size()));
      QVERIFY(turn.context_tokens > before);
    }
  }

  void regenerateReplacesTheLastReply() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    ChatSettings s;
    s.sampling.temperature = 1.0f;
    s.sampling.seed = 1;
    s.max_tokens = 8;
    chat.set_settings(s);
    chat.send("Pick something", {});
    QCOMPARE(chat.messages().size(), std::size_t{2});
    const TurnResult again = chat.regenerate({});
    QCOMPARE(chat.messages().size(), std::size_t{2});
    QCOMPARE(chat.messages().back().content, again.reply.content);
    // The user turn was still cached: only the assistant reply is new.
    QVERIFY(again.stats.cached_tokens > 0);
  }

  // A regenerated reply is another draw, not the same one again; a session started with the
  // same seed draws the same replies in the same order.
  void regenerateDrawsAgain() {
    const auto replies = [&] {
      ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
      ChatSettings s;
      s.sampling.temperature = 1.0f;
      s.sampling.seed = 7;
      s.max_tokens = 12;
      chat.set_settings(s);
      std::vector<std::string> out{chat.send("Pick something", {}).reply.content};
      for (int i = 0; i < 3; ++i) out.push_back(chat.regenerate({}).reply.content);
      return out;
    };
    const std::vector<std::string> first = replies();
    QCOMPARE(std::set<std::string>(first.begin(), first.end()).size(), first.size());
    QCOMPARE(replies(), first);
  }

  // Editing an earlier message cuts the conversation (and the cache) there.
  void editCutsTheConversation() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    chat.set_settings(greedy(4));
    chat.send("first question", {});
    chat.send("second question", {});
    QCOMPARE(chat.messages().size(), std::size_t{4});
    const TurnResult edited = chat.edit(0, "a different first question", {});
    QCOMPARE(chat.messages().size(), std::size_t{2});
    QCOMPARE(chat.messages()[0].content, std::string("a different first question"));
    // The cache is reused only up to where the text changed.
    const auto common = tokenizer_->encode("<|im_start|>user\na", true, false);
    QVERIFY(edited.stats.cached_tokens <= static_cast<std::int64_t>(common.size()));
    QVERIFY_THROWS_EXCEPTION(std::out_of_range, chat.edit(1, "not a user message", {}));
  }

  void stopEndsTheTurnPromptly() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    ChatSettings s = greedy(200);
    chat.set_settings(s);
    std::atomic<int> pieces{0};
    const auto started = std::chrono::steady_clock::now();
    std::thread stopper([&] {
      while (pieces.load() < 3) std::this_thread::yield();
      chat.request_stop();
    });
    ChatSettings slow = s;
    const TurnResult r = chat.send("Keep talking", [&](const ThinkingDelta&) { ++pieces; });
    stopper.join();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    QCOMPARE(r.stats.stop, StopReason::Cancelled);
    QVERIFY(r.stats.generated_tokens < 200);
    QVERIFY(seconds < 1.0);
    QCOMPARE(chat.messages().back().role, std::string("assistant"));  // what came so far is kept
  }

  // A stop asked before the turn begins stops it before its prompt is computed; the next
  // turn is whole, with every token of the conversation (nothing of the cut prompt lost).
  void aStopBeforeThePromptLeavesTheNextTurnWhole() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 256);
    chat.set_settings(greedy(4));
    chat.request_stop();
    const TurnResult stopped = chat.send("Hello there", {});
    QCOMPARE(stopped.stats.stop, StopReason::Cancelled);
    QCOMPARE(stopped.stats.generated_tokens, std::int64_t{0});
    QCOMPARE(chat.context_used(), std::int64_t{0});
    const TurnResult next = chat.send("Tell me more", {});
    QVERIFY(next.stats.generated_tokens > 0);
    // The second turn's prompt went in whole: reused and computed tokens add up to it.
    std::vector<ChatMessage> before = chat.messages();
    before.pop_back();  // the reply
    chat.set_messages(before);
    const auto prompt = tokenizer_->encode(chat.render_prompt(), true, false);
    QCOMPARE(next.stats.cached_tokens + next.stats.prompt_tokens,
             static_cast<std::int64_t>(prompt.size()));
  }

  void overflowIsReportedAndCanDropOldTurns() {
    ChatSession chat(*model_, *tokenizer_, *template_, *pool_, 96);
    chat.set_settings(greedy(8));
    chat.send("one two", {});
    chat.send("three four", {});
    const auto before = chat.messages();
    // About 40 tokens with this tiny vocabulary: it fits alone, not after the history.
    const std::string longText = "fifteen sixteen seventeen eighteen";
    try {
      chat.send(longText, {});
      QFAIL("the turn should not fit");
    } catch (const ContextOverflow& e) {
      QVERIFY(e.needed() > e.capacity());
      QVERIFY(QString::fromUtf8(e.what()).contains(QLatin1String("Drop the oldest turns")));
    }
    QCOMPARE(chat.messages().size(), before.size());  // unchanged
    const TurnResult r = chat.send(longText, {}, /*drop_oldest=*/true);
    QVERIFY(r.dropped_turns >= 1);
    QCOMPARE(chat.messages()[chat.messages().size() - 2].content, longText);
    QVERIFY(r.context_tokens <= chat.context_capacity());
  }
};

QTEST_GUILESS_MAIN(TestChatSession)
#include "tst_chat_session.moc"
