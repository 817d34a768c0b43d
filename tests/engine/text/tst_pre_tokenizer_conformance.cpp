// Pre-tokenizers against the libraries the models are tokenized with, id for id, on the
// fixtures of tests/tools/make_pre_tokenizer_fixtures.py:
//  - every tokenizer.json pre-tokenizer type, split behaviour, normalizer and post-processor
//    as a variant of a small base tokenizer, against Hugging Face tokenizers 0.22;
//  - every llama.cpp pre-tokenizer name (GGUF tokenizer.ggml.pre), written into a copy of a
//    base GGUF vocabulary, against a Hugging Face tokenizer running the same regexes (and
//    tiktoken for kimi-k2);
//  - a Kimi-K2-style folder (tiktoken.model, no tokenizer.json) against tiktoken.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/text/pre_tokenizer.h"
#include "engine/text/tokenizer.h"

using namespace tandem::text;
using nlohmann::json;

namespace {

const std::string kDataDir = TANDEM_TEST_DATA_DIR "/tokenizer/";
const std::string kFixtureDir = kDataDir + "pre-tokenizers/";
const std::string kKimiDir = kDataDir + "kimi-tiktoken/";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) qFatal("cannot read %s", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const QString& path, const std::string& bytes) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly)) qFatal("cannot write %s", qPrintable(path));
  file.write(bytes.data(), qsizetype(bytes.size()));
}

const json& expected() {
  static const json document = json::parse(read_file(kFixtureDir + "expected.json"));
  return document;
}

QByteArray bytes(const std::string& text) {
  return QByteArray(text.data(), qsizetype(text.size()));
}

QList<int> id_list(const json& ids) {
  const auto values = ids.get<std::vector<int>>();
  return QList<int>(values.begin(), values.end());
}

QString show_ids(const std::vector<TokenId>& ids) {
  QStringList parts;
  for (TokenId id : ids) parts << QString::number(id);
  return parts.join(' ');
}

void compare_ids(const std::vector<TokenId>& ids, const QList<int>& expected_ids,
                 const QByteArray& text) {
  const std::vector<TokenId> want(expected_ids.begin(), expected_ids.end());
  if (ids != want) {
    qWarning("text %s\n got  %s\n want %s", text.toPercentEncoding(" ").constData(),
             qPrintable(show_ids(ids)), qPrintable(show_ids(want)));
  }
  QCOMPARE(ids, want);
}

// The base tokenizer.json with the variant's fields replaced, as the generator did.
std::unique_ptr<Tokenizer> load_variant(const json& variant) {
  json document =
      json::parse(read_file(kFixtureDir + variant["base"].get<std::string>() + "-tokenizer.json"));
  for (const auto& [key, value] : variant["patch"].items()) {
    if (key.starts_with("model."))
      document["model"][key.substr(6)] = value;
    else
      document[key] = value;
  }
  QTemporaryDir dir;
  write_file(dir.filePath("tokenizer.json"), document.dump());
  return load_tokenizer(dir.path().toStdString());
}

void append_u64(std::string& out, std::uint64_t value) {
  out.append(reinterpret_cast<const char*>(&value), 8);
}

void append_string_kv(std::string& out, const std::string& key, const std::string& value) {
  append_u64(out, key.size());
  out += key;
  const std::uint32_t string_type = 8;
  out.append(reinterpret_cast<const char*>(&string_type), 4);
  append_u64(out, value.size());
  out += value;
}

// A copy of a base GGUF whose last two keys, tokenizer.ggml.model and tokenizer.ggml.pre,
// say `model` and `pre` (the generator writes them last for this).
std::string gguf_with(const std::string& base, const std::string& model, const std::string& pre) {
  std::string file = read_file(kFixtureDir + base + "-base.gguf");
  std::string key;
  append_u64(key, std::string("tokenizer.ggml.model").size());
  key += "tokenizer.ggml.model";
  const std::size_t at = file.rfind(key);
  if (at == std::string::npos) qFatal("%s-base.gguf has no tokenizer.ggml.model", base.c_str());
  file.resize(at);
  append_string_kv(file, "tokenizer.ggml.model", model);
  append_string_kv(file, "tokenizer.ggml.pre", pre);
  return file;
}

