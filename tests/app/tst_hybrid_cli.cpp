// The hybrid engine from the command line, as a user runs it: --accelerator emulated gives
// the CPU's text; routing statistics recorded by one run place the experts of the next; a
// saved profile is what runs, the flags given beside it win; bench reports the time split;
// and every bad value or contradiction is refused with a sentence and exit status 2.
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/tandem_process.h"

using tandem::test::Run;

namespace {

const QString kFixture = QStringLiteral(TANDEM_TEST_DATA_DIR "/models/qwen3-moe");

}  // namespace

class TestHybridCli : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  Run tandem(const QStringList& args) const {
    QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
    e.insert(QStringLiteral("HOME"), home_.path());
    e.insert(QStringLiteral("XDG_DATA_HOME"), home_.path() + "/data");
    e.insert(QStringLiteral("XDG_CONFIG_HOME"), home_.path() + "/config");
    e.insert(QStringLiteral("XDG_CACHE_HOME"), home_.path() + "/.cache");
    return tandem::test::run_tandem(args, e);
  }

  static QStringList generate(const QStringList& more) {
    return QStringList{"run", "-m", kFixture,   "-p", "The quick brown fox",
                       "-n",  "16", "--greedy", "-t", "1"} +
           more;
  }

 private slots:
  void emulatedAcceleratorGivesTheCpusText_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::newRow("some experts") << QStringList{"--num-gpu-experts", "3"};
    QTest::newRow("all, random") << QStringList{"--expert-placement-strategy", "random"};
    QTest::newRow("layerwise and moving") << QStringList{"--num-gpu-experts",
                                                         "1",
                                                         "--gpu-prefill-token-threshold",
                                                         "2",
                                                         "--enable-dynamic-expert-update",
                                                         "--dynamic-update-budget",
                                                         "1M"};
    QTest::newRow("a small slow device")
        << QStringList{"--emulated-memory",         "16M", "--emulated-bus-gbps", "0.5",
                       "--emulated-bus-latency-us", "50",  "--emulated-threads",  "2"};
  }
  void emulatedAcceleratorGivesTheCpusText() {
    QFETCH(QStringList, flags);
    // The accelerator keeps an fp32 KV cache, as a GPU does: the CPU alone likewise.
    const Run cpu = tandem(generate({"--accelerator", "none", "--kv-cache", "f32"}));
    QCOMPARE(cpu.code, 0);
    const Run hybrid = tandem(generate(QStringList{"--accelerator", "emulated"} + flags));
    QCOMPARE(hybrid.code, 0);
    QVERIFY2(hybrid.err.contains(QLatin1String("on the emulated accelerator")),
             qPrintable(hybrid.err));
    QCOMPARE(hybrid.out, cpu.out);
  }

  void statisticsPlaceTheNextRun() {
    const QString stats = home_.path() + "/stats.json";
    for (int i = 0; i < 2; ++i)
      QCOMPARE(tandem(generate({"--record-expert-stats", stats})).code, 0);
    std::ifstream in(stats.toStdString());
    const auto doc = nlohmann::json::parse(in);
    QCOMPARE(doc["format"].get<std::string>(), std::string("tandem-expert-stats"));
    QCOMPARE(doc["model"]["layers"].get<int>(), 3);
    const auto tokens = doc["tokens"].get<std::uint64_t>();
    QVERIFY(tokens >= 2 * 16);  // two runs' prompts and replies
    std::uint64_t routed = 0;
    for (const auto& row : doc["counts"])
      for (const auto& c : row) routed += c.get<std::uint64_t>();
    QCOMPARE(routed, tokens * 2 * 2);  // 2 MoE layers, 2 experts per token
    const Run placed =
        tandem(generate({"--accelerator", "emulated", "--num-gpu-experts", "2",
                         "--expert-placement-strategy", "frequency", "--expert-stats", stats}));
    QCOMPARE(placed.code, 0);
    // Another model's file is refused before anything runs.
    const Run other = tandem({"run", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/mixtral"),
                              "-p", "x", "-n", "1", "--record-expert-stats", stats});
    QCOMPARE(other.code, 2);
    QVERIFY2(other.err.contains(QLatin1String("another model")), qPrintable(other.err));
    const Run mismatched =
        tandem({"run", "-m", QStringLiteral(TANDEM_TEST_DATA_DIR "/models/mixtral"), "-p", "x",
                "-n", "1", "--accelerator", "emulated", "--expert-placement-strategy", "frequency",
                "--expert-stats", stats});
    QCOMPARE(mismatched.code, 2);
    QVERIFY2(mismatched.err.contains(QLatin1String("do not fit this model")),
             qPrintable(mismatched.err));
  }

  // --kv-cache is the CPU's: named beside an accelerator, which keeps its own, it is said to be
  // unused (it was ignored without a word); not named, nothing is said.
  void aKvCacheTheAcceleratorDoesNotUseIsSaid() {
    const Run named = tandem(generate({"--accelerator", "emulated", "--kv-cache", "int8"}));
    QCOMPARE(named.code, 0);
    QVERIFY2(named.err.contains(QLatin1String("keeps its own KV cache, so the CPU's int8 cache is "
                                              "not used")),
             qPrintable(named.err));
    const Run unnamed = tandem(generate({"--accelerator", "emulated"}));
    QCOMPARE(unnamed.code, 0);
    QVERIFY2(!unnamed.err.contains(QLatin1String("KV cache")), qPrintable(unnamed.err));
  }

  void aSavedProfileIsWhatRuns() {
    const QString profile = home_.path() + "/profile.json";
    // A profile of these parameters, as recommend --save writes them (name, value).
    const auto write_profile = [&](const std::vector<std::pair<std::string, std::string>>& p) {
      nlohmann::json parameters = nlohmann::json::array();
      for (const auto& [name, value] : p)
        parameters.push_back({{"name", name}, {"value", value}, {"reason", ""}});
      std::ofstream(profile.toStdString()) << nlohmann::json{{"parameters", parameters}}.dump();
    };
    write_profile({{"accelerator", "emulated"},
                   {"num-gpu-experts", "2"},
                   {"max-deferred-experts-per-token", "1"},
                   {"cpuinfer", "1"}});
    const auto bench = [&](const QStringList& more) {
      const Run r = tandem(QStringList{"bench", "-m", kFixture, "-p", "8", "-n", "4", "-r", "1",
                                       "--json", "--profile", profile} +
                           more);
      return std::make_pair(
          r.code, r.code == 0 ? nlohmann::json::parse(r.out.toStdString()) : nlohmann::json());
    };
    auto [code, doc] = bench({});
    QCOMPARE(code, 0);
    QCOMPARE(doc["threads"].get<int>(), 1);
    QCOMPARE(doc["accelerator"]["gpu_experts_per_layer"].get<int>(), 2);
    QCOMPARE(doc["accelerator"]["max_deferred_experts_per_token"].get<int>(), 1);
    QVERIFY(doc["accelerator"]["overlap"].get<bool>());
    for (const char* part : {"cpu_experts_ms", "accelerator_experts_ms", "attention_ms", "bus_ms",
                             "waiting_ms", "accelerator_idle_ms"})
      QVERIFY2(doc["decode_time_per_token"].contains(part), part);
    QVERIFY(doc["decode_time_per_token"]["bus_bytes"].get<double>() > 0);
    // The flags given beside it win.
    std::tie(code, doc) = bench({"--num-gpu-experts", "1", "-t", "2", "--serial"});
    QCOMPARE(code, 0);
    QCOMPARE(doc["accelerator"]["gpu_experts_per_layer"].get<int>(), 1);
    QCOMPARE(doc["threads"].get<int>(), 2);
    QVERIFY(!doc["accelerator"]["overlap"].get<bool>());
    std::tie(code, doc) = bench({"--accelerator", "none"});
    QCOMPARE(code, 0);
    QVERIFY(doc["accelerator"].is_null());
    QCOMPARE(doc["kv_cache"].get<std::string>(), std::string("bf16"));
    // The profile's KV cache is the CPU's when it runs alone (the GPU keeps its own).
    write_profile({{"accelerator", "none"}, {"kv-cache", "int8"}});
    std::tie(code, doc) = bench({});
    QCOMPARE(code, 0);
    QCOMPARE(doc["kv_cache"].get<std::string>(), std::string("int8"));
    std::tie(code, doc) = bench({"--kv-cache", "f32"});
    QCOMPARE(code, 0);
    QCOMPARE(doc["kv_cache"].get<std::string>(), std::string("f32"));
    // Prompt tokens per pass: the CPU's default for a model with routed experts, the
    // profile's, and the flag's over it.
    QCOMPARE(doc["prefill_chunk"].get<int>(), 2048);
    write_profile({{"accelerator", "none"}, {"prefill-chunk", "512"}});
    std::tie(code, doc) = bench({});
    QCOMPARE(code, 0);
    QCOMPARE(doc["prefill_chunk"].get<int>(), 512);
    std::tie(code, doc) = bench({"--prefill-chunk", "3"});
    QCOMPARE(code, 0);
    QCOMPARE(doc["prefill_chunk"].get<int>(), 3);
    write_profile({{"prefill-chunk", "0"}});
    const Run zero = tandem({"bench", "-m", kFixture, "-p", "8", "-n", "0", "--profile", profile});
    QCOMPARE(zero.code, 2);
    QVERIFY2(zero.err.contains(profile) && zero.err.contains(QLatin1String("prefill-chunk")),
             qPrintable(zero.err));
    // The command's own CPU format and context win over the profile's too (they were taken
    // from it without a word), and a --kt-method that contradicts --cpu-format is refused.
    write_profile(
        {{"accelerator", "none"}, {"kt-method", "AVX512INT8"}, {"context-length", "256"}});
    std::tie(code, doc) = bench({});
    QCOMPARE(code, 0);
    QCOMPARE(doc["cpu_format"].get<std::string>(), std::string("int8"));
    std::tie(code, doc) = bench({"--cpu-format", "int4"});
    QCOMPARE(code, 0);
    QCOMPARE(doc["cpu_format"].get<std::string>(), std::string("int4"));
    // run too, where native is named (it was the flag's default, taken as not given).
    const Run packed = tandem(generate({"--profile", profile}));
    QVERIFY2(packed.code == 0 && packed.err.contains(QLatin1String("packing the weights")),
             qPrintable(packed.err));
    const Run as_stored = tandem(generate({"--profile", profile, "--cpu-format", "native"}));
    QVERIFY2(as_stored.code == 0 && !as_stored.err.contains(QLatin1String("packing")),
             qPrintable(as_stored.err));
    const Run short_context = tandem(generate({"--profile", profile, "-c", "3"}));
    QCOMPARE(short_context.code, 2);
    QVERIFY2(short_context.err.contains(QLatin1String("more than a context of 3 (-c) holds")),
             qPrintable(short_context.err));
    const Run both = tandem(generate({"--kt-method", "AMXINT4", "--cpu-format", "int8"}));
    QCOMPARE(both.code, 2);
    QVERIFY2(both.err.contains(QLatin1String(
                 "--kt-method AMXINT4 names the int4 format and --cpu-format the int8 one")),
             qPrintable(both.err));
    // The plan's rotated INT8 (with AMX) reads back as its own format, not INT8's.
    const Run rotated = tandem(generate({"--kt-method", "AMXINT8ROTATED", "--cpu-format", "int8"}));
    QCOMPARE(rotated.code, 2);
    QVERIFY2(rotated.err.contains(QLatin1String("--kt-method AMXINT8ROTATED names the "
                                                "int8-rotated format and --cpu-format the int8")),
             qPrintable(rotated.err));
    QCOMPARE(tandem(generate({"--kt-method", "AMXINT8ROTATED"})).code, 0);
    // What recommend --save writes runs as it is.
    const QString saved = home_.path() + "/data/Tandem/Tandem/profiles/qwen3-moe.json";
    QCOMPARE(tandem({"recommend", "-m", kFixture, "--save"}).code, 0);
    QVERIFY(QFile::exists(saved));
    const Run run = tandem(generate({"--profile", saved}));
    QCOMPARE(run.code, 0);
    // A broken profile is refused with a sentence that names it.
    write_profile({{"num-gpu-experts", "many"}});
    const Run broken = tandem(generate({"--profile", profile}));
    QCOMPARE(broken.code, 2);
    QVERIFY2(broken.err.contains(profile) && broken.err.contains(QLatin1String("num-gpu-experts")),
             qPrintable(broken.err));
    write_profile({{"kv-cache", "q8_0"}});
    const Run unknown_cache = tandem(generate({"--profile", profile}));
    QCOMPARE(unknown_cache.code, 2);
    QVERIFY2(unknown_cache.err.contains(profile) &&
                 unknown_cache.err.contains(QLatin1String("bf16, int8 or f32")),
             qPrintable(unknown_cache.err));
  }

  // Exit status 2 for settings that cannot be (105 where the command-line parser itself
  // refuses a value, as for every flag).
  void badValuesHaveSentences_data() {
    QTest::addColumn<QStringList>("flags");
    QTest::addColumn<QString>("words");
    QTest::addColumn<int>("code");
    QTest::newRow("cuda here") << QStringList{"--accelerator", "cuda"} << "--accelerator none" << 2;
    QTest::newRow("unknown accelerator")
        << QStringList{"--accelerator", "tpu"} << "auto, cuda, emulated or none" << 105;
    QTest::newRow("experts without accelerator")
        << QStringList{"--accelerator", "none", "--num-gpu-experts", "2"} << "--accelerator none"
        << 2;
    QTest::newRow("emulated settings alone")
        << QStringList{"--emulated-memory", "1G"} << "--accelerator emulated" << 2;
    QTest::newRow("negative experts")
        << QStringList{"--num-gpu-experts", "-1"} << "0 or more" << 105;
    QTest::newRow("too many experts")
        << QStringList{"--accelerator", "emulated", "--num-gpu-experts", "9"} << "give at most 6"
        << 2;
    QTest::newRow("deferring everything")
        << QStringList{"--accelerator", "emulated", "--max-deferred-experts-per-token", "2"}
        << "give at most 1" << 2;
    QTest::newRow("frequency without statistics")
        << QStringList{"--accelerator", "emulated", "--expert-placement-strategy", "frequency"}
        << "--expert-stats" << 2;
    QTest::newRow("unknown strategy") << QStringList{"--expert-placement-strategy", "hottest"}
                                      << "uniform, frequency, front-loading or random" << 105;
    QTest::newRow("bad size") << QStringList{"--accelerator", "emulated", "--emulated-memory",
                                             "lots"}
                              << "512M or 8G" << 105;
    QTest::newRow("too small a device")
        << QStringList{"--accelerator", "emulated", "--emulated-memory", "64K"} << "cannot hold"
        << 2;
    QTest::newRow("more experts than fit")
        << QStringList{"--accelerator", "emulated",          "--emulated-memory",
                       "3584K",         "--num-gpu-experts", "6"}
        << "--num-gpu-experts 6 needs" << 2;
    QTest::newRow("zero bus") << QStringList{"--accelerator", "emulated", "--emulated-bus-gbps",
                                             "0"}
                              << "above 0" << 105;
    QTest::newRow("bad budget") << QStringList{"--dynamic-update-budget", "some"} << "64M" << 105;
    QTest::newRow("bad method") << QStringList{"--kt-method", "AMXFP4"}
                                << "INT8, INT8ROTATED, INT4, INT4DOWN8, BF16 or MXFP4" << 105;
  }
  void badValuesHaveSentences() {
    QFETCH(QStringList, flags);
    QFETCH(QString, words);
    QFETCH(int, code);
    const Run r = tandem(generate(flags));
    QCOMPARE(r.code, code);
    QVERIFY2(r.err.contains(words), qPrintable(r.err));
  }
};

QTEST_GUILESS_MAIN(TestHybridCli)
#include "tst_hybrid_cli.moc"
