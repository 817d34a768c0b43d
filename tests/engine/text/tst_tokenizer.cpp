// The tokenizer against reference ids: llama.cpp's six test vocabularies (GGUF) case by
// case, and a Hugging Face tokenizer.json fixture whose ids the `tokenizers` library
// produced (tests/tools/make_tokenizer_fixture.py). Also round trips, special-token
// parsing and the loader's error sentences.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/text/tokenizer.h"

using namespace tandem::text;

namespace {

const std::string kDataDir = TANDEM_TEST_DATA_DIR "/tokenizer/";

// The six vocabularies of llama.cpp's test-tokenizer-0 and whether decode(encode(x))
// gives x back (all of them keep every byte).
const char* const kVocabularies[] = {"deepseek-coder", "falcon", "gpt-2",
                                     "llama-spm",      "mpt",    "phi-3"};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qFatal("cannot read %s", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct VocabCase {
  std::string text;
  std::vector<TokenId> ids;
};

// .inp holds the cases, each followed by a line "__ggml_vocab_test__"; .out holds one line
// of ids per case.
std::vector<VocabCase> read_cases(const std::string& vocabulary) {
  const std::string base = kDataDir + "ggml-vocab-" + vocabulary + ".gguf";
  std::string inputs = read_file(base + ".inp");
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  for (std::size_t at = 0, found; (found = inputs.find(separator, at)) != std::string::npos;
       at = found + separator.size()) {
    cases.push_back({inputs.substr(at, found - at), {}});
  }
  std::istringstream outputs(read_file(base + ".out"));
  std::string line;
  for (VocabCase& c : cases) {
    if (!std::getline(outputs, line)) qFatal("%s.out has fewer lines than cases", base.c_str());
    std::istringstream numbers(line);
    TokenId id;
    while (numbers >> id) c.ids.push_back(id);
  }
  return cases;
}

const Tokenizer& vocabulary_tokenizer(const std::string& vocabulary) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[vocabulary];
  if (!slot) slot = load_tokenizer(kDataDir + "ggml-vocab-" + vocabulary + ".gguf");
  return *slot;
}

QString show_ids(const std::vector<TokenId>& ids) {
  QStringList parts;
  for (TokenId id : ids) parts << QString::number(id);
  return parts.join(' ');
}

QByteArray bytes(const std::string& text) {
  return QByteArray(text.data(), qsizetype(text.size()));
}

void write_text(const QString& path, const QByteArray& text) {
  QFile file(path);
  QVERIFY(file.open(QIODevice::WriteOnly));
  file.write(text);
}

QString load_error(const std::string& path) {
  try {
    load_tokenizer(path);
  } catch (const std::runtime_error& error) {
    return QString::fromStdString(error.what());
  }
  return QString();
}

}  // namespace

class TestTokenizer : public QObject {
  Q_OBJECT

 private slots:
  void ggufVocabularyMatchesLlamaCpp_data() {
    QTest::addColumn<QString>("vocabulary");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    for (const char* vocabulary : kVocabularies) {
      const std::vector<VocabCase> cases = read_cases(vocabulary);
      QVERIFY(cases.size() >= 40);
      for (std::size_t i = 0; i < cases.size(); ++i) {
        QList<int> expected(cases[i].ids.begin(), cases[i].ids.end());
        QTest::addRow("%s/%02zu", vocabulary, i)
            << QString(vocabulary) << bytes(cases[i].text) << expected;
      }
    }
  }

  void ggufVocabularyMatchesLlamaCpp() {
    QFETCH(QString, vocabulary);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    const Tokenizer& tokenizer = vocabulary_tokenizer(vocabulary.toStdString());
    const std::vector<TokenId> ids = tokenizer.encode(text.toStdString(), false);
    const std::vector<TokenId> want(expected.begin(), expected.end());
    if (ids != want) {
      qWarning("text %s\n got  %s\n want %s", text.toPercentEncoding(" ").constData(),
               qPrintable(show_ids(ids)), qPrintable(show_ids(want)));
    }
    QCOMPARE(ids, want);
  }

  void ggufVocabularyRoundTrips_data() {
    QTest::addColumn<QString>("vocabulary");
    QTest::addColumn<QByteArray>("text");
    for (const char* vocabulary : kVocabularies) {
      const std::vector<VocabCase> cases = read_cases(vocabulary);
      for (std::size_t i = 0; i < cases.size(); ++i) {
        QTest::addRow("%s/%02zu", vocabulary, i) << QString(vocabulary) << bytes(cases[i].text);
      }
    }
  }