std::unique_ptr<Tokenizer> load_gguf_with(const std::string& base, const std::string& model,
                                          const std::string& pre) {
  QTemporaryDir dir;
  const QString path = dir.filePath("vocab.gguf");
  write_file(path, gguf_with(base, model, pre));
  return load_tokenizer(path.toStdString());
}

const json& group_named(const std::string& name) {
  for (const json& group : expected()["gguf_groups"]) {
    if (group["name"] == name) return group;
  }
  qFatal("no group %s", name.c_str());
}

QString load_error(const std::string& path) {
  try {
    load_tokenizer(path);
  } catch (const std::runtime_error& error) {
    return QString::fromStdString(error.what());
  }
  return QString();
}

// Copies the Kimi fixture into `dir` without `left_out`, then writes `replaced` over it.
void copy_kimi(const QTemporaryDir& dir, const QString& left_out,
               const std::map<QString, std::string>& replaced = {}) {
  for (const QString& name : QDir(QString::fromStdString(kKimiDir)).entryList(QDir::Files)) {
    if (name == left_out || name == "expected.json") continue;
    QFile::copy(QString::fromStdString(kKimiDir) + name, dir.filePath(name));
  }
  for (const auto& [name, content] : replaced) {
    QFile::remove(dir.filePath(name));
    write_file(dir.filePath(name), content);
  }
}

}  // namespace

class TestPreTokenizerConformance : public QObject {
  Q_OBJECT

 private slots:
  void tokenizerJsonMatchesHuggingFace_data() {
    QTest::addColumn<int>("variant");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    const json& texts = expected()["texts"];
    const json& variants = expected()["tokenizer_json"];
    QVERIFY(variants.size() >= 60);
    for (std::size_t v = 0; v < variants.size(); ++v) {
      for (std::size_t t = 0; t < texts.size(); ++t) {
        QTest::addRow("%s/%02zu", variants[v]["name"].get<std::string>().c_str(), t)
            << int(v) << bytes(texts[t].get<std::string>()) << id_list(variants[v]["ids"][t]);
      }
    }
  }

  void tokenizerJsonMatchesHuggingFace() {
    QFETCH(int, variant);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    static std::map<int, std::unique_ptr<Tokenizer>> cache;
    const json& description = ::expected()["tokenizer_json"][variant];
    auto& tokenizer = cache[variant];
    if (!tokenizer) tokenizer = load_variant(description);
    compare_ids(tokenizer->encode(text.toStdString(), true, description["add_special"].get<bool>()),
                expected, text);
  }

  // Every value of tokenizer.ggml.pre llama.cpp accepts, in a GGUF file, against the ids
  // of its group's reference.
  void ggufNamedPreTokenizerMatchesReference_data() {
    QTest::addColumn<QString>("pre");
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("base");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    const json& texts = expected()["texts"];
    for (const json& name : expected()["gguf_names"]) {
      const json& group = group_named(name["group"]);
      for (std::size_t t = 0; t < texts.size(); ++t) {
        QTest::addRow("%s/%02zu", name["pre"].get<std::string>().c_str(), t)
            << QString::fromStdString(name["pre"]) << QString::fromStdString(name["model"])
            << QString::fromStdString(group["base"]) << bytes(texts[t].get<std::string>())
            << id_list(group["ids"][t]);
      }
    }
  }

  void ggufNamedPreTokenizerMatchesReference() {
    QFETCH(QString, pre);
    QFETCH(QString, model);
    QFETCH(QString, base);
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    static std::map<QString, std::unique_ptr<Tokenizer>> cache;
    auto& tokenizer = cache[pre];
    if (!tokenizer) {
      tokenizer = load_gguf_with(base.toStdString(), model.toStdString(), pre.toStdString());
    }
    compare_ids(tokenizer->encode(text.toStdString(), true), expected, text);
  }

  void everyLlamaCppNameIsCovered() {
    std::set<std::string> fixture_names;
    for (const json& name : expected()["gguf_names"]) fixture_names.insert(name["pre"]);
    const std::vector<std::string_view> supported = gguf_pre_tokenizer_names();
    const std::set<std::string> supported_names(supported.begin(), supported.end());
    QCOMPARE(supported_names.size(), supported.size());  // no name twice
    QCOMPARE(supported_names, fixture_names);
    QVERIFY(supported_names.size() >= 90);
  }

