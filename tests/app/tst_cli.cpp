// The tandem executable as a user runs it: detect, the screenshot, the no-display answer,
// logging to the application data folder, and argument errors.
#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>
#include <nlohmann/json.hpp>

#include "kernels/cpu/compute_peak.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"
#include "tests/support/tandem_process.h"

using tandem::test::Run;
namespace kernels = tandem::kernels;

namespace {

Run runTandem(const QStringList& args, const QProcessEnvironment& env) {
  return tandem::test::run_tandem(args, env);
}

}  // namespace

class TestCli : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  QProcessEnvironment env() const {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    // Keep the user's real settings and logs out of it.
    e.insert(QStringLiteral("HOME"), home_.path());
    e.insert(QStringLiteral("XDG_DATA_HOME"), home_.path() + "/data");
    e.insert(QStringLiteral("XDG_CONFIG_HOME"), home_.path() + "/config");
    e.insert(QStringLiteral("XDG_CACHE_HOME"), home_.path() + "/.cache");
    e.remove(QStringLiteral("TANDEM_LOG_TO_FILE"));
    return e;
  }

 private slots:
  void detectJson() {
    const Run r = runTandem({"detect", "--json"}, env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    QCOMPARE(doc["schema"].get<std::string>(), std::string("tandem.detect"));
    QCOMPARE(doc["schema_version"].get<int>(), 1);
    QVERIFY(doc["topology"]["physical_cores"].get<int>() >= 1);
    // Without --path the disk is measured where models will be stored.
    QVERIFY(QString::fromStdString(doc["disk"]["measured_path"].get<std::string>())
                .startsWith(home_.path()));
  }

  void detectTableAndLogFile() {
    const Run r = runTandem({"detect"}, env());
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QLatin1String("What this means")));
    QVERIFY(!r.err.contains(QLatin1String("hardware probe")));  // info stays out of the console
    QFile log(home_.path() + "/data/Tandem/Tandem/logs/tandem.log");
    QVERIFY2(log.open(QIODevice::ReadOnly), qPrintable(log.fileName()));
    QVERIFY(QString::fromUtf8(log.readAll()).contains(QLatin1String("hardware probe")));
  }

  void verboseLogsToConsole() {
    const Run r = runTandem({"--verbose", "detect"}, env());
    QCOMPARE(r.code, 0);
    QVERIFY2(r.err.contains(QLatin1String("hardware probe")), qPrintable(r.err));
  }

  void screenshotIsAPngOfTheRequestedSize() {
    const QString file = home_.path() + "/shot.png";
    const Run r =
        runTandem({"--screenshot", file, "--size", "1024x700", "--page", "system"}, env());
    QCOMPARE(r.code, 0);
    QFile f(file);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.read(8), QByteArray("\x89PNG\r\n\x1a\n", 8));
    f.close();
    QImage image(file);
    QVERIFY(!image.isNull());
    QCOMPARE(image.size(), QSize(1024, 700));
    // Not a blank canvas: a real window has many distinct colours.
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 7) {
      for (int x = 0; x < image.width(); x += 7) colours.insert(image.pixel(x, y));
    }
    QVERIFY2(colours.size() > 20, qPrintable(QString::number(colours.size())));
  }

  void screenshotToUnwritablePathFails() {
    const Run r = runTandem({"--screenshot", "/proc/nowhere/shot.png"}, env());
    QCOMPARE(r.code, 1);
    QVERIFY(r.err.contains(QLatin1String("could not write the screenshot")));
  }

  void noDisplayExplainsHeadlessUse() {
    QProcessEnvironment e = env();
    for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"})
      e.remove(QString::fromLatin1(v));
    const Run r = runTandem({}, e);
    QCOMPARE(r.code, 0);
    QVERIFY(r.out.contains(QLatin1String("found no display")));
    QVERIFY(r.out.contains(QLatin1String("tandem detect")));
  }

  // tandem run on a fixture: the prompt is tokenized as Hugging Face does, the dumped
  // logits are the oracle's, and greedy decoding prints the oracle's tokens. A model folder,
  // and a GGUF file run as it is stored (its block kernels quantise activations to 8 bits,
  // so within 2% of the logits' range, as tst_gguf_model holds them).
  void runMatchesTheOracle_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("oracle");
    QTest::addColumn<double>("tolerance");  // of the logits' range
    QTest::newRow("folder") << QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe")
                            << QStringLiteral(TANDEM_TEST_DATA_DIR
                                              "/models/qwen3-moe/expected.json")
                            << 2e-4;
    QTest::newRow("gguf") << QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/qwen3moe-mixed.gguf")
                          << QStringLiteral(TANDEM_TEST_DATA_DIR "/models-gguf/qwen3moe-mixed.json")
                          << 2e-2;
  }

  void runMatchesTheOracle() {
    QFETCH(QString, fixture);
    QFETCH(QString, oracle);
    QFETCH(double, tolerance);
    QFile f(oracle);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto expected = nlohmann::json::parse(f.readAll().toStdString())["prompts"][0];
    const QString dump = home_.path() + "/logits.json";
    // The oracle computes in fp32: so does the KV cache here (the BF16 one has its own tests).
    const Run r = runTandem(
        {"run", "-m", fixture, "-p", QString::fromStdString(expected["text"].get<std::string>()),
         "-n", "16", "--greedy", "--dump-logits", dump, "-t", "2", "--kv-cache", "f32"},
        env());
    QCOMPARE(r.code, 0);
    QVERIFY2(r.err.contains(QLatin1String("prompt: ")) && r.err.contains(QLatin1String("tokens/s")),
             qPrintable(r.err));
    // The load's stages, as plain lines in a pipe, each ended.
    QVERIFY2(
        r.err.contains(QRegularExpression(QStringLiteral("^loading: [a-z ]+ 100% \\(\\d+s\\)$"),
                                          QRegularExpression::MultilineOption)),
        qPrintable(r.err));
    QFile d(dump);
    QVERIFY(d.open(QIODevice::ReadOnly));
    const auto got = nlohmann::json::parse(d.readAll().toStdString());
    QCOMPARE(got["token_ids"], expected["ids"]);
    const auto want = expected["logits"].get<std::vector<float>>();
    const auto have = got["logits"].get<std::vector<float>>();
    QCOMPARE(have.size(), want.size());
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    for (std::size_t i = 0; i < want.size(); ++i)
      QVERIFY(std::abs(have[i] - want[i]) <= tolerance * (*hi - *lo));
    QVERIFY(!r.out.isEmpty());
  }

  void runExplainsABadModelFolder() {
    QTemporaryDir empty;
    const Run r = runTandem({"run", "-m", empty.path(), "-p", "hi"}, env());
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains(QLatin1String("config.json: missing")), qPrintable(r.err));
    // A damaged GGUF file is told as such; another file is told what to give instead.
    QFile gguf(empty.filePath(QStringLiteral("model-Q4_K_M.gguf")));
    QVERIFY(gguf.open(QIODevice::WriteOnly));
    gguf.write("GGUF");
    gguf.close();
    for (const QStringList& args : {QStringList{"run", "-p", "hi"}, QStringList{"bench"},
                                    QStringList{"chat"}, QStringList{"serve"}}) {
      const Run file = runTandem(args + QStringList{"-m", gguf.fileName()}, env());
      QVERIFY(file.code != 0);
      QVERIFY2(file.err.contains(QLatin1String("is not a usable GGUF file")) &&
                   file.err.contains(QLatin1String("damaged or incomplete")),
               qPrintable(args.join(' ') + ": " + file.err));
    }
    QFile other(empty.filePath(QStringLiteral("model.bin")));
    QVERIFY(other.open(QIODevice::WriteOnly));
    other.close();
    const Run file = runTandem({"run", "-m", other.fileName(), "-p", "hi"}, env());
    QVERIFY(file.code != 0);
    QVERIFY2(file.err.contains(QLatin1String("is a file; give the model's folder")) &&
                 file.err.contains(QLatin1String(".gguf file")),
             qPrintable(file.err));
    const Run noPrompt = runTandem({"run", "-m", empty.path()}, env());
    QVERIFY(noPrompt.code != 0);
    QVERIFY(noPrompt.err.contains(QLatin1String("--prompt")));
  }

  // Convert, then run and bench the converted folder like any model; the same greedy text
  // as INT8 packing at load time.
  void convertThenRunAndBench() {
    const QString fixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const QString out = home_.path() + "/converted-int8";
    const Run c = runTandem(
        {"convert", "--in", fixture, "--out", out, "--method", "int8", "--verify"}, env());
    QCOMPARE(c.code, 0);
    QVERIFY2(c.out.contains(QLatin1String("verified 52 tensors")), qPrintable(c.out));
    QVERIFY2(c.err.contains(QLatin1String("peak memory")), qPrintable(c.err));
    const QStringList prompt = {"-p", "The quick brown fox", "-n", "12", "--greedy", "-t", "2"};
    const Run converted = runTandem(QStringList{"run", "-m", out} + prompt, env());
    const Run packed =
        runTandem(QStringList{"run", "-m", fixture, "--cpu-format", "int8"} + prompt, env());
    QCOMPARE(converted.code, 0);
    QCOMPARE(packed.code, 0);
    QCOMPARE(converted.out, packed.out);
    const Run bench = runTandem(
        {"bench", "-m", out, "-p", "8", "-n", "4", "-r", "1", "-t", "2", "--json"}, env());
    QCOMPARE(bench.code, 0);
    QCOMPARE(nlohmann::json::parse(bench.out.toStdString())["cpu_format"].get<std::string>(),
             std::string("int8"));
    // Where AMX widens the products: given here; measured by default. Without AMX, nothing.
    const Run widen = runTandem({"bench", "-m", out, "-p", "8", "-n", "0", "-r", "1", "-t", "2",
                                 "--amx-widen-from", "40", "--json"},
                                env());
    QCOMPARE(widen.code, 0);
    const auto widen_doc = nlohmann::json::parse(widen.out.toStdString());
    if (widen_doc["cpu_variant"].get<std::string>() == "amx") {
      QCOMPARE(widen_doc["amx_widening"]["from_tokens"].get<int>(), 40);
      QVERIFY(!widen_doc["amx_widening"]["measured"].get<bool>());
      const auto measured = nlohmann::json::parse(bench.out.toStdString())["amx_widening"];
      QVERIFY(measured["measured"].get<bool>());
      QCOMPARE(measured["samples"].size(), std::size_t{9});
      // Kept in the user's cache folder, and taken from there at the next start.
      QVERIFY(QFile::exists(home_.path() + "/.cache/tandem/amx-widening.json"));
      const Run again = runTandem(
          {"bench", "-m", out, "-p", "8", "-n", "0", "-r", "1", "-t", "2", "--json"}, env());
      const auto kept = nlohmann::json::parse(again.out.toStdString())["amx_widening"];
      QVERIFY(kept["cached"].get<bool>());
      QCOMPARE(kept["from_tokens"], measured["from_tokens"]);
    } else {
      QVERIFY(widen_doc["amx_widening"].is_null());
    }
    const Run no_widen = runTandem(
        {"bench", "-m", out, "-p", "8", "-n", "0", "-r", "1", "--amx-widen-from", "0"}, env());
    QVERIFY(no_widen.code != 0);
    QVERIFY2(no_widen.err.contains(
                 QLatin1String("give auto, never or a number of tokens from 1 to 1048576")),
             qPrintable(no_widen.err));
    // The converted folder's dense INT8 matrices can go through oneDNN too, where oneDNN
    // multiplies INT8 exactly; elsewhere (no VNNI) --dense onednn is refused with its reason.
    const Run onednn = runTandem({"bench", "-m", out, "-p", "8", "-n", "4", "-r", "1", "-t", "2",
                                  "--dense", "onednn", "--json"},
                                 env());
    const std::string onednn_refusal = kernels::onednn_refusal(kernels::PackedFormat::Int8);
    if (onednn_refusal.empty()) {
      QCOMPARE(onednn.code, 0);
      QVERIFY(nlohmann::json::parse(onednn.out.toStdString())["onednn_matrices"].get<int>() > 0);
    } else {
      QVERIFY(onednn.code != 0);
      QVERIFY2(onednn.err.contains(QString::fromStdString(
                   "--dense onednn cannot be used on this computer: " + onednn_refusal)),
               qPrintable(onednn.err));
    }
    // It runs in its own format: its own named, or native, is taken; another is refused with
    // a sentence before anything runs (it was ignored without a word, so a perplexity "of
    // INT4" measured INT8).
    QCOMPARE(runTandem(QStringList{"run", "-m", out, "--cpu-format", "int8"} + prompt, env()).out,
             converted.out);
    QCOMPARE(runTandem(QStringList{"run", "-m", out, "--cpu-format", "native"} + prompt, env()).out,
             converted.out);
    const QString wrong_format = QStringLiteral(
        "was converted to int8, the format it runs in; --cpu-format %1 would not be used. "
        "Leave --cpu-format out");
    const QString readme = QStringLiteral(TANDEM_SOURCE_DIR "/README.md");
    // So are --dense-bf16 where it would do nothing, and --dense onednn where no matrix is
    // oneDNN's to take.
    const QList<QPair<QStringList, QString>> refused = {
        {QStringList{"run", "-m", out, "--cpu-format", "int4"} + prompt, wrong_format.arg("int4")},
        {{"bench", "-m", out, "-p", "8", "-n", "1", "-r", "1", "--cpu-format", "bf16"},
         wrong_format.arg("bf16")},
        {{"perplexity", "-m", out, "-f", readme, "-c", "64", "--cpu-format", "int4"},
         wrong_format.arg("int4")},
        {QStringList{"run", "-m", out, "--dense-bf16"} + prompt,
         "output head in int8, the format they run in; --dense-bf16 would not be used"},
        {QStringList{"run", "-m", fixture, "--dense-bf16"} + prompt,
         "the weights run as stored here (native); give --cpu-format int8 or int4 with it"},
        {{"bench", "-m", fixture, "-p", "8", "-n", "1", "-r", "1", "--cpu-format", "native",
          "--dense", "onednn"},
         "this model has none in the native format; give --cpu-format int8 or int4 with it"},
    };
    for (const auto& [args, said] : refused) {
      const Run r = runTandem(args, env());
      QVERIFY2(r.code != 0, qPrintable(args.join(' ')));
      QVERIFY2(r.err.contains(said), qPrintable(args.join(' ') + ": " + r.err));
    }
    // Again into the finished folder: everything is kept.
    const Run again =
        runTandem({"convert", "--in", fixture, "--out", out, "--method", "int8"}, env());
    QCOMPARE(again.code, 0);
    QVERIFY2(again.err.contains(QLatin1String("resumed")), qPrintable(again.err));
  }

  // Under a file-size limit (ulimit -f, as a full disk would) a write fails: the command
  // says so in a sentence and exits, instead of dying of SIGXFSZ.
  void convertUnderAFileSizeLimitSaysSo() {
    const QString fixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const QString out = home_.path() + "/converted-limited";
    QProcess p;
    p.setProcessEnvironment(env());
    p.start(QStringLiteral("/bin/sh"),
            {"-c",
             QStringLiteral("ulimit -f 100 && exec \"$0\" convert --in \"$1\" --out "
                            "\"$2\" --method int8"),
             QStringLiteral(TANDEM_EXECUTABLE), fixture, out});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QVERIFY(p.exitCode() != 0);
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains(QLatin1String("the limit on file size (ulimit -f)")), qPrintable(err));
    const Run again =
        runTandem({"convert", "--in", fixture, "--out", out, "--method", "int8"}, env());
    QCOMPARE(again.code, 0);
    QVERIFY2(again.err.contains(QLatin1String("resumed")), qPrintable(again.err));
  }

  // --pools from the command line: a folder converted for 2 pools runs with 2 by default,
  // like the same split made at load time, and names the way out when asked for another
  // count; bench reports its threads and pools.
  void poolsFromTheCommandLine() {
    const QString fixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/deepseek-v3");
    const QString out = home_.path() + "/converted-2-pools";
    const Run c = runTandem(
        {"convert", "--in", fixture, "--out", out, "--method", "int8", "--pools", "2"}, env());
    QCOMPARE(c.code, 0);
    const QStringList prompt = {"-p", "The quick brown fox", "-n", "8", "--greedy", "-t", "2"};
    const Run converted = runTandem(QStringList{"run", "-m", out} + prompt, env());
    const Run packed = runTandem(
        QStringList{"run", "-m", fixture, "--cpu-format", "int8", "--pools", "2"} + prompt, env());
    QCOMPARE(converted.code, 0);
    QCOMPARE(packed.code, 0);
    QCOMPARE(converted.out, packed.out);
    const Run other = runTandem(QStringList{"run", "-m", out, "--pools", "1"} + prompt, env());
    QCOMPARE(other.code, 1);
    QVERIFY2(other.err.contains(QLatin1String(
                 "was converted for 2 pools, but 1 pool was asked for; run it with --pools 2")),
             qPrintable(other.err));
    const Run impossible =
        runTandem(QStringList{"run", "-m", TANDEM_TEST_DATA_DIR "/models/qwen3-moe", "--cpu-format",
                              "int8", "--pools", "2"} +
                      prompt,
                  env());
    QCOMPARE(impossible.code, 1);
    QVERIFY2(impossible.err.contains(QLatin1String(
                 "the expert width 40 cannot be split into 2 pools of whole 16-row blocks")),
             qPrintable(impossible.err));
    const Run json = runTandem(
        {"bench", "-m", out, "-p", "8", "-n", "2", "-r", "1", "-t", "2", "--json"}, env());
    QCOMPARE(json.code, 0);
    const auto j = nlohmann::json::parse(json.out.toStdString());
    QCOMPARE(j["threads"].get<int>(), 2);
    QCOMPARE(j["pools"].get<int>(), 2);
    const Run table =
        runTandem({"bench", "-m", out, "-p", "8", "-n", "2", "-r", "1", "-t", "2"}, env());
    QCOMPARE(table.code, 0);
    QVERIFY2(table.out.contains(QLatin1String("| threads | pools | kv cache |")),
             qPrintable(table.out));
    // Each row names the CPU's KV cache (BF16 unless told otherwise).
    QVERIFY2(table.out.contains(QLatin1String("|       2 |     2 |     bf16 |")),
             qPrintable(table.out));
    QVERIFY2(table.out.contains(QLatin1String("achieved ")), qPrintable(table.out));
    // One decode run: held against the read rate measured right after it.
    QVERIFY2(table.out.contains(QLatin1String(" GB/s after its run); achieved ")),
             qPrintable(table.out));
    QCOMPARE(j["decode_read_bandwidth_bytes_per_s"].size(), std::size_t(1));
    // A prompt alone claims no share of the decode roofline.
    const Run prompt_only =
        runTandem({"bench", "-m", out, "-p", "8", "-n", "0", "-r", "1", "-t", "2"}, env());
    QCOMPARE(prompt_only.code, 0);
    QVERIFY2(prompt_only.out.contains(QLatin1String("(no decode measured)")) &&
                 !prompt_only.out.contains(QLatin1String("achieved")),
             qPrintable(prompt_only.out));
  }

  // The kernel benchmark's report: a row per matrix, format, thread count and token count,
  // each with both paths measured and a verdict; and bench without a model or --kernels is
  // an error that says what is missing.
  // -d and --trace from the command line: the tests named at their depth, a trace that
  // parses and the worker's busy share; a trace that cannot be written is refused before anything
  // runs.
  void benchAtDepthWithATrace() {
    const QString demo = QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model");
    const QString trace = home_.path() + "/bench-trace.json";
    const Run r = runTandem({"bench", "-m", demo, "-p", "8", "-n", "3", "-d", "20", "-r", "1", "-t",
                             "2", "--trace", trace},
                            env());
    QCOMPARE(r.code, 0);
    QVERIFY2(
        r.out.contains(QLatin1String("pp8 @ d20")) && r.out.contains(QLatin1String("tg3 @ d20")),
        qPrintable(r.out));
    QVERIFY2(r.err.contains(QLatin1String("spans of the counted runs written to")),
             qPrintable(r.err));
    QVERIFY2(r.err.contains(QRegularExpression(
                 QStringLiteral("busy over the counted runs: worker 1 [0-9.]+%"))),
             qPrintable(r.err));
    // Where the idle time lies: each operation's share and the workers' busy share in it (a
    // name such as "cpu_experts" or "matmul: output head").
    QVERIFY2(r.err.contains(QRegularExpression(QStringLiteral(
                 "each operation's share of the counted runs \\(the workers' busy share inside "
                 "it\\): [a-z_][a-z_:' ]* [0-9.]+% \\([0-9.]+%\\)"))),
             qPrintable(r.err));
    QFile f(trace);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto json = nlohmann::json::parse(f.readAll().toStdString());
    QVERIFY(json["traceEvents"].size() > 10);
    // The same in the JSON: the file, the workers' busy shares and the operations' split.
    const Run j = runTandem({"bench", "-m", demo, "-p", "8", "-n", "3", "-r", "1", "-t", "2",
                             "--trace", trace, "--json"},
                            env());
    QCOMPARE(j.code, 0);
    const auto out = nlohmann::json::parse(j.out.toStdString())["trace"];
    QCOMPARE(out["path"].get<std::string>(), trace.toStdString());
    QVERIFY(out["spans"].get<int>() > 10);
    QCOMPARE(out["workers_busy"].size(), std::size_t{1});
    QCOMPARE(out["workers_busy"][0]["thread"].get<std::string>(), std::string("worker 1"));
    double shares = 0;
    bool experts = false;
    for (const auto& op : out["operations"]) {
      QVERIFY(op["seconds"].get<double>() > 0);
      QVERIFY(op["workers_busy"].get<double>() >= 0 && op["workers_busy"].get<double>() <= 1);
      shares += op["share"].get<double>();
      experts = experts || op["name"] == "cpu_experts";
    }
    QVERIFY(experts);
    QVERIFY2(shares > 0.5, qPrintable(QString::number(shares)));  // nested ones count twice
    const Run refused = runTandem({"bench", "-m", demo, "-p", "8", "-n", "3", "-r", "1", "--trace",
                                   home_.path() + "/no/such/folder/t.json"},
                                  env());
    QCOMPARE(refused.code, 2);
    QVERIFY2(refused.err.contains(QLatin1String("cannot be written")), qPrintable(refused.err));
    QVERIFY(!refused.err.contains(QLatin1String("pp8")));  // refused before running

    // Past the positions the model takes (the demo's 2048), speed is still measured, and
    // the run says that answers would not hold there.
    const Run deep = runTandem(
        {"bench", "-m", demo, "-p", "8", "-n", "2", "-d", "2048", "-r", "1", "-t", "2"}, env());
    QCOMPARE(deep.code, 0);
    QVERIFY2(deep.out.contains(QLatin1String("pp8 @ d2048")), qPrintable(deep.out));
    QVERIFY2(deep.err.contains(QLatin1String("measured all the same (speed only): A context of "
                                             "2059 tokens is longer than the 2048 positions")),
             qPrintable(deep.err));
  }

  // What answers refuses a context past the positions the model takes, with a sentence that
  // says how far it goes; within them it runs.
  void contextPastTheModelsPositionsIsRefused() {
    for (const QStringList& args : {QStringList{"run", "-p", "Hi", "-n", "1", "-c", "4096"},
                                    QStringList{"chat", "-c", "100000"}}) {
      const Run r = runTandem(args, env());
      QCOMPARE(r.code, 2);
      QVERIFY2(r.err.contains(QLatin1String("is longer than the 2048 positions this Qwen3-MoE "
                                            "model takes")) &&
                   r.err.contains(QLatin1String("Use a context of at most 2048")),
               qPrintable(r.err));
    }
    QCOMPARE(runTandem({"run", "-p", "Hi", "-n", "1", "-c", "2048"}, env()).code, 0);
    // bench measures past it all the same, and says so in its own flags (it has no -c).
    const Run bench =
        runTandem({"bench", "-m", QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model"), "-p",
                   "16", "-n", "1", "-d", "2040", "-r", "1"},
                  env());
    QCOMPARE(bench.code, 0);
    QVERIFY2(bench.err.contains(
                 QLatin1String("measured all the same (speed only): A context of 2058 tokens")) &&
                 bench.err.contains(QLatin1String(
                     "at most 2048 (the longest test's -d, -p and -n add up to the context)")),
             qPrintable(bench.err));
  }

  // run's lengths and outputs that cannot be are refused with a sentence, before the model
  // loads where the flags alone say so: a negative -n or -c, an empty stop text, logits to
  // a folder that is not there (they were lost after the run), and a -c the prompt does not
  // fit in (it was raised without a word).
  void runRefusesWhatCannotBe() {
    const QString model = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const QStringList base{"run", "-m", model, "-p", "hello there how are you today"};
    const QList<QPair<QStringList, QString>> refused = {
        {{"-n", "-1"}, "not in range 0 to"},
        {{"-c", "0"}, "not in range 1 to"},
        {{"-c", "-5"}, "not in range 1 to"},
        {{"--stop", ""}, "give the text to stop at"},
        {{"--dump-logits", home_.path() + "/no-such-folder/x.json"}, "cannot be written"},
        {{"-c", "3"}, "more than a context of 3 (-c) holds; give at least"},
    };
    for (const auto& [flags, said] : refused) {
      const Run r = runTandem(base + flags, env());
      QVERIFY2(r.code != 0, qPrintable(flags.join(' ')));
      QVERIFY2(r.err.contains(said), qPrintable(flags.join(' ') + ": " + r.err));
    }
    QVERIFY(!QFileInfo::exists(home_.path() + "/no-such-folder"));
    // A context the prompt fills with -n 0 (reading it only) runs, and its logits arrive
    // whole, with nothing left beside them.
    const Run small = runTandem(base + QStringList{"-c", "3"}, env());
    const QRegularExpressionMatch takes =
        QRegularExpression(QStringLiteral("the prompt takes (\\d+) tokens")).match(small.err);
    QVERIFY2(takes.hasMatch(), qPrintable(small.err));
    const int n = takes.captured(1).toInt();
    QVERIFY(n > 3);
    const QString dump = home_.path() + "/read-only-the-prompt.json";
    const Run fits = runTandem(
        base + QStringList{"-c", QString::number(n), "-n", "0", "--dump-logits", dump}, env());
    QVERIFY2(fits.code == 0, qPrintable(fits.err));
    QVERIFY(QFileInfo::exists(dump));
    QVERIFY(!QFileInfo::exists(dump + ".part"));
    const Run no_room = runTandem(base + QStringList{"-c", QString::number(n)}, env());
    QCOMPARE(no_room.code, 2);
    QVERIFY2(no_room.err.contains(QLatin1String("with no room to write")), qPrintable(no_room.err));
  }

  // More threads than the CPU has hardware threads run, and the command says they take turns
  // and what Tandem recommends; as many as it has, it says nothing.
  void threadsPastTheHardwareAreSaid() {
    // Twice the logical CPUs Qt sees and one more: past what hwloc counts too.
    const int asked = 2 * QThread::idealThreadCount() + 1;
    const Run many = runTandem({"run", "-p", "Hi", "-n", "1", "-t", QString::number(asked)}, env());
    QCOMPARE(many.code, 0);
    QVERIFY2(many.err.contains(QStringLiteral("%1 threads on a CPU with ").arg(asked)) &&
                 many.err.contains(QLatin1String("hardware threads take turns, which runs slower")),
             qPrintable(many.err));
    const Run fits = runTandem({"run", "-p", "Hi", "-n", "1", "-t", "1"}, env());
    QCOMPARE(fits.code, 0);
    QVERIFY2(!fits.err.contains(QLatin1String("take turns")), qPrintable(fits.err));
  }

  // -p, -n and -d as lists, as llama-bench takes them: each prompt length and each decode
  // length a test of its own at each depth, in that order, in the table and in the JSON; a
  // trace records one test, so lists with --trace are refused before anything runs.
  void benchTakesLists() {
    const QString demo = QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model");
    const Run r = runTandem(
        {"bench", "-m", demo, "-p", "8,16", "-n", "3", "-d", "0,20", "-r", "1", "-t", "2"}, env());
    QCOMPARE(r.code, 0);
    const QStringList names = {"pp8 ", "pp16 ", "tg3 ", "pp8 @ d20", "pp16 @ d20", "tg3 @ d20"};
    qsizetype at = 0;
    for (const QString& name : names) {
      const qsizetype found =
          r.out.indexOf(QRegularExpression("\\| +" + QRegularExpression::escape(name)), at);
      QVERIFY2(found >= at, qPrintable(name + "\n" + r.out));
      at = found + 1;
    }
    QVERIFY2(r.out.contains(QLatin1String("decode roofline, tg3 @ d20:")), qPrintable(r.out));
    const Run j = runTandem({"bench", "-m", demo, "-p", "8,16", "-n", "3", "-d", "0,20", "-r", "1",
                             "-t", "2", "--json"},
                            env());
    QCOMPARE(j.code, 0);
    const auto tests = nlohmann::json::parse(j.out.toStdString())["tests"];
    QCOMPARE(tests.size(), std::size_t{6});
    // Nothing to measure is refused before the model loads.
    const Run nothing = runTandem({"bench", "-m", demo, "-p", "0", "-n", "0,0", "-r", "1"}, env());
    QCOMPARE(nothing.code, 2);
    QVERIFY2(nothing.err.contains(QLatin1String("nothing to measure")) &&
                 !nothing.err.contains(QLatin1String("loading")),
             qPrintable(nothing.err));
    const int prompts[6] = {8, 16, 0, 8, 16, 0}, decodes[6] = {0, 0, 3, 0, 0, 3},
              depths[6] = {0, 0, 0, 20, 20, 20};
    for (std::size_t i = 0; i < 6; ++i) {
      QCOMPARE(tests[i]["prompt"]["tokens"].get<int>(), prompts[i]);
      QCOMPARE(tests[i]["decode"]["tokens"].get<int>(), decodes[i]);
      QCOMPARE(tests[i]["depth"].get<int>(), depths[i]);
      const auto& measured = tests[i][prompts[i] > 0 ? "prompt" : "decode"]["tokens_per_s"];
      QCOMPARE(measured.size(), std::size_t{1});
      QVERIFY(measured[0].get<double>() > 0);
    }
    const Run refused = runTandem({"bench", "-m", demo, "-p", "8,16", "-n", "3", "-r", "1",
                                   "--trace", home_.path() + "/t.json"},
                                  env());
    QCOMPARE(refused.code, 2);
    QVERIFY2(refused.err.contains(QLatin1String("--trace records one test")),
             qPrintable(refused.err));
    QVERIFY(!refused.err.contains(QLatin1String("pp8")));
  }

  // The prompt's compute ceiling: a token's multiply-adds as the demo model's shapes give
  // them (attention's projections and two of eight experts in each of 4 layers, the output
  // head's one row spread over the prompt, and q . k and the weighted values over the 20
  // cached positions and on average half the prompt), each instruction's peak measured.
  void benchPromptCeiling() {
    const QString demo = QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model");
    const Run r = runTandem(
        {"bench", "-m", demo, "-p", "8", "-n", "0", "-d", "20", "-r", "1", "-t", "2", "--json"},
        env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    const auto& ceiling = doc["prompt_ceiling"];
    QVERIFY2(ceiling.is_object(), qPrintable(r.out));
    // The scalar kernels (a CPU without AVX2) have no instruction to bound a prompt with:
    // the ceiling is said not to be given, not guessed.
    const kernels::IsaFeatures& usable = kernels::detect_isa().usable;
    if (!kernels::packed_product_instruction(kernels::PackedFormat::Int8,
                                             kernels::best_variant(usable), usable, 8)) {
      QCOMPARE(ceiling["uncounted"].get<std::string>(),
               std::string("the scalar kernels have no single product instruction to bound them"));
      QCOMPARE(ceiling["tokens_per_s"].get<double>(), 0.0);
      QSKIP(
          "this CPU lacks AVX2, so its INT8 products have no instruction to bound a prompt "
          "with; the ceiling's sums are checked on CPUs that have one");
    }
    QCOMPARE(ceiling["uncounted"].get<std::string>(), std::string());
    const double hidden = 256, heads = 4, kv_heads = 2, head_dim = 64, experts = 2, moe = 320;
    const double projections = 2 * heads * head_dim * hidden + 2 * kv_heads * head_dim * hidden;
    const double weights = 4 * (projections + experts * 3 * moe * hidden) + 4096 * hidden / 8;
    const double attention = 4 * heads * 2 * head_dim * (20 + 4.5);
    double total = 0, seconds = 0;  // a token's, every product at its instruction's peak
    for (const auto& p : ceiling["products"]) {
      total += p["multiply_adds_per_token"].get<double>();
      QVERIFY(p["peak_multiply_adds_per_s"].get<double>() > 0);
      seconds +=
          p["multiply_adds_per_token"].get<double>() / p["peak_multiply_adds_per_s"].get<double>();
    }
    QCOMPARE(total, weights + attention);
    QCOMPARE(ceiling["tokens_per_s"].get<double>(), 1 / seconds);
    QVERIFY(ceiling["fraction"].get<double>() > 0);

    // GGUF blocks and fp32 as stored have no single instruction: said, not guessed.
    const Run native = runTandem(
        {"bench", "-m", demo, "-p", "8", "-n", "0", "-r", "1", "-t", "2", "--cpu-format", "native"},
        env());
    QCOMPARE(native.code, 0);
    QVERIFY2(native.out.contains(QLatin1String("prompt ceiling: not given; matrices multiplied "
                                               "as stored")),
             qPrintable(native.out));
  }

  void benchKernels() {
    const Run r =
        runTandem({"bench", "--kernels", "--tokens", "1,3", "--head-rows", "256", "-r", "2", "-t",
                   "1", "--sample-time", "0.01", "--working-set", "16", "--json"},
                  env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    QVERIFY(doc["onednn"].get<std::string>().rfind("oneDNN ", 0) == 0);
    const auto& rows = doc["rows"];
    QCOMPARE(rows.size(), std::size_t{6 * 2 * 2});  // matrices x formats x token counts
    // A format oneDNN cannot take on this CPU (INT8 without VNNI, BF16 without AVX-512) has
    // no oneDNN column, and the report says why, once.
    const std::string refusals = doc["onednn_refusals"].dump();
    for (const char* format : {"int8", "bf16"}) {
      const bool refused =
          !kernels::onednn_refusal(format == std::string("int8") ? kernels::PackedFormat::Int8
                                                                 : kernels::PackedFormat::Bf16)
               .empty();
      QCOMPARE(refusals.find(format == std::string("int8") ? "INT8" : "BF16") != std::string::npos,
               refused);
    }
    for (const auto& row : rows) {
      QCOMPARE(row["threads"].get<int>(), 1);
      if (row["onednn"].is_null()) {
        QVERIFY2(refusals.find(row["format"] == "int8" ? "INT8" : "BF16") != std::string::npos,
                 qPrintable(QString::fromStdString(row.dump())));
        QCOMPARE(row["winner"].get<std::string>(), std::string());
        QVERIFY(row["packed"]["gflops_mean"].get<double>() > 0);
        continue;
      }
      for (const char* path : {"packed", "onednn"}) {
        QCOMPARE(row[path]["gflops"].size(), std::size_t{2});
        QVERIFY(row[path]["gflops_mean"].get<double>() > 0);
        QVERIFY(row[path]["weight_bytes"].get<std::uint64_t>() >=
                row["rows"].get<std::uint64_t>() * row["cols"].get<std::uint64_t>());
      }
      const std::string winner = row["winner"].get<std::string>();
      QVERIFY(winner == "packed" || winner == "onednn" || winner == "tie");
    }
    QCOMPARE(rows[12]["matrix"].get<std::string>(), std::string("head"));
    QCOMPARE(rows[12]["rows"].get<int>(), 256);
    // Each row's share of the peak of the instruction our kernel multiplies with, measured
    // once per instruction and thread count; BF16 has one on every CPU with AVX2 and FMA.
    const auto& peaks = doc["instruction_peaks"];
    for (const auto& row : rows) {
      const std::string instruction = row["packed_instruction"].get<std::string>();
      if (row["format"] == "bf16") QVERIFY(!instruction.empty());
      if (instruction.empty()) continue;
      QVERIFY(row["packed_peak_fraction"].get<double>() > 0);
      int found = 0;
      for (const auto& p : peaks) {
        if (p["instruction"] == instruction && p["threads"] == row["threads"]) {
          ++found;
          QVERIFY(p["gflops"].get<double>() > 0);
        }
      }
      QCOMPARE(found, 1);
    }

    // INT4 and MXFP4, which oneDNN has no product for: our kernel alone, no verdict; a format
    // named twice is measured once.
    const Run nibbles = runTandem(
        {"bench", "--kernels", "--formats", "int4,mxfp4,int4", "--tokens", "1,9", "--head-rows",
         "256", "-r", "1", "-t", "1", "--sample-time", "0.01", "--working-set", "16", "--json"},
        env());
    QCOMPARE(nibbles.code, 0);
    const auto nibble_rows = nlohmann::json::parse(nibbles.out.toStdString())["rows"];
    QCOMPARE(nibble_rows.size(), std::size_t{6 * 2 * 2});
    for (const auto& row : nibble_rows) {
      const std::string format = row["format"].get<std::string>();
      QVERIFY2(format == "int4" || format == "mxfp4", format.c_str());
      QVERIFY(row["onednn"].is_null());
      QCOMPARE(row["winner"].get<std::string>(), std::string());
      QVERIFY(row["packed"]["gflops_mean"].get<double>() > 0);
      // Half a byte a weight and its share of the scales (INT4 also an offset per 32).
      const double weights = row["rows"].get<double>() * row["cols"].get<double>();
      const double bytes = row["packed"]["weight_bytes"].get<double>();
      QVERIFY2(bytes >= weights / 2 && bytes <= weights * (format == "int4" ? 0.63 : 0.7),
               row.dump().c_str());
    }
    QCOMPARE(nibble_rows[0]["format"].get<std::string>(), std::string("int4"));
    QCOMPARE(nibble_rows[2]["format"].get<std::string>(), std::string("mxfp4"));
    const Run text_nibbles =
        runTandem({"bench", "--kernels", "--formats", "int4", "--tokens", "1", "--head-rows", "256",
                   "-r", "1", "-t", "1", "--sample-time", "0.01", "--working-set", "16"},
                  env());
    QCOMPARE(text_nibbles.code, 0);
    QVERIFY2(text_nibbles.out.contains(QLatin1String("| int4  |")) &&
                 text_nibbles.out.contains(QLatin1String("none")) &&
                 !text_nibbles.out.contains(QLatin1String("oneDNN implementations")),
             qPrintable(text_nibbles.out));
    const Run unknown = runTandem({"bench", "--kernels", "--formats", "q4_k"}, env());
    QCOMPARE(unknown.code, 105);  // CLI11's validation error
    QVERIFY2(unknown.err.contains(QLatin1String("q4_k")), qPrintable(unknown.err));

    // The text names each oneDNN implementation with the rows it ran.
    const Run text = runTandem({"bench", "--kernels", "--tokens", "1", "--head-rows", "256", "-r",
                                "1", "-t", "1", "--sample-time", "0.01", "--working-set", "16"},
                               env());
    QCOMPARE(text.code, 0);
    const std::string int8_refusal = kernels::onednn_refusal(kernels::PackedFormat::Int8);
    if (int8_refusal.empty()) {
      QVERIFY2(text.out.contains(QLatin1String("oneDNN implementations:\n")) &&
                   text.out.contains(QLatin1String("int8 1 tokens")),
               qPrintable(text.out));
    } else {
      QVERIFY2(text.out.contains(QString::fromStdString("oneDNN left out: " + int8_refusal)),
               qPrintable(text.out));
    }

    // tandem's own options are taken after a command too.
    const Run after = runTandem({"run", "-p", "Hi", "-n", "2", "--cpu-variant", "scalar"}, env());
    QCOMPARE(after.code, 0);

    // A variant the environment names that Tandem lacks, or one this CPU cannot run, is
    // refused with a sentence by every command, benchmarks without a model among them
    // (they once aborted).
    QProcessEnvironment unknown_variant = env();
    unknown_variant.insert(QStringLiteral("TANDEM_CPU_VARIANT"), QStringLiteral("avx1024"));
    for (const QStringList& args :
         {QStringList{"bench", "--kernels", "--tokens", "1", "-r", "1", "-t", "1"},
          QStringList{"bench", "--attention", "--tokens", "16", "-d", "0", "-r", "1", "-t", "1"},
          QStringList{"run", "-p", "Hi", "-n", "1"}}) {
      const Run refused = runTandem(args, unknown_variant);
      QCOMPARE(refused.code, 1);
      QVERIFY2(refused.err.contains(QLatin1String("\"avx1024\" (from --cpu-variant or "
                                                  "TANDEM_CPU_VARIANT) is not one Tandem has")),
               qPrintable(refused.err));
    }
    namespace kernels = tandem::kernels;
    if (kernels::best_variant(kernels::detect_isa().usable) != kernels::CpuVariant::Amx) {
      const Run no_amx = runTandem(
          {"bench", "--kernels", "--cpu-variant", "amx", "--tokens", "1", "-r", "1", "-t", "1"},
          env());
      QCOMPARE(no_amx.code, 1);
      QVERIFY2(no_amx.err.contains(QLatin1String("needs instructions this CPU does not have")),
               qPrintable(no_amx.err));
    }

    const Run neither = runTandem({"bench"}, env());
    QCOMPARE(neither.code, 2);
    QVERIFY2(neither.err.contains(QLatin1String("--kernels")), qPrintable(neither.err));
  }

  // The delta-rule benchmark: token by token for every count, chunked where a prompt is long
  // enough to be split, each measured.
  void benchDeltaRule() {
    const Run r = runTandem({"bench", "--delta-rule", "--tokens", "1,40", "-r", "2", "-t", "1",
                             "--sample-time", "0.01", "--json"},
                            env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    const auto& rows = doc["rows"];
    QCOMPARE(rows.size(), std::size_t{3});  // 1 token by token; 40 both ways
    QCOMPARE(rows[0]["form"].get<std::string>(), std::string("token by token"));
    QCOMPARE(rows[2]["form"].get<std::string>(), std::string("chunks of 32"));
    QCOMPARE(rows[2]["tokens"].get<int>(), 40);
    for (const auto& row : rows) {
      QCOMPARE(row["us_per_token"].size(), std::size_t{2});
      QVERIFY(row["us_per_token_mean"].get<double>() > 0);
    }
    const Run both = runTandem({"bench", "--delta-rule", "--kernels"}, env());
    QVERIFY(both.code != 0);
  }

  // The attention benchmark: both forms at each length and depth, each measured; one depth
  // when -d gives it.
  void benchAttention() {
    const Run r = runTandem({"bench", "--attention", "--tokens", "3,40", "-d", "150", "-r", "2",
                             "-t", "1", "--sample-time", "0.01", "--json"},
                            env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    const auto& rows = doc["rows"];
    QCOMPARE(rows.size(), std::size_t{4});  // 3 and 40 tokens, both forms, after 150
    QCOMPARE(rows[0]["form"].get<std::string>(), std::string("flash-style"));
    QCOMPARE(rows[1]["form"].get<std::string>(), std::string("per token"));
    QCOMPARE(rows[3]["tokens"].get<int>(), 40);
    for (const auto& row : rows) {
      QCOMPARE(row["depth"].get<int>(), 150);
      QCOMPARE(row["gflops"].size(), std::size_t{2});
      QVERIFY(row["gflops_mean"].get<double>() > 0);
      QVERIFY(row["peak_fraction"].get<double>() > 0);  // of VDPBF16PS's or the FMAs' peak
    }
    QCOMPARE(doc["instruction_peaks"].size(), std::size_t{1});  // one thread count
    QVERIFY2(doc["shape"].get<std::string>().find("32 query heads over 4 KV heads of 128") !=
                 std::string::npos,
             doc["shape"].get<std::string>().c_str());
    // Another model's shape, here SmolLM2-135M's, over the 8-bit cache.
    const Run small =
        runTandem({"bench", "--attention", "--shape", "9/3/64", "--kv-cache", "int8", "--tokens",
                   "40", "-d", "150", "-r", "1", "-t", "1", "--sample-time", "0.01", "--json"},
                  env());
    QCOMPARE(small.code, 0);
    const auto smol = nlohmann::json::parse(small.out.toStdString());
    QVERIFY2(smol["shape"].get<std::string>() ==
                 "attention (9 query heads over 3 KV heads of 64), 8-bit cache",
             smol["shape"].get<std::string>().c_str());
    QVERIFY(smol["rows"][0]["gflops_mean"].get<double>() > 0);
    for (const char* bad : {"9/4/64", "9/3", "nine", "9/3/64x"}) {
      const Run r = runTandem({"bench", "--attention", "--shape", bad}, env());
      QCOMPARE(r.code, 2);
      QVERIFY2(r.err.contains(QLatin1String("Q/KV/D")), qPrintable(r.err));
    }
    // Heads the cache cannot keep are refused with what it takes (they ended the process).
    const Run odd = runTandem({"bench", "--attention", "--shape", "8/2/7"}, env());
    QCOMPARE(odd.code, 2);
    QVERIFY2(odd.err.contains(QLatin1String("even width")), qPrintable(odd.err));
    const Run narrow =
        runTandem({"bench", "--attention", "--shape", "8/2/24", "--kv-cache", "int8"}, env());
    QCOMPARE(narrow.code, 2);
    QVERIFY2(narrow.err.contains(QLatin1String("whole 32s")), qPrintable(narrow.err));
    const Run none = runTandem({"bench", "--attention", "--tokens", "0"}, env());
    QVERIFY(none.code != 0);
    QVERIFY2(none.err.contains(QLatin1String("not in range 1 to")), qPrintable(none.err));
    const Run both = runTandem({"bench", "--attention", "--delta-rule"}, env());
    QVERIFY(both.code != 0);
  }

  void convertExplainsBadInput() {
    const Run r = runTandem(
        {"convert", "--in", home_.path(), "--out", home_.path() + "/x", "--method", "int4"}, env());
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QLatin1String("not a model folder")), qPrintable(r.err));
    const Run method = runTandem(
        {"convert", "--in", home_.path(), "--out", home_.path() + "/x", "--method", "q4"}, env());
    QCOMPARE(method.code, 2);
    QVERIFY2(
        method.err.contains(QLatin1String("int8, int8-rotated, int4, int4-down8, bf16 or mxfp4")),
        qPrintable(method.err));
    QVERIFY(!QFileInfo::exists(home_.path() + "/x"));
    // The INT4 group under the name run and bench give it (--group is the same), checked as
    // they check it, and named by that name where the method takes none.
    const QStringList convert = {"convert", "--in",
                                 QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"), "--out",
                                 home_.path() + "/x"};
    for (const char* flag : {"--int4-group", "--group"}) {
      const Run group = runTandem(convert + QStringList{"--method", "int4", flag, "12"}, env());
      QVERIFY(group.code != 0);
      QVERIFY2(group.err.contains(QLatin1String("--int4-group: give a multiple of 8")),
               qPrintable(group.err));
    }
    const Run unused =
        runTandem(convert + QStringList{"--method", "int8", "--int4-group", "64"}, env());
    QCOMPARE(unused.code, 2);
    QVERIFY2(unused.err.contains(
                 QLatin1String("--int4-group sets the INT4 group; leave it out for --method int8")),
             qPrintable(unused.err));
    QVERIFY(!QFileInfo::exists(home_.path() + "/x"));
  }

  void tokenizePrintsIds() {
    const QString fixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    QFile f(fixture + "/expected.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto expected = nlohmann::json::parse(f.readAll().toStdString())["prompts"][1];
    const Run r = runTandem({"tokenize", "-m", fixture, "--text",
                             QString::fromStdString(expected["text"].get<std::string>()), "--json"},
                            env());
    QCOMPARE(r.code, 0);
    QCOMPARE(nlohmann::json::parse(r.out.toStdString())["ids"], expected["ids"]);
  }

  void chatInTheTerminal() {
    QProcess p;
    p.setProcessEnvironment(env());
    p.start(QStringLiteral(TANDEM_EXECUTABLE),
            {"chat", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"), "-n", "6",
             "--seed", "1"});
    QVERIFY(p.waitForStarted());
    p.write("hello\n/regenerate\n/nonsense\n/reset\n/quit\n");
    p.closeWriteChannel();
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 0);
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(out.contains(QLatin1String("Chatting with qwen3-moe (Qwen3-MoE, in ")),
             qPrintable(out));
    QVERIFY(out.contains(QLatin1String("Unknown command /nonsense")));
    QVERIFY(out.contains(QLatin1String("The conversation was cleared.")));
    QCOMPARE(err.count(QLatin1String("6 tokens generated")), 2);  // the reply and its regeneration
    QVERIFY2(err.contains(QLatin1String("[1 prompt token, ")), qPrintable(err));  // regenerated
    // A conversation past a short context drops its oldest turns and says so, once, as what
    // happens (not as advice to act on).
    QProcess small;
    small.setProcessEnvironment(env());
    small.start(QStringLiteral(TANDEM_EXECUTABLE),
                {"chat", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"), "-n", "8",
                 "-c", "64", "--seed", "1"});
    QVERIFY(small.waitForStarted());
    small.write("hello\n/system be brief\nhi again\n/quit\n");
    small.closeWriteChannel();
    QVERIFY(small.waitForFinished(30000));
    QCOMPARE(small.exitCode(), 0);
    const QString said = QString::fromUtf8(small.readAllStandardOutput());
    QCOMPARE(said.count(QLatin1String("the oldest turns are dropped to make room (-c sets a "
                                      "longer context)")),
             1);
    QVERIFY2(!said.contains(QLatin1String("start a new conversation")), qPrintable(said));
  }

  void templateRenderPrintsThePrompt() {
    const QString messages = home_.path() + "/messages.json";
    QFile m(messages);
    QVERIFY(m.open(QIODevice::WriteOnly));
    m.write(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])");
    m.close();
    const Run r = runTandem(
        {"template", "render", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe"),
         "--messages", messages},
        env());
    QCOMPARE(r.code, 0);
    QCOMPARE(r.out,
             QStringLiteral(
                 "<|im_start|>system\nBe "
                 "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    const Run bare = runTandem({"template", "render", "--template", QStringLiteral("/dev/null"),
                                "--messages", messages, "--no-generation-prompt"},
                               env());
    QCOMPARE(bare.code, 0);
    QCOMPARE(bare.out, QString());
  }

  // Without --model, run and chat use the built-in demo model.
  void runAndChatDefaultToTheDemoModel() {
    const QString demo = QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model");
    const QStringList args = {"-p", "Tell me a fortune.", "-n", "12", "--seed", "3"};
    const Run implicit = runTandem(QStringList{"run"} + args, env());
    QCOMPARE(implicit.code, 0);
    QVERIFY2(implicit.err.contains(QLatin1String("decode: ")), qPrintable(implicit.err));
    const Run explicit_ = runTandem(QStringList{"run", "-m", demo} + args, env());
    QCOMPARE(explicit_.code, 0);
    QCOMPARE(implicit.out, explicit_.out);

    QProcess p;
    p.setProcessEnvironment(env());
    p.start(QStringLiteral(TANDEM_EXECUTABLE), {"chat", "-n", "4", "--seed", "1"});
    QVERIFY(p.waitForStarted());
    p.write("hello\n/quit\n");
    p.closeWriteChannel();
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 0);
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    QVERIFY2(out.contains(QLatin1String("Chatting with demo-model (Qwen3-MoE, in ")),
             qPrintable(out));
  }

  void perplexityOfAText() {
    const QString fixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const QString text = QStringLiteral(TANDEM_TEST_DATA_DIR "/perplexity/fixture-text.txt");
    QFile f(QStringLiteral(TANDEM_TEST_DATA_DIR "/perplexity/expected.json"));
    QVERIFY(f.open(QIODevice::ReadOnly));
    const auto expected = nlohmann::json::parse(f.readAll().toStdString());
    const QString context = QString::number(expected["context_tokens"].get<int>());

    const Run json = runTandem({"perplexity", "-m", fixture, "--file", text, "--context", context,
                                "--kl-base", fixture, "--json", "-t", "1", "--kv-cache", "f32"},
                               env());
    QCOMPARE(json.code, 0);
    const auto doc = nlohmann::json::parse(json.out.toStdString());
    QCOMPARE(doc["kv_cache"], "f32");
    QCOMPARE(doc["kl_base_kv_cache"], "f32");
    const auto& want = expected["perplexity"]["qwen3-moe"];
    QCOMPARE(doc["evaluated_tokens"], want["evaluated_tokens"]);
    QVERIFY(std::abs(doc["perplexity"].get<double>() - want["perplexity"].get<double>()) <
            1e-3 * want["perplexity"].get<double>());
    QCOMPARE(doc["mean_kl"].get<double>(), 0.0);  // the model against itself
    QVERIFY(doc["seconds"].get<double>() > 0.0);
    // What keeping keys and values in BF16 costs against fp32: a little.
    const Run bf16 =
        runTandem({"perplexity", "-m", fixture, "--file", text, "--context", context, "--kl-base",
                   fixture, "--kl-base-kv-cache", "f32", "--json", "-t", "1"},
                  env());
    QCOMPARE(bf16.code, 0);
    const auto bf16_doc = nlohmann::json::parse(bf16.out.toStdString());
    QCOMPARE(bf16_doc["kv_cache"], "bf16");
    QCOMPARE(bf16_doc["kl_base_kv_cache"], "f32");
    QVERIFY2(bf16_doc["mean_kl"].get<double>() > 0.0 && bf16_doc["mean_kl"].get<double>() < 1e-3,
             qPrintable(QString::number(bf16_doc["mean_kl"].get<double>())));

    // The base's distributions saved, then compared with: the same divergence as the base
    // model loaded beside it, to FP16's rounding.
    const QString saved = home_.path() + "/bf16-cache.tdist";
    const Run save = runTandem({"perplexity", "-m", fixture, "--file", text, "--context", context,
                                "--kv-cache", "f32", "--save-logits", saved, "-t", "1"},
                               env());
    QVERIFY2(save.code == 0 && save.out.contains(QLatin1String("saved:")), qPrintable(save.err));
    const Run from_file = runTandem({"perplexity", "-m", fixture, "--file", text, "--context",
                                     context, "--kl-base-logits", saved, "--json", "-t", "1"},
                                    env());
    QVERIFY2(from_file.code == 0, qPrintable(from_file.err));
    const auto file_doc = nlohmann::json::parse(from_file.out.toStdString());
    QCOMPARE(file_doc["kl_base_logits"].get<std::string>(), saved.toStdString());
    QCOMPARE(file_doc["kl_base_saved_from"].get<std::string>(),
             fixture.toStdString() + ", native weights, f32 cache");
    const double live_kl = bf16_doc["mean_kl"].get<double>();
    QVERIFY2(std::abs(file_doc["mean_kl"].get<double>() - live_kl) < 0.01 * live_kl,
             qPrintable(QStringLiteral("%1 from the file, %2 live")
                            .arg(file_doc["mean_kl"].get<double>())
                            .arg(live_kl)));
    const Run both = runTandem({"perplexity", "-m", fixture, "--file", text, "--kl-base", fixture,
                                "--kl-base-logits", saved},
                               env());
    QVERIFY(both.code != 0 && both.err.contains(QLatin1String("excludes")));
    const Run other_context = runTandem(
        {"perplexity", "-m", fixture, "--file", text, "--context", "16", "--kl-base-logits", saved},
        env());
    QCOMPARE(other_context.code, 2);
    QVERIFY2(other_context.err.contains(
                 QLatin1String("measure with --context " + context.toLatin1() + " too")),
             qPrintable(other_context.err));
    const Run unwritable = runTandem({"perplexity", "-m", fixture, "--file", text, "--save-logits",
                                      home_.path() + "/no/such/folder/x.tdist"},
                                     env());
    QVERIFY2(unwritable.code != 0 &&
                 unwritable.err.contains(QLatin1String("is not a folder that can be written")),
             qPrintable(unwritable.err));

    const Run table = runTandem({"perplexity", "-m", fixture, "-f", text}, env());
    QCOMPARE(table.code, 0);
    for (const char* line : {"tokens evaluated:", "perplexity:", "time:"}) {
      QVERIFY2(table.out.contains(QLatin1String(line)), qPrintable(table.out));
    }
    QVERIFY(!table.out.contains(QLatin1String("KL")));

    const Run otherTokenizer =
        runTandem({"perplexity", "-m", fixture, "-f", text, "--kl-base",
                   QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model")},
                  env());
    QCOMPARE(otherTokenizer.code, 2);
    QVERIFY2(otherTokenizer.err.contains(QLatin1String("same tokenizer")),
             qPrintable(otherTokenizer.err));
    const Run tooLong =
        runTandem({"perplexity", "-m", fixture, "-f", text, "--context", "100000"}, env());
    QCOMPARE(tooLong.code, 2);
    QVERIFY2(tooLong.err.contains(QLatin1String("positions")), qPrintable(tooLong.err));
    const Run noFile = runTandem({"perplexity", "-m", fixture}, env());
    QVERIFY(noFile.code != 0);

    // One model in two CPU formats: what a format costs is its KL from the other; the same
    // format twice is no divergence at all.
    const auto kl = [&](const char* format, const char* base_format) {
      const Run r = runTandem({"perplexity", "-m", fixture, "-f", text, "--cpu-format", format,
                               "--kl-base", fixture, "--kl-base-cpu-format", base_format, "--json"},
                              env());
      if (r.code != 0) return -1.0;
      return nlohmann::json::parse(r.out.toStdString())["mean_kl"].get<double>();
    };
    QCOMPARE(kl("bf16", "bf16"), 0.0);
    const double int8 = kl("int8", "bf16");
    QVERIFY2(int8 > 0.0 && int8 < 0.5, qPrintable(QString::number(int8)));
    const Run lonely =
        runTandem({"perplexity", "-m", fixture, "-f", text, "--kl-base-cpu-format", "bf16"}, env());
    QVERIFY(lonely.code != 0);
    QVERIFY2(lonely.err.contains(QLatin1String("give it with --kl-base")), qPrintable(lonely.err));

    // --dense onednn scores the model with oneDNN's dense INT8 products (one activation scale
    // per token): another divergence than our kernels', and refused where the model has no
    // dense INT8 matrix.
    const auto onednn_kl = [&](const QStringList& extra) {
      const Run r =
          runTandem(QStringList{"perplexity", "-m", fixture, "-f", text, "--cpu-format", "int8",
                                "--kl-base", fixture, "--kl-base-cpu-format", "bf16", "--json"} +
                        extra,
                    env());
      if (r.code != 0) return -1.0;
      return nlohmann::json::parse(r.out.toStdString())["mean_kl"].get<double>();
    };
    QCOMPARE(onednn_kl({"--dense", "packed"}), int8);
    const double onednn = onednn_kl({"--dense", "onednn"});
    if (kernels::onednn_refusal(kernels::PackedFormat::Int8).empty()) {
      QVERIFY2(onednn > 0.0 && onednn < 0.5 && onednn != int8,
               qPrintable(QStringLiteral("%1 against %2").arg(onednn).arg(int8)));
    } else {
      QCOMPARE(onednn, -1.0);  // refused: oneDNN's INT8 products would be wrong here
    }
    const Run no_int8 = runTandem(
        {"perplexity", "-m", fixture, "-f", text, "--cpu-format", "bf16", "--dense", "onednn"},
        env());
    QCOMPARE(no_int8.code, 2);
    QVERIFY2(no_int8.err.contains(QLatin1String("has none in the bf16 format")),
             qPrintable(no_int8.err));
  }

  void recommendForARecordedMachine() {
    const Run r =
        runTandem({"recommend", "-m", "qwen3-30b-a3b", "--hardware",
                   QStringLiteral(TANDEM_TEST_DATA_DIR "/hardware/ryzen-avx512-16gb.json"),
                   "--json", "--save"},
                  env());
    QCOMPARE(r.code, 0);
    const auto doc = nlohmann::json::parse(r.out.toStdString());
    QCOMPARE(doc["verdict"].get<std::string>(), std::string("fits"));
    QVERIFY(doc["memory"]["ram_total_bytes"].get<std::uint64_t>() <=
            doc["memory"]["ram_budget_bytes"].get<std::uint64_t>());
    QVERIFY(QFile::exists(home_.path() + "/data/Tandem/Tandem/profiles/qwen3-30b-a3b.json"));
    const Run missing = runTandem({"recommend", "-m", "no-such-model"}, env());
    QCOMPARE(missing.code, 1);
    QVERIFY(missing.err.contains(QLatin1String("Catalog models: ")));
    const Run tooBig =
        runTandem({"recommend", "-m", "kimi-k2-instruct", "--hardware",
                   QStringLiteral(TANDEM_TEST_DATA_DIR "/hardware/laptop-avx2.json")},
                  env());
    QCOMPARE(tooBig.code, 3);
    QVERIFY(tooBig.out.contains(QLatin1String("choose a smaller model")));
  }

  // Sampling flags outside the sampler's ranges are refused before the model loads, with the
  // sampler's own sentence (a NaN too), as the server refuses them.
  void samplingFlagsOutsideTheirRangesAreRefused() {
    const QString model = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const QList<QStringList> refused = {
        {"run", "--temperature", "-1"},   {"run", "--temperature=nan"},
        {"run", "--top-k", "-3"},         {"run", "--top-p", "2"},
        {"run", "--min-p", "-0.5"},       {"run", "--repeat-penalty", "0"},
        {"run", "--temperature", "warm"}, {"chat", "--temperature", "3"}};
    for (const QStringList& flags : refused) {
      const QStringList rest =
          flags[0] == "run" ? QStringList{"-p", "Hi", "-n", "1"} : QStringList{"-n", "1"};
      const Run r = runTandem(QStringList{flags[0], "-m", model} + flags.mid(1) + rest, env());
      QVERIFY2(r.code != 0, qPrintable(flags.join(' ')));
      QVERIFY2(r.err.contains(QLatin1String(" must be ")) ||
                   r.err.contains(QLatin1String("give a number")),
               qPrintable(flags.join(' ') + ": " + r.err));
      QVERIFY2(!r.err.contains(QLatin1String("Loading")), qPrintable(r.err));
    }
    const Run fine = runTandem({"run", "-m", model, "-p", "Hi", "-n", "1", "--temperature", "2",
                                "--top-p", "0", "--repeat-penalty", "1.1", "-t", "2"},
                               env());
    QVERIFY2(fine.code == 0, qPrintable(fine.err));
  }

  // --seed repeats a run's sampling; -1, as llama.cpp takes it, draws a new seed each run (it
  // wrapped to 2^64-1 and repeated without a word); another negative or a seed past 2^64-1 is
  // refused before the model loads.
  void seedRepeatsAndMinusOneDrawsAnew() {
    const QStringList args = {"run", "-p",    "And the LORD said unto", "-n", "24", "--temperature",
                              "1.5", "--seed"};
    const Run top = runTandem(args + QStringList{"18446744073709551615"}, env());
    QVERIFY2(top.code == 0, qPrintable(top.err));
    const Run again = runTandem(args + QStringList{"18446744073709551615"}, env());
    QCOMPARE(again.out, top.out);
    bool differs = false;
    for (int i = 0; i < 3 && !differs; ++i) {
      const Run drawn = runTandem(args + QStringList{"-1"}, env());
      QVERIFY2(drawn.code == 0, qPrintable(drawn.err));
      differs = drawn.out != top.out;
    }
    QVERIFY2(differs, "--seed -1 repeated the run of seed 2^64-1 three times");
    for (const char* bad : {"-2", "18446744073709551616", "7x"}) {
      const Run r = runTandem(args + QStringList{QString::fromLatin1(bad)}, env());
      QCOMPARE(r.code, 105);  // CLI11's ValidationError
      QVERIFY2(r.err.contains(QLatin1String("--seed: give ")), qPrintable(r.err));
    }
    // synth, whose seed is always one, refuses -1 too.
    const QString out = home_.path() + "/synth";
    const Run synth = runTandem(
        {"synth", "--like", "qwen3-30b-a3b", "--layers", "1", "--seed", "-1", "--out", out}, env());
    QCOMPARE(synth.code, 105);
    QVERIFY2(synth.err.contains(QLatin1String("--seed: give a whole number from 0")),
             qPrintable(synth.err));
    QVERIFY(!QFileInfo::exists(out));
  }

  // --int4-group reaches the packing: 32 is the default, 64 gives other logits; a group that
  // is no multiple of 8, or the flag without INT4, is refused with a sentence.
  void int4GroupReachesThePacking() {
    const QString model = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const auto logits = [&](const QStringList& extra) {
      const QString dump = home_.path() + "/int4-logits.json";
      QFile::remove(dump);
      const Run r = runTandem(QStringList{"run", "-m", model, "-p", "Hello there", "-n", "1",
                                          "--greedy", "--dump-logits", dump, "-t", "2"} +
                                  extra,
                              env());
      QFile d(dump);
      if (r.code != 0 || !d.open(QIODevice::ReadOnly)) return std::vector<float>{};
      return nlohmann::json::parse(d.readAll().toStdString())["logits"].get<std::vector<float>>();
    };
    const auto by_default = logits({"--cpu-format", "int4"});
    QVERIFY(!by_default.empty());
    QCOMPARE(logits({"--cpu-format", "int4", "--int4-group", "32"}), by_default);
    const auto by_64 = logits({"--cpu-format", "int4", "--int4-group", "64"});
    QVERIFY(!by_64.empty());
    QVERIFY(by_64 != by_default);
    const Run odd = runTandem(
        {"run", "-m", model, "-p", "Hi", "--cpu-format", "int4", "--int4-group", "12"}, env());
    QVERIFY(odd.code != 0);
    QVERIFY2(odd.err.contains(QLatin1String("multiple of 8")), qPrintable(odd.err));
    const Run not_int4 = runTandem(
        {"run", "-m", model, "-p", "Hi", "--cpu-format", "int8", "--int4-group", "32"}, env());
    QCOMPARE(not_int4.code, 2);
    QVERIFY2(not_int4.err.contains(QLatin1String("use it with --cpu-format int4")),
             qPrintable(not_int4.err));
    // int4-down8 takes the group too; its logits differ from INT4's (its experts' downs are
    // INT8) and from INT8's.
    const auto down8 = logits({"--cpu-format", "int4-down8"});
    QVERIFY(!down8.empty());
    QVERIFY(down8 != by_default);
    QVERIFY(down8 != logits({"--cpu-format", "int8"}));
    const auto down8_64 = logits({"--cpu-format", "int4-down8", "--int4-group", "64"});
    QVERIFY(!down8_64.empty());
    QVERIFY(down8_64 != down8);
  }

  // --kv-cache reaches the CPU's attention: bf16 by default, f32 and int8 close to it but
  // not equal; a format that is not one, or that the model's heads do not fit, is refused
  // with a sentence.
  void kvCacheFormatReachesTheAttention() {
    const QString model = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");
    const auto logits = [&](const QStringList& extra) {
      const QString dump = home_.path() + "/kv-logits.json";
      QFile::remove(dump);
      const Run r = runTandem(QStringList{"run", "-m", model, "-p", "Hello there, how are you",
                                          "-n", "1", "--greedy", "--dump-logits", dump, "-t", "2"} +
                                  extra,
                              env());
      QFile d(dump);
      if (r.code != 0 || !d.open(QIODevice::ReadOnly)) return std::vector<float>{};
      return nlohmann::json::parse(d.readAll().toStdString())["logits"].get<std::vector<float>>();
    };
    const auto by_default = logits({});
    QVERIFY(!by_default.empty());
    QCOMPARE(logits({"--kv-cache", "bf16"}), by_default);
    const auto f32 = logits({"--kv-cache", "f32"});
    QCOMPARE(f32.size(), by_default.size());
    QVERIFY(f32 != by_default);
    float worst = 0.0f, range = 0.0f;
    for (std::size_t i = 0; i < f32.size(); ++i) {
      worst = std::max(worst, std::abs(f32[i] - by_default[i]));
      range = std::max(range, std::abs(f32[i]));
    }
    QVERIFY2(worst <= 0.02f * range, qPrintable(QStringLiteral("%1 of %2").arg(worst).arg(range)));
    // 8 bits: close to fp32 as well, a little further than BF16.
    const auto int8 = logits({"--kv-cache", "int8"});
    QCOMPARE(int8.size(), f32.size());
    QVERIFY(int8 != by_default && int8 != f32);
    worst = 0.0f;
    for (std::size_t i = 0; i < f32.size(); ++i)
      worst = std::max(worst, std::abs(f32[i] - int8[i]));
    QVERIFY2(worst <= 0.05f * range, qPrintable(QStringLiteral("%1 of %2").arg(worst).arg(range)));
    const Run bad = runTandem({"run", "-m", model, "-p", "Hi", "--kv-cache", "q8"}, env());
    QVERIFY(bad.code != 0);
    QVERIFY2(bad.err.contains(QLatin1String("give bf16, int8 or f32")), qPrintable(bad.err));
    // A model whose heads (24 wide) an 8-bit cache does not take: refused before it runs,
    // with what to use instead.
    const Run odd = runTandem({"run", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/llama"),
                               "-p", "Hi", "-n", "1", "--kv-cache", "int8"},
                              env());
    QCOMPARE(odd.code, 2);
    QVERIFY2(odd.err.contains(QLatin1String("keep them in BF16 instead (--kv-cache bf16")),
             qPrintable(odd.err));
  }

  void badArgumentsAreRejected() {
    const Run size = runTandem({"--screenshot", home_.path() + "/x.png", "--size", "big"}, env());
    QVERIFY(size.code != 0);
    QVERIFY(size.err.contains(QLatin1String("WIDTHxHEIGHT")));
    const Run unknown = runTandem({"detect", "--frobnicate"}, env());
    QVERIFY(unknown.code != 0);
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