  void ggufVocabularyRoundTrips() {
    QFETCH(QString, vocabulary);
    QFETCH(QByteArray, text);
    const Tokenizer& tokenizer = vocabulary_tokenizer(vocabulary.toStdString());
    const std::string original = text.toStdString();
    QCOMPARE(bytes(tokenizer.decode(tokenizer.encode(original, false))), text);
  }

  // tokenizer.json files trained by tests/tools/make_tokenizer_fixture.py: byte-level BPE
  // with merges as ["a", "b"] pairs and as "a b" strings, and SentencePiece-style BPE in
  // its older (Prepend + Replace) and newer (Metaspace) forms.
  void tokenizerJsonMatchesHuggingFace_data() {
    QTest::addColumn<QString>("folder");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    QTest::addColumn<QByteArray>("decoded");
    const std::pair<const char*, const char*> fixtures[] = {
        {"bpe-fixture", "bpe-fixture"},
        {"bpe-fixture-string-merges", "bpe-fixture"},
        {"spm-bpe-fixture", "spm-bpe-fixture"},
        {"spm-bpe-fixture-metaspace", "spm-bpe-fixture-metaspace"},
    };
    for (const auto& [folder, expectation] : fixtures) {
      const nlohmann::json cases =
          nlohmann::json::parse(read_file(kDataDir + expectation + "/expected.json"));
      QVERIFY(cases.size() >= 10);
      for (std::size_t i = 0; i < cases.size(); ++i) {
        const auto ids = cases[i]["ids"].get<std::vector<int>>();
        QTest::addRow("%s/%02zu", folder, i)
            << QString(folder) << bytes(cases[i]["text"].get<std::string>())
            << QList<int>(ids.begin(), ids.end()) << bytes(cases[i]["decoded"].get<std::string>());
      }
    }
  }

  void tokenizerJsonMatchesHuggingFace() {
    QFETCH(QString, folder);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    QFETCH(QByteArray, decoded);
    static std::map<QString, std::unique_ptr<Tokenizer>> cache;
    auto& tokenizer = cache[folder];
    if (!tokenizer) tokenizer = load_tokenizer(kDataDir + folder.toStdString());
    QCOMPARE(tokenizer->model_name(),
             std::string_view(folder.startsWith("spm") ? "SentencePiece BPE" : "byte-level BPE"));
    const std::vector<TokenId> ids = tokenizer->encode(text.toStdString(), true);
    const std::vector<TokenId> want(expected.begin(), expected.end());
    if (ids != want) {
      qWarning("text %s\n got  %s\n want %s", text.toPercentEncoding(" ").constData(),
               qPrintable(show_ids(ids)), qPrintable(show_ids(want)));
    }
    QCOMPARE(ids, want);
    QCOMPARE(bytes(tokenizer->decode(ids, true)), decoded);
  }

  void tokenizerJsonSpecialTokens() {
    const auto tokenizer = load_tokenizer(kDataDir + "bpe-fixture");
    const TokenId im_end = *tokenizer->find_token("<|im_end|>");
    QCOMPARE(tokenizer->special_ids().eos, std::optional<TokenId>(im_end));
    QCOMPARE(tokenizer->special_ids().pad, tokenizer->find_token("<|endoftext|>"));
    // The tokenizer.json path itself is accepted too.
    QCOMPARE(load_tokenizer(kDataDir + "bpe-fixture/tokenizer.json")->vocab_size(),
             tokenizer->vocab_size());
    QVERIFY(!tokenizer->special_ids().bos);
    QVERIFY(tokenizer->is_control(im_end));

    // Unparsed, a chat marker in user text is ordinary text and decodes back to itself.
    const std::string text = "say <|im_end|> now";
    const std::vector<TokenId> plain = tokenizer->encode(text, false);
    QVERIFY(std::find(plain.begin(), plain.end(), im_end) == plain.end());
    QCOMPARE(tokenizer->decode(plain), text);
    const std::vector<TokenId> parsed = tokenizer->encode(text, true);
    QVERIFY(std::find(parsed.begin(), parsed.end(), im_end) != parsed.end());
    // Control tokens are hidden by decode unless asked for.
    QCOMPARE(tokenizer->decode(parsed), std::string("say  now"));
    QCOMPARE(tokenizer->decode(parsed, true), text);

    // A non-special added token is matched whole even when specials are not parsed.
    const std::vector<TokenId> think = tokenizer->encode("<think>", false);
    QCOMPARE(think, std::vector<TokenId>{*tokenizer->find_token("<think>")});
  }