  // llama.cpp adds bos by default for some families when the file does not say.
  void ggufBosDefaultFollowsLlamaCpp_data() {
    QTest::addColumn<QString>("pre");
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("base");
    QTest::addColumn<bool>("adds_bos");
    for (const json& name : expected()["gguf_names"]) {
      QTest::addRow("%s", name["pre"].get<std::string>().c_str())
          << QString::fromStdString(name["pre"]) << QString::fromStdString(name["model"])
          << QString::fromStdString(group_named(name["group"])["base"])
          << name["adds_bos"].get<bool>();
    }
  }

  void ggufBosDefaultFollowsLlamaCpp() {
    QFETCH(QString, pre);
    QFETCH(QString, model);
    QFETCH(QString, base);
    QFETCH(bool, adds_bos);
    const auto tokenizer =
        load_gguf_with(base.toStdString(), model.toStdString(), pre.toStdString());
    QCOMPARE(tokenizer->adds_bos(), adds_bos);
    const std::vector<TokenId> ids = tokenizer->encode("Hello", false, true);
    QCOMPARE(ids.front() == *tokenizer->special_ids().bos, adds_bos);
  }

  void unknownGgufPreTokenizerIsRefused() {
    QTemporaryDir dir;
    const QString path = dir.filePath("vocab.gguf");
    write_file(path, gguf_with("byte-level", "gpt2", "no-such-pre"));
    const QString error = load_error(path.toStdString());
    QVERIFY2(error.contains("vocab.gguf") && error.contains("\"no-such-pre\" is not supported") &&
                 error.contains("deepseek-llm") && error.contains("kimi-k2") &&
                 error.contains("seed-coder"),
             qPrintable(error));
  }

