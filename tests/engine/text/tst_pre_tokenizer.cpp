// Text preparation before BPE: regex splits with every Hugging Face behaviour, the
// ByteLevel prefix space, and the Unicode normal forms. Expected words and strings are
// what the `tokenizers` library (0.23) gives for the same pre-tokenizer and input.
#include <QtTest>

#include "engine/text/normalizer.h"
#include "engine/text/pre_tokenizer.h"

using namespace tandem::text;

Q_DECLARE_METATYPE(SplitBehavior)

class TestPreTokenizer : public QObject {
  Q_OBJECT

 private slots:
  void splitBehaviors_data() {
    QTest::addColumn<SplitBehavior>("behavior");
    QTest::addColumn<bool>("invert");
    QTest::addColumn<QStringList>("expected");
    using B = SplitBehavior;
    const QStringList isolated{"Hello", ",", " world", "!", "!", " a", "-", "b", "-", "-", "c"};
    const QStringList after{"Hello,", " world!", "!", " a-", "b-", "-", "c"};
    const QStringList before{"Hello", ", world", "!", "! a", "-b", "-", "-c"};
    const QStringList contiguous{"Hello", ",", " world", "!!", " a", "-", "b", "--", "c"};
    QTest::newRow("isolated") << B::kIsolated << false << isolated;
    QTest::newRow("isolated inverted") << B::kIsolated << true << isolated;
    QTest::newRow("removed") << B::kRemoved << false
                             << QStringList{"Hello", " world", " a", "b", "c"};
    QTest::newRow("removed inverted")
        << B::kRemoved << true << QStringList{",", "!", "!", "-", "-", "-"};
    QTest::newRow("merged with previous") << B::kMergedWithPrevious << false << after;
    QTest::newRow("merged with previous inverted") << B::kMergedWithPrevious << true << before;
    QTest::newRow("merged with next") << B::kMergedWithNext << false << before;
    QTest::newRow("merged with next inverted") << B::kMergedWithNext << true << after;
    QTest::newRow("contiguous") << B::kContiguous << false << contiguous;
    QTest::newRow("contiguous inverted") << B::kContiguous << true << contiguous;
  }

  void splitBehaviors() {
    QFETCH(SplitBehavior, behavior);
    QFETCH(bool, invert);
    QFETCH(QStringList, expected);
    PreTokenizer pre;
    pre.add_split(RegexSplit("[,!\\-]", behavior, invert));
    QStringList words;
    for (const std::string& word : pre.split("Hello, world!! a-b--c")) {
      words << QString::fromStdString(word);
    }
    QCOMPARE(words, expected);
  }

  void literalPatternIsNotARegex() {
    PreTokenizer pre;
    pre.add_split(RegexSplit("--", SplitBehavior::kIsolated, false, true));
    QCOMPARE(pre.split("a--b-c"), (std::vector<std::string>{"a", "--", "b-c"}));
    PreTokenizer dot;
    dot.add_split(RegexSplit(".", SplitBehavior::kRemoved, false, true));
    QCOMPARE(dot.split("a.b"), (std::vector<std::string>{"a", "b"}));
  }

  void byteLevelPrefixSpaceThenGpt2Words() {
    PreTokenizer pre;
    pre.add_prefix_space();
    pre.add_split(RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated));
    QCOMPARE(pre.split("Hello  world's 123"),
             (std::vector<std::string>{" Hello", " ", " world", "'s", " 123"}));
  }

  void unicodeClassesFollowUnicode() {
    // \p{L} takes Cyrillic and CJK letters, \p{N} digits of any script.
    PreTokenizer pre;
    pre.add_split(RegexSplit(kGpt2Pattern, SplitBehavior::kIsolated));
    QCOMPARE(pre.split("мир 你好 \xD9\xA3\xD9\xA4"),
             (std::vector<std::string>{"мир", " 你好", " \xD9\xA3\xD9\xA4"}));
  }

  void unknownGgufPreTokenizerNamesTheKnownOnes() {
    try {
      pre_tokenizer_for_gguf("no-such-model");
      QFAIL("an unknown pre-tokenizer was accepted");
    } catch (const std::invalid_argument& error) {
      const QString message = error.what();
      QVERIFY2(message.contains("\"no-such-model\" is not supported") &&
                   message.contains("deepseek-coder") && message.contains("qwen2"),
               qPrintable(message));
    }
  }

  void badRegexIsReported() {
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             RegexSplit("(unclosed", SplitBehavior::kIsolated));
  }

  void normalForms() {
    const std::string decomposed = "e\xCC\x81";  // e + COMBINING ACUTE ACCENT
    const std::string composed = "\xC3\xA9";     // é
    QCOMPARE(Normalizer({NormalForm::kNfc}).apply(decomposed), composed);
    QCOMPARE(Normalizer({NormalForm::kNfd}).apply(composed), decomposed);
    QCOMPARE(Normalizer({NormalForm::kNfkc}).apply("\xEF\xAC\x81 \xE2\x91\xA0"),
             std::string("fi 1"));
    QCOMPARE(Normalizer({NormalForm::kNfd, NormalForm::kNfc}).apply(decomposed), composed);
    QCOMPARE(Normalizer().apply(decomposed), decomposed);
    // NUL bytes are text like any other.
    QCOMPARE(Normalizer({NormalForm::kNfc}).apply(std::string("a\0b", 3)), std::string("a\0b", 3));
  }
};

QTEST_GUILESS_MAIN(TestPreTokenizer)
#include "tst_pre_tokenizer.moc"