  // Added tokens with lstrip / rstrip swallow the whitespace beside them; ids from
  // tokenizers 0.23 with both options set on <|im_end|> in the fixture.
  void addedTokenStripsWhitespace_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    QTest::newRow("spaces") << QByteArray("x <|im_end|> y") << QList<int>{90, 2, 91};
    QTest::newRow("newlines") << QByteArray("x\n\n<|im_end|>\n\ny") << QList<int>{90, 2, 91};
    QTest::newRow("trailing") << QByteArray("<|im_end|>  ") << QList<int>{2};
  }

  void addedTokenStripsWhitespace() {
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    nlohmann::json document =
        nlohmann::json::parse(read_file(kDataDir + "bpe-fixture/tokenizer.json"));
    for (nlohmann::json& added : document["added_tokens"]) {
      if (added["content"] == "<|im_end|>") added["lstrip"] = added["rstrip"] = true;
    }
    QTemporaryDir dir;
    write_text(dir.filePath("tokenizer.json"), QByteArray::fromStdString(document.dump()));
    const auto tokenizer = load_tokenizer(dir.path().toStdString());
    QCOMPARE(tokenizer->encode(text.toStdString(), true),
             std::vector<TokenId>(expected.begin(), expected.end()));
  }

  // An id far beyond the tokens a file lists is refused with a sentence before a table of
  // that size is made (found by fuzzing: one id of 100 000 000 asked for 6.8 GB); the
  // small gaps real vocabularies leave for reserved tokens are fine.
  void aFarAwayTokenIdIsRefused() {
    nlohmann::json document =
        nlohmann::json::parse(read_file(kDataDir + "bpe-fixture/tokenizer.json"));
    QTemporaryDir dir;
    document["added_tokens"].push_back(
        {{"id", 1000}, {"content", "<|reserved|>"}, {"special", true}});
    write_text(dir.filePath("tokenizer.json"), QByteArray::fromStdString(document.dump()));
    QCOMPARE(load_tokenizer(dir.path().toStdString())->vocab_size(), std::size_t{1001});
    document["model"]["vocab"]["far"] = 100000000;
    write_text(dir.filePath("tokenizer.json"), QByteArray::fromStdString(document.dump()));
    try {
      load_tokenizer(dir.path().toStdString());
      QFAIL("a far-away id was accepted");
    } catch (const std::exception& e) {
      QVERIFY2(std::string(e.what()).find("far beyond") != std::string::npos, e.what());
    }
  }

  // Which special tokens encode(..., add_special) adds follows transformers 4.57: the
  // generic fast tokenizer takes tokenizer.json's post-processor, the Llama family rebuilds
  // it from add_bos_token / add_eos_token (bos by default). Ids of "Hi" from transformers.
  void postProcessorOrConfigAddsSpecials_data() {
    QTest::addColumn<QByteArray>("post_processor");
    QTest::addColumn<QByteArray>("config");
    QTest::addColumn<QList<int>>("expected");
    const QByteArray template_processing = R"({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]},
                           "<|im_end|>": {"id": "<|im_end|>", "ids": [2], "tokens": ["<|im_end|>"]}}})";
    QTest::newRow("generic class, template")
        << template_processing << QByteArray(R"({"tokenizer_class": "PreTrainedTokenizerFast"})")
        << QList<int>{1, 374, 2};
    QTest::newRow("generic class, template beats add_bos_token")
        << template_processing
        << QByteArray(R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": false,
                         "bos_token": "<|im_start|>"})")
        << QList<int>{1, 374, 2};
    QTest::newRow("generic class, no template")
        << QByteArray("null")
        << QByteArray(R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": true,
                         "bos_token": "<|im_start|>"})")
        << QList<int>{374};
    QTest::newRow("Llama class, bos by default")
        << template_processing
        << QByteArray(R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<|im_start|>",
                         "eos_token": "<|im_end|>"})")
        << QList<int>{1, 374};
    QTest::newRow("Llama class, eos asked for")
        << QByteArray("null")
        << QByteArray(R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false,
                         "add_eos_token": true, "bos_token": "<|im_start|>",
                         "eos_token": "<|im_end|>"})")
        << QList<int>{374, 2};
    QTest::newRow("Roberta processing")
        << QByteArray(R"({"type": "RobertaProcessing", "sep": ["<|im_end|>", 2],
                         "cls": ["<|im_start|>", 1], "trim_offsets": true,
                         "add_prefix_space": false})")
        << QByteArray(R"({"tokenizer_class": "PreTrainedTokenizerFast"})") << QList<int>{1, 374, 2};
  }

  void postProcessorOrConfigAddsSpecials() {
    QFETCH(QByteArray, post_processor);
    QFETCH(QByteArray, config);
    QFETCH(QList<int>, expected);
    nlohmann::json document =
        nlohmann::json::parse(read_file(kDataDir + "bpe-fixture/tokenizer.json"));
    document["post_processor"] = nlohmann::json::parse(post_processor.toStdString());
    QTemporaryDir dir;
    write_text(dir.filePath("tokenizer.json"), QByteArray::fromStdString(document.dump()));
    write_text(dir.filePath("tokenizer_config.json"), config);
    const auto tokenizer = load_tokenizer(dir.path().toStdString());
    QCOMPARE(tokenizer->encode("Hi", false, true),
             std::vector<TokenId>(expected.begin(), expected.end()));
    QCOMPARE(tokenizer->encode("Hi", false, false), std::vector<TokenId>{374});
  }

  void ggufSpecialTokens() {
    const Tokenizer& gpt2 = vocabulary_tokenizer("gpt-2");
    QCOMPARE(gpt2.special_ids().eos, std::optional<TokenId>(50256));
    QCOMPARE(gpt2.encode("<|endoftext|>", true), std::vector<TokenId>{50256});
    QVERIFY(gpt2.encode("<|endoftext|>", false).size() > 1);

    const Tokenizer& llama = vocabulary_tokenizer("llama-spm");
    QCOMPARE(llama.model_name(), std::string_view("SentencePiece"));
    QCOMPARE(llama.special_ids().bos, std::optional<TokenId>(1));
    QCOMPARE(llama.special_ids().eos, std::optional<TokenId>(2));
    QVERIFY(llama.adds_bos());
    const std::vector<TokenId> with_bos = llama.encode("Hello world", false, true);
    QCOMPARE(with_bos.front(), 1);
    QCOMPARE(llama.decode(with_bos), std::string("Hello world"));
    // "▁Hello" is one piece; the space mark decodes to a space.
    QCOMPARE(llama.token_piece(15043), std::string(" Hello"));
    QCOMPARE(llama.token_text(15043), std::string("\xE2\x96\x81Hello"));
    // A character without a token falls back to byte tokens.
    QCOMPARE(llama.token_kind(*llama.find_token("<0x0A>")), TokenKind::kByte);
    QCOMPARE(llama.token_piece(*llama.find_token("<0x0A>")), std::string("\n"));
  }

  void invalidUtf8IsRepaired() {
    const Tokenizer& gpt2 = vocabulary_tokenizer("gpt-2");
    const std::vector<TokenId> ids = gpt2.encode(std::string("a\xFF"
                                                             "b"),
                                                 false);
    QCOMPARE(gpt2.decode(ids), std::string("a\xEF\xBF\xBD"
                                           "b"));
  }

  void loaderExplainsProblems_data() {
    QTest::addColumn<QString>("file");     // written into an empty folder
    QTest::addColumn<QByteArray>("text");  // its content
    QTest::addColumn<QString>("expected");
    QTest::newRow("no tokenizer.json") << "" << QByteArray() << "has no tokenizer.json";
    QTest::newRow("invalid JSON") << "tokenizer.json" << QByteArray("{\"model\": [")
                                  << "tokenizer.json is not valid JSON";
    QTest::newRow("unigram model")
        << "tokenizer.json" << QByteArray("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}")
        << "model type \"Unigram\" is not supported; Tandem reads BPE models";
    QTest::newRow("unknown pre-tokenizer")
        << "tokenizer.json"
        << QByteArray(
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
               "\"pre_tokenizer\": {\"type\": \"SentencePieceSplit\"}}")
        << "pre-tokenizer \"SentencePieceSplit\" is not supported; Tandem knows Sequence";
    QTest::newRow("bad regex")
        << "tokenizer.json"
        << QByteArray(
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
               "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, "
               "\"behavior\": \"Isolated\"}}")
        << "in its Split pre-tokenizer, the regex \"(a\" does not compile";
    const QByteArray model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
    QTest::newRow("compiled SentencePiece rules")
        << "tokenizer.json"
        << "{" + model +
               R"(, "normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAEC"}})"
        << "its normalizer \"Precompiled\" holds SentencePiece's compiled normalization rules";
    QTest::newRow("single-word added token")
        << "tokenizer.json"
        << "{" + model + R"(, "added_tokens": [{"id": 1, "content": "<x>", "single_word": true}]})"
        << "its added token \"<x>\" matches only as a single word";
    QTest::newRow("dropout") << "tokenizer.json"
                             << QByteArray(
                                    R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [],
                         "dropout": 0.1}})")
                             << "its BPE model has dropout";
    QTest::newRow("WordPiece decoder") << "tokenizer.json"
                                       << "{" + model + R"(, "decoder": {"type": "WordPiece"}})"
                                       << "its decoder \"WordPiece\" is not supported";
    QTest::newRow("unknown post-processor")
        << "tokenizer.json"
        << "{" + model + R"(, "post_processor": {"type": "Shuffle"}})"
        << "its post-processor \"Shuffle\" is not supported";
    QTest::newRow("unknown normalizer") << "tokenizer.json"
                                        << "{" + model + R"(, "normalizer": {"type": "Uppercase"}})"
                                        << "its normalizer \"Uppercase\" is not supported";
    QTest::newRow("untranslatable regex")
        << "tokenizer.json"
        << "{" + model +
               R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[[:graph:]]"},
                  "behavior": "Isolated", "invert": false}})"
        << "uses the POSIX class [:graph:], which Tandem cannot translate";
    QTest::newRow("field of the wrong type")
        << "tokenizer.json"
        << QByteArray(
               "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
               "\"ignore_merges\": \"yes\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}")
        << "have an unexpected structure";
    QTest::newRow("not a model") << "notes.txt" << QByteArray("hello")
                                 << "neither a model folder nor a .gguf file";
    QTest::newRow("gguf without vocabulary")
        << "model.gguf" << QByteArray("GGUF\x03\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24)
        << "tokenizer.ggml.model is missing";
    QTest::newRow("not gguf") << "model.gguf" << QByteArray("PK\x03\x04 zip file")
                              << "does not start with the bytes \"GGUF\"";
  }

  void loaderExplainsProblems() {
    QFETCH(QString, file);
    QFETCH(QByteArray, text);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    std::string path = dir.path().toStdString();
    if (!file.isEmpty()) {
      write_text(dir.filePath(file), text);
      if (!file.endsWith("tokenizer.json")) path = dir.filePath(file).toStdString();
    }
    const QString error = load_error(path);
    QVERIFY2(error.contains(expected), qPrintable(error));
  }

  void ggufWithUnsupportedTokenizerType() {
    // A minimal GGUF whose tokenizer is BERT's WordPiece.
    QByteArray gguf("GGUF", 4);
    auto put64 = [&](std::uint64_t v) { gguf.append(reinterpret_cast<const char*>(&v), 8); };
    auto put32 = [&](std::uint32_t v) { gguf.append(reinterpret_cast<const char*>(&v), 4); };
    put32(3);
    put64(0);
    put64(1);
    const std::string key = "tokenizer.ggml.model", value = "bert";
    put64(key.size());
    gguf.append(key.data(), qsizetype(key.size()));
    put32(8);  // string
    put64(value.size());
    gguf.append(value.data(), qsizetype(value.size()));
    QTemporaryDir dir;
    write_text(dir.filePath("bert.gguf"), gguf);
    const QString error = load_error(dir.filePath("bert.gguf").toStdString());
    QVERIFY2(error.contains("bert.gguf") && error.contains("\"bert\" is not supported") &&
                 error.contains("\"gpt2\"") && error.contains("\"llama\""),
             qPrintable(error));
  }

  void missingPathIsExplained() {
    const QString error = load_error("/nonexistent/model");
    QVERIFY2(error.contains("/nonexistent/model does not exist"), qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