  void kimiFolderMatchesTiktoken_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<bool>("parse_special");
    QTest::addColumn<QList<int>>("expected");
    const json cases = json::parse(read_file(kKimiDir + "expected.json"))["cases"];
    QVERIFY(cases.size() >= 30);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const QByteArray text = bytes(cases[i]["text"].get<std::string>());
      QTest::addRow("special/%02zu", i) << text << true << id_list(cases[i]["ids"]);
      QTest::addRow("plain/%02zu", i) << text << false << id_list(cases[i]["ids_plain"]);
    }
  }

  void kimiFolderMatchesTiktoken() {
    QFETCH(QByteArray, text);
    QFETCH(bool, parse_special);
    QFETCH(QList<int>, expected);
    static const auto tokenizer = load_tokenizer(kKimiDir);
    compare_ids(tokenizer->encode(text.toStdString(), parse_special), expected, text);
    // Decoding gives the text back whenever the control tokens are rendered.
    QCOMPARE(bytes(tokenizer->decode(tokenizer->encode(text.toStdString(), parse_special), true)),
             text);
  }

  // Kimi's tokenizer cuts runs of more than 25,000 characters before splitting.
  void kimiLongRunsAreCut_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("expected");
    const json runs = json::parse(read_file(kKimiDir + "expected.json"))["long_runs"];
    for (std::size_t i = 0; i < runs.size(); ++i) {
      std::string text;
      for (const json& part : runs[i]["text_runs"]) {
        for (int n = 0; n < part[1].get<int>(); ++n) text += part[0].get<std::string>();
      }
      QList<int> ids;
      for (const json& run : runs[i]["ids_runs"]) {
        for (int n = 0; n < run[1].get<int>(); ++n) ids << run[0].get<int>();
      }
      QTest::addRow("run %zu", i) << bytes(text) << ids;
    }
  }

  void kimiLongRunsAreCut() {
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, expected);
    const auto tokenizer = load_tokenizer(kKimiDir + "tiktoken.model");
    const std::vector<TokenId> ids = tokenizer->encode(text.toStdString(), true);
    QCOMPARE(ids, std::vector<TokenId>(expected.begin(), expected.end()));
  }

  void kimiSpecialTokens() {
    const auto tokenizer = load_tokenizer(kKimiDir);
    const std::size_t ranks = 908;
    QCOMPARE(tokenizer->vocab_size(), ranks + 258);
    QCOMPARE(tokenizer->special_ids().bos, tokenizer->find_token("[BOS]"));
    QCOMPARE(tokenizer->special_ids().eos, tokenizer->find_token("[EOS]"));
    QCOMPARE(tokenizer->special_ids().pad, tokenizer->find_token("[PAD]"));
    QCOMPARE(*tokenizer->find_token("[BOS]"), TokenId(ranks));
    QCOMPARE(*tokenizer->find_token("[PAD]"), TokenId(ranks + 257));
    // Ids without a name in tokenizer_config.json are reserved, as in tokenization_kimi.py.
    QCOMPARE(tokenizer->token_text(TokenId(ranks + 5)),
             "<|reserved_token_" + std::to_string(ranks + 5) + "|>");
    QVERIFY(tokenizer->is_control(*tokenizer->find_token("<|im_end|>")));
    // TikTokenTokenizer adds no bos or eos.
    QVERIFY(!tokenizer->adds_bos() && !tokenizer->adds_eos());
    QCOMPARE(tokenizer->encode("Hi", false, true), tokenizer->encode("Hi", false, false));

    // The 258 ids exist whether or not the config names them.
    json config = json::parse(read_file(kKimiDir + "tokenizer_config.json"));
    config["added_tokens_decoder"].erase(std::to_string(ranks + 256));
    config["added_tokens_decoder"].erase(std::to_string(ranks + 257));
    config.erase("pad_token");
    config.erase("unk_token");
    QTemporaryDir dir;
    copy_kimi(dir, "", {{"tokenizer_config.json", config.dump()}});
    const auto unnamed = load_tokenizer(dir.path().toStdString());
    QCOMPARE(unnamed->vocab_size(), ranks + 258);
    QCOMPARE(unnamed->token_text(TokenId(ranks + 257)),
             "<|reserved_token_" + std::to_string(ranks + 257) + "|>");
    QVERIFY(!unnamed->special_ids().pad);
  }

  void kimiFolderProblemsAreExplained_data() {
    QTest::addColumn<QString>("left_out");
    QTest::addColumn<QString>("file");
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("no tokenizer_config.json")
        << "tokenizer_config.json"
        << "" << QByteArray()
        << "comes without the tokenizer_config.json of Kimi's TikTokenTokenizer";
    QTest::newRow("another tokenizer class")
        << ""
        << "tokenizer_config.json" << QByteArray(R"({"tokenizer_class": "TikTokenTokenizer",
                         "auto_map": {"AutoTokenizer": ["tokenization_other.Tok", null]}})")
        << "comes without the tokenizer_config.json of Kimi's TikTokenTokenizer";
    QTest::newRow("another pattern")
        << ""
        << "tokenization_kimi.py"
        << QByteArray("num_reserved_special_tokens = 256\npat_str = r\"\"\"\\s+\"\"\"\n")
        << "splits text with another pattern than Kimi-K2's";
    QTest::newRow("not base64") << ""
                                << "tiktoken.model" << QByteArray("IQ== 0\n!!!! 1\n")
                                << "line 2 does not start with base64 bytes";
    QTest::newRow("no rank") << ""
                             << "tiktoken.model" << QByteArray("IQ== 0\nIg== x\n")
                             << "line 2 has no valid rank";
    QTest::newRow("repeated rank")
        << ""
        << "tiktoken.model" << QByteArray("IQ== 0\nIg== 0\n") << "line 2 repeats the rank 0";
    QTest::newRow("missing rank") << ""
                                  << "tiktoken.model" << QByteArray("IQ== 0\nIg== 2\n")
                                  << "the rank 1 is missing";
  }

  void kimiFolderProblemsAreExplained() {
    QFETCH(QString, left_out);
    QFETCH(QString, file);
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    std::map<QString, std::string> replaced;
    if (!file.isEmpty()) replaced[file] = content.toStdString();
    copy_kimi(dir, left_out, replaced);
    const QString error = load_error(dir.path().toStdString());
    QVERIFY2(error.contains("tiktoken.model cannot be used") && error.contains(expected),
             qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestPreTokenizerConformance)
#include "tst_pre_tokenizer_conformance.moc"
