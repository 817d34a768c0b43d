// Text preparation before BPE: regex splits with every Hugging Face behaviour, the regex
// dialects of the reference engines, the character classes of Hugging Face's pre-tokenizers,
// and the normalizers. Expected words and strings are what the `tokenizers` library (0.22 and
// 0.23) gives for the same step and input; the AFMoE digit groups follow llama.cpp's rule.
#include <QtTest>

#include "engine/text/normalizer.h"
#include "engine/text/pre_tokenizer.h"

using namespace tandem::text;

Q_DECLARE_METATYPE(SplitBehavior)

namespace {

QStringList words_of(const PreTokenizer& pre, const std::string& text, bool at_origin = true) {
  QStringList words;
  for (const std::string& word : pre.split(text, at_origin)) words << QString::fromStdString(word);
  return words;
}

QStringList split_words(RegexSplit split, const std::string& text) {
  PreTokenizer pre;
  pre.add_split(std::move(split));
  return words_of(pre, text);
}

}  // namespace

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
    pre.add_split(RegexSplit::literal("--", SplitBehavior::kIsolated));
    QCOMPARE(pre.split("a--b-c"), (std::vector<std::string>{"a", "--", "b-c"}));
    PreTokenizer dot;
    dot.add_split(RegexSplit::literal(".", SplitBehavior::kRemoved));
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

  // Patterns as tokenizer.json writes them, read as Oniguruma reads them (Hugging Face's
  // engine), not as PCRE2 would.
  void oniguruma_data() {
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("behavior");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QStringList>("expected");
    // \w takes marks and, from Oniguruma's Latin-1 table, "²"; \b follows \w.
    QTest::newRow("word boundary") << R"(\b\w+\b)"
                                   << "isolated"
                                   << "x² e\u0301t" << QStringList{"x²", " ", "e\u0301t"};
    QTest::newRow("joiner is no word") << R"(\w+)"
                                       << "isolated"
                                       << "a\u200db" << QStringList{"a", "\u200d", "b"};
    QTest::newRow("class intersection") << R"([\p{L}&&[^a-z]]+)"
                                        << "isolated"
                                        << "abCDéÉf" << QStringList{"ab", "CDéÉ", "f"};
    QTest::newRow("intersection with \w") << R"([\w&&[^\d]]+)"
                                          << "isolated"
                                          << "ab12cd" << QStringList{"ab", "12", "cd"};
    QTest::newRow("nested negated class") << R"([a[^b]])"
                                          << "removed"
                                          << "abcb" << QStringList{"b", "b"};
    QTest::newRow("hex digits") << R"(\h+)"
                                << "isolated"
                                << "xyzabc09 \t" << QStringList{"xyz", "abc09", " \t"};
    QTest::newRow("posix alpha") << R"([[:alpha:]]+)"
                                 << "isolated"
                                 << "Ⅻa1" << QStringList{"Ⅻa", "1"};
    QTest::newRow("decimal digits") << R"(\d+)"
                                    << "isolated"
                                    << "١٢x²" << QStringList{"١٢", "x²"};
    QTest::newRow("white space") << R"(\s+)"
                                 << "isolated"
                                 << "a\u180eb\u3000c" << QStringList{"a\u180eb", "\u3000", "c"};
    QTest::newRow("lower bound left out") << "a{,2}"
                                          << "isolated"
                                          << "aaab" << QStringList{"aa", "a", "b"};
    // Ruby's $ and ^ match at every line.
    QTest::newRow("line end") << R"(\s+$)"
                              << "isolated"
                              << "a  \nb  \n"
                              << QStringList{"a", "  ", "\nb", "  \n"};
    QTest::newRow("line start and end")
        << R"(^\s+|\s+$)"
        << "isolated"
        << "  a  \n  b  " << QStringList{"  ", "a", "  ", "\n", "  ", "b", "  "};
    // A script name is the Script property: "。" is Common, though Han uses it.
    QTest::newRow("script") << R"(\p{Han}+)"
                            << "isolated"
                            << "世界。x" << QStringList{"世界", "。x"};
    // Empty matches split too, except one where the match before ends.
    QTest::newRow("lookahead digit groups")
        << R"((?=(\d{3})+(?!\d)))"
        << "isolated"
        << "1234567 12345" << QStringList{"1", "234", "567 12", "345"};
    QTest::newRow("empty pattern") << ""
                                   << "isolated"
                                   << "abc" << QStringList{"a", "b", "c"};
    QTest::newRow("optional spaces") << R"(\s*)"
                                     << "isolated"
                                     << "a b" << QStringList{"a", " ", "b"};
    QTest::newRow("optional run removed") << "b*"
                                          << "removed"
                                          << "abbca" << QStringList{"a", "c", "a"};
  }

  void oniguruma() {
    QFETCH(QString, pattern);
    QFETCH(QString, behavior);
    QFETCH(QString, text);
    QFETCH(QStringList, expected);
    const SplitBehavior split_behavior =
        behavior == "removed" ? SplitBehavior::kRemoved : SplitBehavior::kIsolated;
    QCOMPARE(split_words(RegexSplit(pattern.toStdString(), split_behavior), text.toStdString()),
             expected);
  }

  void untranslatableRegexIsRefused_data() {
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<int>("dialect");
    QTest::addColumn<QString>("expected");
    QTest::newRow("symmetric difference")
        << "[a~~b]" << int(RegexDialect::kRustRegex) << "a symmetric difference";
    QTest::newRow("posix graph") << "[[:graph:]]" << int(RegexDialect::kOniguruma)
                                 << "the POSIX class [:graph:]";
    QTest::newRow("unterminated class")
        << "[abc" << int(RegexDialect::kOniguruma) << "without its closing ']'";
  }

  void untranslatableRegexIsRefused() {
    QFETCH(QString, pattern);
    QFETCH(int, dialect);
    QFETCH(QString, expected);
    try {
      TokenizerRegex(pattern.toStdString(), static_cast<RegexDialect>(dialect));
      QFAIL("the pattern was accepted");
    } catch (const std::invalid_argument& error) {
      QVERIFY2(QString(error.what()).contains(expected), error.what());
    }
  }

  // Rust's \w (tiktoken, Hugging Face's Whitespace) takes the joiners, Oniguruma's does not.
  void rustWordClassTakesJoiners() {
    PreTokenizer pre;
    pre.add_split(RegexSplit(R"(\w+)", SplitBehavior::kIsolated, false, RegexDialect::kRustRegex));
    QCOMPARE(words_of(pre, "a\u200db ²"), (QStringList{"a\u200db", " ²"}));
  }

  // Hugging Face's pre-tokenizers built on character classes.
  void characterClassSplits_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("Whitespace") << "whitespace"
                                << "e\u0301te ½ x² a_b ١٢ \u3000x\u00a0y"
                                << QStringList{"e\u0301te", "½", "x", "²", "a_b", "١٢", "x", "y"};
    QTest::newRow("WhitespaceSplit") << "whitespace-split"
                                     << " a\u3000b\u00a0c\xC2\x85"
                                        "d\u200be "
                                     << QStringList{"a", "b", "c", "d\u200be"};
    QTest::newRow("Digits individual")
        << "digits"
        << "a123½²٣" << QStringList{"a", "1", "2", "3", "½", "²", "٣"};
    QTest::newRow("Digits contiguous") << "digit-runs"
                                       << "a123½²٣b" << QStringList{"a", "123½²٣", "b"};
    QTest::newRow("Punctuation") << "punctuation"
                                 << "a$b+c<>,.!¡¿«»…—-"
                                 << QStringList{"a", "$", "b", "+", "c", "<", ">", ",", ".",
                                                "!", "¡", "¿", "«", "»", "…", "—", "-"};
    QTest::newRow("CharDelimiterSplit") << "delimiter-x"
                                        << "axxbxc" << QStringList{"a", "b", "c"};
    QTest::newRow("FixedLength") << "fixed-3"
                                 << "abcdefghé你好x" << QStringList{"abc", "def", "ghé", "你好x"};
    // Spaces belong to any script, so text before the first script is dropped.
    QTest::newRow("UnicodeScripts")
        << "scripts"
        << " abc 你好こんにちはカタカナー ab,c Привет123 ١٢"
        << QStringList{"abc ", "你好こんにちはカタカナー ", "ab", ",", "c ", "Привет", "123 ",
                       "١٢"};
    QTest::newRow("UnicodeScripts marks") << "scripts"
                                          << "e\u0301x" << QStringList{"e", "\u0301", "x"};
    QTest::newRow("UnicodeScripts leading spaces") << "scripts"
                                                   << "  lead" << QStringList{"lead"};
    // Emoji newer than Hugging Face's script table count as any script.
    QTest::newRow("UnicodeScripts new emoji") << "scripts"
                                              << "🦙🦙 x" << QStringList{"x"};
  }

  void characterClassSplits() {
    QFETCH(QString, kind);
    QFETCH(QString, text);
    QFETCH(QStringList, expected);
    PreTokenizer pre;
    if (kind == "whitespace") pre.add_split(whitespace_words());
    if (kind == "whitespace-split") pre.add_split(whitespace_split());
    if (kind == "digits") pre.add_split(digits_split(true));
    if (kind == "digit-runs") pre.add_split(digits_split(false));
    if (kind == "punctuation") pre.add_split(punctuation_split(SplitBehavior::kIsolated));
    if (kind == "delimiter-x") pre.add_split(char_delimiter_split("x"));
    if (kind == "fixed-3") pre.add_fixed_length(3);
    if (kind == "scripts") pre.add_unicode_scripts();
    QVERIFY(!pre.empty());
    QCOMPARE(words_of(pre, text.toStdString()), expected);
  }

  // Metaspace's "first" scheme marks only the word at the start of the whole input.
  void metaspaceFirstLooksAtTheOrigin() {
    PreTokenizer pre;
    MetaspaceOptions options;
    options.prepend = MetaspaceOptions::Prepend::kFirst;
    pre.add_metaspace(options);
    QCOMPARE(words_of(pre, " hello  world"), (QStringList{"▁hello", "▁", "▁world"}));
    QCOMPARE(words_of(pre, "hello", true), (QStringList{"▁hello"}));
    QCOMPARE(words_of(pre, "hello", false), (QStringList{"hello"}));
    PreTokenizer after_split;
    after_split.add_split(whitespace_split());
    after_split.add_metaspace(options);
    QCOMPARE(words_of(after_split, "  hello world"), (QStringList{"hello", "world"}));
  }

  // ByteLevel writes the byte alphabet; a later step sees "Ġ", not " ".
  void stepsAfterByteLevelSeeTheAlphabet() {
    PreTokenizer pre;
    pre.add_byte_level_alphabet();
    pre.add_split(RegexSplit::literal("Ġ", SplitBehavior::kMergedWithNext));
    QCOMPARE(words_of(pre, "a b"), (QStringList{"a", "Ġb"}));
  }

  // llama.cpp groups a digit run by its length modulo three from the left (AFMoE).
  void afmoeDigitGroups_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<QStringList>("expected");
    QTest::newRow("seven") << "1234567" << QStringList{"1", "234", "567"};
    QTest::newRow("five") << "x12345y" << QStringList{"x", "12", "345", "y"};
    QTest::newRow("six") << "123456" << QStringList{"123", "456"};
    QTest::newRow("one") << "a1" << QStringList{"a", "1"};
  }

  void afmoeDigitGroups() {
    QFETCH(QString, text);
    QFETCH(QStringList, expected);
    NamedPreTokenizer afmoe = pre_tokenizer_for_gguf("afmoe");
    QStringList words;
    for (const std::string& word : afmoe.pre_tokenizer.split(text.toStdString())) {
      words << QString::fromStdString(word);  // digits and letters map to themselves
    }
    QCOMPARE(words, expected);
  }

  void ggufNamesCarryLlamaCppOptions() {
    QVERIFY(pre_tokenizer_for_gguf("llama-bpe").ignore_merges);
    QVERIFY(pre_tokenizer_for_gguf("llama-bpe").adds_bos);
    QVERIFY(!pre_tokenizer_for_gguf("qwen2").ignore_merges);
    QVERIFY(pre_tokenizer_for_gguf("kimi-k2").merges_by_rank);
    QVERIFY(!pre_tokenizer_for_gguf("gemma4").byte_level);
    QVERIFY(pre_tokenizer_for_gguf("gemma4").escapes_spaces);
    QVERIFY(pre_tokenizer_for_gguf("gemma4").forces_bos);
    QVERIFY(!pre_tokenizer_for_gguf("whitespace").escapes_spaces);
  }

  void normalizerSteps_data() {
    QTest::addColumn<QString>("step");
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("expected");
    QTest::addColumn<bool>("starts_at_origin");
    QTest::newRow("Lowercase") << "lowercase"
                               << "İSTANBUL ΣΑΣ ẞ ǅ"
                               << "i\u0307stanbul σασ ß ǆ" << true;
    QTest::newRow("Strip") << "strip"
                           << "\u3000 a \xC2\x85"
                           << "a" << false;
    QTest::newRow("Strip right") << "strip-right"
                                 << "  a  "
                                 << "  a" << true;
    QTest::newRow("StripAccents") << "strip-accents"
                                  << "e\u0301a\u0903x\u20dd"
                                  << "eax" << true;
    QTest::newRow("StripAccents first") << "strip-accents"
                                        << "\u0301a"
                                        << "a" << false;
    QTest::newRow("BertNormalizer") << "bert"
                                    << "Héllo\tWorld\x01\ufffd\u200b\xC2\x85你好 Ｈ"
                                    << "hello world 你  好  ｈ" << true;
    QTest::newRow("Nmt") << "nmt"
                         << "a\x01"
                            "b\tc\u200bd\ufeffe"
                         << "ab c d e" << true;
    QTest::newRow("Replace regex") << "replace"
                                   << "a  \n b"
                                   << "a b" << true;
    QTest::newRow("Replace at start") << "replace-empty"
                                      << "  a"
                                      << "a" << false;
    QTest::newRow("ByteLevel") << "byte-level"
                               << "a b\n"
                               << "aĠbĊ" << true;
  }

  void normalizerSteps() {
    QFETCH(QString, step);
    QFETCH(QString, text);
    QFETCH(QString, expected);
    QFETCH(bool, starts_at_origin);
    Normalizer normalizer;
    if (step == "lowercase") normalizer.add_lowercase();
    if (step == "strip") normalizer.add_strip(true, true);
    if (step == "strip-right") normalizer.add_strip(false, true);
    if (step == "strip-accents") normalizer.add_strip_accents();
    if (step == "bert") {
      normalizer.add_bert_clean_text();
      normalizer.add_bert_chinese_padding();
      normalizer.add_bert_strip_accents();
      normalizer.add_lowercase();
    }
    if (step == "nmt") normalizer.add_nmt();
    if (step == "replace")
      normalizer.add_replace(TokenizerRegex(R"(\s+)", RegexDialect::kOniguruma), " ");
    if (step == "replace-empty")
      normalizer.add_replace(TokenizerRegex(R"(^\s+)", RegexDialect::kOniguruma), "");
    if (step == "byte-level") normalizer.add_byte_level_alphabet();
    const std::string input = text.toStdString();
    const Normalizer::Result result = normalizer.normalize(input);
    QCOMPARE(QString::fromStdString(result.text), expected);
    QCOMPARE(result.starts_at_origin, starts_at_origin);
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
