#include <QtTest>

#include "engine/generate/thinking_splitter.h"

using tandem::generate::ThinkingDelta;
using tandem::generate::ThinkingSplitter;

namespace {
// Feeds `text` one byte at a time, the worst case for tags split across tokens.
ThinkingDelta feedBytes(ThinkingSplitter& s, const std::string& text) {
  ThinkingDelta all;
  for (char c : text) {
    const ThinkingDelta d = s.push(std::string(1, c));
    all.thinking += d.thinking;
    all.answer += d.answer;
  }
  const ThinkingDelta end = s.finish();
  all.thinking += end.thinking;
  all.answer += end.answer;
  return all;
}
}  // namespace

class TestThinkingSplitter : public QObject {
  Q_OBJECT
 private slots:
  void separatesAThinkBlock() {
    ThinkingSplitter s;
    const ThinkingDelta d = feedBytes(s, "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.");
    QCOMPARE(d.thinking, std::string("\nLet me see: 2+2.\n"));
    QCOMPARE(d.answer, std::string("It is 4."));
  }

  void promptThatOpensTheBlock() {
    ThinkingSplitter s("<|im_start|>assistant\n<think>\n");
    QVERIFY(s.in_thinking());
    const ThinkingDelta d = feedBytes(s, "hmm</think>Answer");
    QCOMPARE(d.thinking, std::string("hmm"));
    QCOMPARE(d.answer, std::string("Answer"));
  }

  void closedBlockInPromptMeansAnswer() {
    ThinkingSplitter s("<|im_start|>assistant\n<think>\n\n</think>\n\n");
    QVERIFY(!s.in_thinking());
    QCOMPARE(feedBytes(s, "Plain <b>answer</b>").answer, std::string("Plain <b>answer</b>"));
  }

  void otherTagFamilies() {
    ThinkingSplitter s;
    const ThinkingDelta d = feedBytes(s, "<seed:think>plan</seed:think>done");
    QCOMPARE(d.thinking, std::string("plan"));
    QCOMPARE(d.answer, std::string("done"));
  }

  void unfinishedThinkingStaysThinking() {
    ThinkingSplitter s;
    const ThinkingDelta d = feedBytes(s, "<think>still going <");
    QCOMPARE(d.thinking, std::string("still going <"));
    QCOMPARE(d.answer, std::string());
  }
};

QTEST_GUILESS_MAIN(TestThinkingSplitter)
#include "tst_thinking_splitter.moc"
