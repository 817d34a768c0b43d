// Streaming detokenization: text is released only in whole UTF-8 characters, a character
// split across tokens is held back until its last byte arrives, and the streamed text
// equals what decode() gives for the whole sequence.
#include <QtTest>
#include <memory>

#include "engine/text/tokenizer.h"
#include "engine/text/utf8.h"
#include "engine/text/utf8_stream.h"

using namespace tandem::text;

namespace {

const std::string kDataDir = TANDEM_TEST_DATA_DIR "/tokenizer/";

std::unique_ptr<Tokenizer> load(const char* vocabulary) {
  return load_tokenizer(kDataDir + "ggml-vocab-" + vocabulary + ".gguf");
}

const std::string kLlama = "\xF0\x9F\xA6\x99";  // U+1F999, four bytes

}  // namespace

class TestUtf8Stream : public QObject {
  Q_OBJECT

 private slots:
  void assemblerHoldsBackIncompleteCharacters() {
    Utf8Assembler assembler;
    QCOMPARE(assembler.push("a\xF0\x9F"), std::string("a"));
    QCOMPARE(assembler.pending_bytes(), std::size_t(2));
    QCOMPARE(assembler.push("\xA6"), std::string());
    QCOMPARE(assembler.push("\x99!"), kLlama + "!");
    QCOMPARE(assembler.pending_bytes(), std::size_t(0));
  }

  void assemblerReplacesBytesThatCannotComplete() {
    Utf8Assembler assembler;
    QCOMPARE(assembler.push("\x80"), std::string("\xEF\xBF\xBD"));  // stray continuation
    QCOMPARE(assembler.push("\xE2"), std::string());                // may still complete
    QCOMPARE(assembler.push("x"), std::string("\xEF\xBF\xBDx"));    // it did not
    QCOMPARE(assembler.push("\xC3"), std::string());
    QCOMPARE(assembler.finish(), std::string("\xEF\xBF\xBD"));  // cut at the end
    QCOMPARE(assembler.finish(), std::string());
  }

  // Llama's SentencePiece vocabulary has no token for U+1F999: it becomes four byte
  // tokens, and the character appears only with the fourth.
  void byteTokensReleaseTheCharacterWhenComplete() {
    const auto tokenizer = load("llama-spm");
    const std::vector<TokenId> ids = tokenizer->encode(kLlama, false);
    QCOMPARE(ids.size(), std::size_t(5));  // "▁" then <0xF0> <0x9F> <0xA6> <0x99>
    StreamingDetokenizer stream(*tokenizer);
    QCOMPARE(stream.push(ids[0]), std::string());  // the space encode() added is dropped
    QCOMPARE(stream.push(ids[1]), std::string());
    QCOMPARE(stream.push(ids[2]), std::string());
    QCOMPARE(stream.push(ids[3]), std::string());
    QCOMPARE(stream.push(ids[4]), kLlama);
    QCOMPARE(stream.finish(), std::string());
  }

  // GPT-2 splits the same character across byte-level BPE tokens whose pieces are not
  // whole characters; nothing is shown until the character is complete.
  void bpePiecesReleaseTheCharacterWhenComplete() {
    const auto tokenizer = load("gpt-2");
    const std::vector<TokenId> ids = tokenizer->encode(kLlama, false);
    QVERIFY(ids.size() >= 2);
    StreamingDetokenizer stream(*tokenizer);
    std::string shown;
    for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
      QVERIFY(!is_valid_utf8(tokenizer->token_piece(ids[i])));
      shown += stream.push(ids[i]);
    }
    QCOMPARE(shown, std::string());
    QCOMPARE(stream.push(ids.back()), kLlama);
  }

  void streamEqualsDecode_data() {
    QTest::addColumn<QString>("vocabulary");
    QTest::addColumn<QByteArray>("text");
    const char* texts[] = {
        "Hello world",
        " this is \xF0\x9F\xA6\x99.cpp",
        "\xF0\x9F\x9A\x80 (normal) \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
        "\xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93\xE1\x9F\x8B",  // Khmer
        "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
        "apple\xE5\xB7\xA5\xE4\xBD\x9C",
        "  \n\t mixed   whitespace \n\n",
    };
    for (const char* vocabulary :
         {"deepseek-coder", "falcon", "gpt-2", "llama-spm", "mpt", "phi-3"}) {
      for (std::size_t i = 0; i < std::size(texts); ++i) {
        QTest::addRow("%s/%zu", vocabulary, i) << QString(vocabulary) << QByteArray(texts[i]);
      }
    }
  }

  void streamEqualsDecode() {
    QFETCH(QString, vocabulary);
    QFETCH(QByteArray, text);
    const auto tokenizer = load(vocabulary.toUtf8().constData());
    const std::vector<TokenId> ids = tokenizer->encode(text.toStdString(), false);
    StreamingDetokenizer stream(*tokenizer);
    std::string streamed;
    for (TokenId id : ids) {
      const std::string chunk = stream.push(id);
      QVERIFY2(is_valid_utf8(chunk), "a chunk holds half a character");
      streamed += chunk;
    }
    streamed += stream.finish();
    QCOMPARE(streamed, tokenizer->decode(ids));
    QCOMPARE(QByteArray::fromStdString(streamed), text);
  }
};

QTEST_GUILESS_MAIN(TestUtf8Stream)
#include "tst_utf8_stream.moc"
