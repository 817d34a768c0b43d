// Perplexity and KL divergence against the independent oracle (Hugging Face transformers,
// see tests/tools/make_perplexity_reference.py), and the rules around them: windows, a model
// against itself, models that tokenize differently.
#include <QtTest>

#include <QTemporaryDir>
#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/measure/perplexity.h"

using namespace tandem;

namespace {

std::string data_path(const std::string& relative) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/" + relative;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Fixture {
  explicit Fixture(const std::string& name)
      : model(model::LoadedModel::load(data_path("models/" + name))),
        tokenizer(text::load_tokenizer(data_path("models/" + name))) {}
  measure::ScoredModel scored() const { return {*model, *tokenizer}; }
  std::unique_ptr<model::LoadedModel> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

}  // namespace

class TestPerplexity : public QObject {
  Q_OBJECT
  nlohmann::json expected_;
  std::string text_;

 private slots:
  void initTestCase() {
    std::ifstream in(data_path("perplexity/expected.json"));
    QVERIFY2(in.good(), "expected.json missing: run tests/tools/make_perplexity_reference.py");
    expected_ = nlohmann::json::parse(in);
    text_ = read_text(data_path("perplexity/fixture-text.txt"));
    QVERIFY(!text_.empty());
  }

  void matchesOracle_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<int>("threads");
    for (const auto& [name, _] : expected_["perplexity"].items()) {
      QTest::newRow(name.c_str()) << QString::fromStdString(name) << 1;
    }
    QTest::newRow("qwen3-moe, 3 threads") << QStringLiteral("qwen3-moe") << 3;
  }

  void matchesOracle() {
    QFETCH(QString, fixture);
    QFETCH(int, threads);
    const Fixture f(fixture.toStdString());
    // Both sides must read the same tokens, or the numbers are not comparable.
    QCOMPARE(f.tokenizer->encode(text_, false), expected_["ids"].get<std::vector<std::int32_t>>());
    const auto& want = expected_["perplexity"][fixture.toStdString()];
    backend::NumaPools pool(threads);
    measure::PerplexityOptions options;
    options.context_tokens = expected_["context_tokens"].get<std::int64_t>();
    options.batch_tokens = 20;  // windows span several forward passes
    const auto r = measure::measure_perplexity(f.scored(), text_, pool, options);
    QCOMPARE(r.evaluated_tokens, want["evaluated_tokens"].get<std::int64_t>());
    QCOMPARE(r.text_tokens, static_cast<std::int64_t>(expected_["ids"].size()));
    QCOMPARE(r.evaluated_tokens,
             r.text_tokens - r.windows);  // each window's first token is context only
    QVERIFY(!r.mean_kl);
    QVERIFY(!r.cancelled);
    // Logits agree to about 1e-4 of their range (tst_reference_engine); the mean NLL to 1e-4.
    const double nll = want["mean_nll"].get<double>();
    QVERIFY2(std::abs(r.mean_nll - nll) < 1e-4 * nll,
             qPrintable(QStringLiteral("mean NLL %1, oracle %2")
                            .arg(r.mean_nll, 0, 'g', 10)
                            .arg(nll, 0, 'g', 10)));
    QVERIFY(std::abs(r.perplexity() - want["perplexity"].get<double>()) <
            1e-3 * want["perplexity"].get<double>());
  }

  void klMatchesOracle() {
    for (const auto& pair : expected_["kl"]) {
      const Fixture model(pair["model"].get<std::string>());
      const Fixture base(pair["base"].get<std::string>());
      backend::NumaPools pool(2);
      measure::PerplexityOptions options;
      options.context_tokens = expected_["context_tokens"].get<std::int64_t>();
      const measure::ScoredModel reference = base.scored();
      const auto r = measure::measure_perplexity(model.scored(), text_, pool, options, &reference);
      QVERIFY(r.mean_kl);
      const double want = pair["mean_kl"].get<double>();
      QVERIFY(*r.mean_kl > 0.0);
      // A bf16 copy of the same weights drifts by ~1e-4 nats; the comparison is relative.
      QVERIFY2(std::abs(*r.mean_kl - want) < 0.02 * want,
               qPrintable(QStringLiteral("%1 vs %2: KL %3, oracle %4")
                              .arg(QString::fromStdString(pair["model"]),
                                   QString::fromStdString(pair["base"]))
                              .arg(*r.mean_kl, 0, 'g', 8)
                              .arg(want, 0, 'g', 8)));
    }
  }

  void klOfAModelAgainstItselfIsZero() {
    const Fixture f("qwen3-moe");
    backend::NumaPools pool(1);
    measure::PerplexityOptions options;
    options.context_tokens = 32;
    const measure::ScoredModel self = f.scored();
    const auto r = measure::measure_perplexity(self, text_, pool, options, &self);
    QVERIFY(r.mean_kl);
    QVERIFY2(std::abs(*r.mean_kl) < 1e-12, qPrintable(QString::number(*r.mean_kl)));
    // And the perplexity is the one measured without a base.
    const auto alone = measure::measure_perplexity(self, text_, pool, options);
    QCOMPARE(r.mean_nll, alone.mean_nll);
  }

  // A base model's distributions saved to a file give the KL divergence the base model gives
  // live, to FP16's rounding, at windows that leave a short last one (7) or none (32).
  void klFromSavedDistributionsIsTheLiveBases() {
    QTemporaryDir dir;
    for (const auto& pair : expected_["kl"]) {
      const Fixture model(pair["model"].get<std::string>());
      const Fixture base(pair["base"].get<std::string>());
      backend::NumaPools pool(2);
      for (std::int64_t context : {7, 32}) {
        const std::string file = dir.path().toStdString() + "/base.tdist";
        measure::PerplexityOptions save;
        save.context_tokens = context;
        save.save_distributions = file;
        const auto saved = measure::measure_perplexity(base.scored(), text_, pool, save);
        QVERIFY(QFileInfo::exists(QString::fromStdString(file)));
        QVERIFY(!QFileInfo::exists(QString::fromStdString(file + ".part")));

        measure::PerplexityOptions options;
        options.context_tokens = context;
        const measure::ScoredModel reference = base.scored();
        const auto live =
            measure::measure_perplexity(model.scored(), text_, pool, options, &reference);
        options.base_distributions = file;
        const auto from_file = measure::measure_perplexity(model.scored(), text_, pool, options);
        QVERIFY(live.mean_kl && from_file.mean_kl);
        QCOMPARE(from_file.mean_nll, live.mean_nll);
        QVERIFY2(std::abs(*from_file.mean_kl - *live.mean_kl) < 2e-3 * *live.mean_kl,
                 qPrintable(QStringLiteral("context %1: KL %2 from the file, %3 live")
                                .arg(context)
                                .arg(*from_file.mean_kl, 0, 'g', 8)
                                .arg(*live.mean_kl, 0, 'g', 8)));
        // The base against its own saved distributions: 0, to rounding.
        const auto self = measure::measure_perplexity(base.scored(), text_, pool, options);
        QVERIFY2(std::abs(*self.mean_kl) < 1e-6, qPrintable(QString::number(*self.mean_kl)));
        QCOMPARE(self.mean_nll, saved.mean_nll);
      }
    }
  }

  // Saved distributions another measurement cannot be compared with are refused with a
  // sentence; a measurement cancelled while saving leaves no file.
  void savedDistributionsThatDoNotMatchAreRefused() {
    QTemporaryDir dir;
    const std::string file = dir.path().toStdString() + "/base.tdist";
    const Fixture f("qwen3-moe");
    backend::NumaPools pool(1);
    measure::PerplexityOptions save;
    save.context_tokens = 32;
    save.save_distributions = file;
    measure::measure_perplexity(f.scored(), text_, pool, save);

    const auto refused = [&](const measure::ScoredModel& m, const std::string& text,
                             std::int64_t context, const std::string& from,
                             const measure::ScoredModel* base, const char* says) {
      measure::PerplexityOptions options;
      options.context_tokens = context;
      options.base_distributions = from;
      try {
        measure::measure_perplexity(m, text, pool, options, base);
        QFAIL(qPrintable(QStringLiteral("accepted; should say: %1").arg(says)));
      } catch (const measure::PerplexityError& e) {
        QVERIFY2(std::string(e.what()).find(says) != std::string::npos, e.what());
      }
    };
    refused(f.scored(), text_, 16, file, nullptr, "measure with --context 32 too");
    refused(f.scored(), text_.substr(0, text_.size() / 2), 32, file, nullptr, "another text");
    const std::string demo = std::string(TANDEM_SOURCE_DIR) + "/resources/demo-model";
    const auto other = model::LoadedModel::load(demo);
    const auto other_tokenizer = text::load_tokenizer(demo);
    refused({*other, *other_tokenizer}, text_, 32, file, nullptr, "same tokenizer");
    const measure::ScoredModel self = f.scored();
    refused(f.scored(), text_, 32, file, &self, "not both");
    refused(f.scored(), text_, 32, dir.path().toStdString() + "/none", nullptr, "check the path");
    {
      std::ifstream in(file, std::ios::binary);
      std::string head(20000, '\0');
      in.read(head.data(), static_cast<std::streamsize>(head.size()));
      std::ofstream(dir.path().toStdString() + "/cut.tdist", std::ios::binary) << head;
    }
    refused(f.scored(), text_, 32, dir.path().toStdString() + "/cut.tdist", nullptr,
            "save them again");
    std::ofstream(dir.path().toStdString() + "/other.tdist") << "{\"not\": \"ours\"}";
    refused(f.scored(), text_, 32, dir.path().toStdString() + "/other.tdist", nullptr,
            "is not distributions saved by tandem perplexity --save-logits");

    std::atomic<bool> cancel{false};
    measure::PerplexityOptions cut;
    cut.context_tokens = 16;
    cut.batch_tokens = 8;
    cut.cancel = &cancel;
    cut.progress = [&](std::int64_t, std::int64_t) { cancel.store(true); };
    cut.save_distributions = dir.path().toStdString() + "/cancelled.tdist";
    QVERIFY(measure::measure_perplexity(f.scored(), text_, pool, cut).cancelled);
    QVERIFY(QDir(dir.path()).entryList({QStringLiteral("cancelled*")}).isEmpty());
  }

  // Longer windows give each prediction more context, so fewer tokens are context-only.
  void windowsCoverTheWholeText() {
    const Fixture f("llama");
    backend::NumaPools pool(1);
    const auto total = static_cast<std::int64_t>(f.tokenizer->encode(text_, false).size());
    for (std::int64_t context : {2, 7, 64, 4096}) {
      measure::PerplexityOptions options;
      options.context_tokens = context;
      const auto r = measure::measure_perplexity(f.scored(), text_, pool, options);
      const std::int64_t full = total / context;
      const std::int64_t windows = full + (total % context >= 2 ? 1 : 0);
      QCOMPARE(r.windows, windows);
      QCOMPARE(r.evaluated_tokens,
               full * (context - 1) + (total % context >= 2 ? total % context - 1 : 0));
      QVERIFY(std::isfinite(r.perplexity()) && r.perplexity() > 1.0);
    }
  }

  void refusesWhatItCannotMeasure() {
    const Fixture f("qwen3-moe");
    backend::NumaPools pool(1);
    measure::PerplexityOptions options;
    try {
      measure::measure_perplexity(f.scored(), "a", pool, options);
      QFAIL("a text of one token was measured");
    } catch (const measure::PerplexityError& e) {
      QVERIFY2(std::string(e.what()).find("give a longer text") != std::string::npos, e.what());
    }
    // A long text whose characters a vocabulary has no tokens for (one without byte tokens,
    // which drops them) is not called short.
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string folder = dir.path().toStdString();
    {
      std::ofstream json(folder + "/tokenizer.json");
      json << R"({"version": "1.0", "added_tokens": [], "normalizer": null,
                  "pre_tokenizer": null, "post_processor": null, "decoder": null,
                  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
    }
    const auto letters = text::load_tokenizer(folder);
    QCOMPARE(letters->encode("ab", false).size(), std::size_t{2});
    const measure::ScoredModel unknown{*f.model, *letters};
    try {
      measure::measure_perplexity(unknown, "The quick fox jumps over the dog, then it sleeps.",
                                  pool, options);
      QFAIL("a text the vocabulary has no tokens for was measured");
    } catch (const measure::PerplexityError& e) {
      const std::string what = e.what();
      QVERIFY2(what.find("has 0 token(s)") != std::string::npos, e.what());
      QVERIFY2(what.find("49 bytes are characters the vocabulary has no tokens for") !=
                   std::string::npos,
               e.what());
      QVERIFY2(what.find("longer") == std::string::npos, e.what());
    }
    options.context_tokens = 1;
    QVERIFY_THROWS_EXCEPTION(measure::PerplexityError,
                             measure::measure_perplexity(f.scored(), text_, pool, options));

    // The demo model has another tokenizer: KL against it is refused with a sentence.
    const std::string demo = std::string(TANDEM_SOURCE_DIR) + "/resources/demo-model";
    const auto other = model::LoadedModel::load(demo);
    const auto other_tokenizer = text::load_tokenizer(demo);
    const measure::ScoredModel base{*other, *other_tokenizer};
    options.context_tokens = 32;
    try {
      measure::measure_perplexity(f.scored(), text_, pool, options, &base);
      QFAIL("a base model with another tokenizer was accepted");
    } catch (const measure::PerplexityError& e) {
      QVERIFY2(std::string(e.what()).find("same tokenizer") != std::string::npos, e.what());
    }
  }

  void cancelStopsEarly() {
    const Fixture f("qwen3-moe");
    backend::NumaPools pool(1);
    std::atomic<bool> cancel{false};
    measure::PerplexityOptions options;
    options.context_tokens = 16;
    options.batch_tokens = 8;
    options.cancel = &cancel;
    std::int64_t reports = 0;
    options.progress = [&](std::int64_t done, std::int64_t total) {
      QVERIFY(done <= total);
      if (++reports == 3) cancel.store(true);
    };
    const auto r = measure::measure_perplexity(f.scored(), text_, pool, options);
    QVERIFY(r.cancelled);
    QCOMPARE(reports, std::int64_t{3});
    QCOMPARE(r.evaluated_tokens,
             std::int64_t{8 + 7 + 8});  // two batches of the first window, one of the second
  }
};

QTEST_MAIN(TestPerplexity)
#include "tst_perplexity.moc"
