// `tandem export sglang`: the commands use only flags the seeds document (listed with their
// sources in tests/data/sglang/documented-flags.txt), carry the plan's values under the
// seeds' names, convert the weights only when kt-kernel needs it, and refuse what cannot be
// handed over with a sentence.
#include <QtTest>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/plan/catalog.h"
#include "engine/plan/model_lookup.h"
#include "engine/plan/sglang_export.h"

using namespace tandem;
using namespace tandem::plan;

namespace {

hw::HardwareReport machine(const std::string& name) {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hardware/" + name + ".json");
  return hardware_from_json(nlohmann::json::parse(in));
}

std::set<std::string> documented(const std::string& kind) {
  std::ifstream in(TANDEM_TEST_DATA_DIR "/sglang/documented-flags.txt");
  std::set<std::string> out;
  std::string k, v;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    words >> k >> v;
    if (k == kind) out.insert(v);
  }
  return out;
}

std::string after(const std::vector<std::string>& argv, const std::string& flag) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) return argv[i + 1];
  return "<absent>";
}

bool has(const std::vector<std::string>& argv, const std::string& flag) {
  return std::find(argv.begin(), argv.end(), flag) != argv.end();
}

std::string param(const Plan& p, const std::string& name) {
  for (const Parameter& x : p.parameters)
    if (x.name == name) return x.value;
  return "<absent>";
}

struct Case {
  ModelLookup model;
  Plan plan;
};

Case planned(const std::string& id, const std::string& hardware, PlanWishes wishes = {}) {
  Case c{lookup_catalog_entry(*find_catalog_entry(id)), {}};
  c.plan = make_plan(machine(hardware), c.model.shape, wishes);
  return c;
}

void check_flags(const SglangExport& e) {
  const std::set<std::string> sglang = documented("sglang");
  const std::set<std::string> convert = documented("convert");
  QVERIFY(sglang.size() > 10 && convert.size() >= 6);
  QCOMPARE(e.launch[0], std::string("python3"));
  QCOMPARE(e.launch[2], std::string("sglang.launch_server"));
  for (const std::string& a : e.launch)
    if (a.rfind("--", 0) == 0) QVERIFY2(sglang.count(a), a.c_str());
  for (const std::string& a : e.convert)
    if (a.rfind("--", 0) == 0) QVERIFY2(convert.count(a), a.c_str());
  QVERIFY2(documented("kt-method").count(after(e.launch, "--kt-method")),
           after(e.launch, "--kt-method").c_str());
  QVERIFY(documented("strategy").count(after(e.launch, "--kt-expert-placement-strategy")));
}

}  // namespace

class TestSglangExport : public QObject {
  Q_OBJECT
 private slots:
  // On a two-socket AMX Xeon with a GPU: the plan's values under the seeds' names.
  void carriesThePlan() {
    const Case c = planned("qwen3-30b-a3b", "xeon-2s-amx-24gb");
    SglangInputs in;
    in.download_folder = "/models/Qwen/Qwen3-30B-A3B";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    QCOMPARE(after(e.launch, "--kt-cpuinfer"), param(c.plan, "cpuinfer"));
    QCOMPARE(after(e.launch, "--kt-threadpool-count"), param(c.plan, "threadpool-count"));
    QCOMPARE(after(e.launch, "--kt-num-gpu-experts"), param(c.plan, "num-gpu-experts"));
    QCOMPARE(after(e.launch, "--kt-max-deferred-experts-per-token"),
             param(c.plan, "max-deferred-experts-per-token"));
    QCOMPARE(after(e.launch, "--context-length"), std::to_string(c.plan.context_tokens));
    // kt-kernel stages experts at the bus's speed: its threshold is the bus's break-even,
    // though Tandem's own plan leaves layerwise prefill off.
    QCOMPARE(param(c.plan, "gpu-prefill-token-threshold"), std::string("0"));
    QVERIFY(c.plan.bus_prefill_threshold > 0);
    QCOMPARE(after(e.launch, "--kt-gpu-prefill-token-threshold"),
             std::to_string(c.plan.bus_prefill_threshold));
    QCOMPARE(after(e.launch, "--model-path"), in.download_folder);
    QCOMPARE(has(e.launch, "--kt-enable-dynamic-expert-update"),
             param(c.plan, "enable-dynamic-expert-update") == "true");
    QCOMPARE(after(e.launch, "--tool-call-parser"), std::string("qwen25"));
    // INT8 experts: kt-kernel converts them first, into the folder the launch reads. The plan
    // took them rotated for AMX, which kt-kernel does not do: its plain INT8, said so.
    QCOMPARE(c.plan.cpu_format, WeightFormat::Int8Rotated);
    QCOMPARE(after(e.launch, "--kt-method"), std::string("AMXINT8"));
    bool noted = false;
    for (const std::string& n : e.notes) noted |= n.find("no rotated INT8") != std::string::npos;
    QVERIFY(noted);
    QCOMPARE(after(e.convert, "--quant-method"), std::string("int8"));
    QCOMPARE(after(e.convert, "--input-type"), std::string("bf16"));
    QCOMPARE(after(e.convert, "--output"), after(e.launch, "--kt-weight-path"));
    QCOMPARE(after(e.convert, "--input-path"), in.download_folder);
    QCOMPARE(e.config["kt-cpuinfer"]["value"], nlohmann::json(param(c.plan, "cpuinfer")));
    QVERIFY(!e.config["kt-cpuinfer"]["reason"].get<std::string>().empty());
    const std::string script = sglang_script(e);
    QVERIFY(script.rfind("#!/usr/bin/env bash", 0) == 0);
    QVERIFY(script.find("convert_cpu_weights.py") < script.find("sglang.launch_server"));
    QVERIFY(script.find("tandem download Qwen/Qwen3-30B-A3B") != std::string::npos);
  }

  // kt-kernel has no INT4 with INT8 downs: the launch takes its INT4 (smaller, so it fits
  // where the plan's format does) and a note says so.
  void int4Down8GoesAsInt4WithANote() {
    PlanWishes wishes;
    wishes.cpu_format = WeightFormat::Int4Down8;
    const Case c = planned("qwen3-30b-a3b", "xeon-2s-amx-24gb", wishes);
    QCOMPARE(c.plan.cpu_format, WeightFormat::Int4Down8);
    SglangInputs in;
    in.download_folder = "/models/q";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    QCOMPARE(after(e.launch, "--kt-method"), std::string("AMXINT4"));
    QCOMPARE(after(e.convert, "--quant-method"), std::string("int4"));
    bool noted = false;
    for (const std::string& n : e.notes)
      noted |= n.find("8-bit down projections") != std::string::npos;
    QVERIFY(noted);
  }

  // Full precision: kt-kernel reads the model's own files; nothing to convert.
  void bf16ReadsTheModelsOwnFiles() {
    PlanWishes wishes;
    wishes.cpu_format = WeightFormat::Bf16;
    const Case c = planned("qwen3-30b-a3b", "xeon-2s-amx-24gb", wishes);
    SglangInputs in;
    in.download_folder = "/models/q";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    QCOMPARE(after(e.launch, "--kt-method"), std::string("BF16"));
    QVERIFY(e.convert.empty());
    QCOMPARE(after(e.launch, "--kt-weight-path"), std::string("/models/q"));
  }

  // Several GPUs: tensor parallel over them, and the note says why SGLang is the better choice.
  void severalGpusSplitTheModel() {
    const Case c = planned("deepseek-v3-0324", "xeon-2s-amx-24gb");
    SglangInputs in;
    in.gpus = 4;
    in.download_folder = "/models/ds";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    QCOMPARE(after(e.launch, "--tensor-parallel-size"), std::string("4"));
    QVERIFY(!has(e.launch, "--trust-remote-code"));  // SGLang has DeepSeek-V3's code
    QCOMPARE(after(e.convert, "--input-type"), std::string("fp8"));
    bool said = false;
    for (const std::string& n : e.notes) said |= n.find("4 GPUs") != std::string::npos;
    QVERIFY(said);
  }

  // Kimi-K2's tokenizer is code of its own; SGLang parses its tool calls by name.
  void kimiNeedsItsOwnCode() {
    const Case c = planned("kimi-k2-instruct", "xeon-2s-amx-24gb");
    SglangInputs in;
    in.download_folder = "/m/Kimi-K2-Instruct";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    QVERIFY(has(e.launch, "--trust-remote-code"));
    QCOMPARE(after(e.launch, "--tool-call-parser"), std::string("kimi_k2"));
  }

  // Without AMX the same method names, and the build switches kt-kernel needs.
  void withoutAmxSaysHowToBuild() {
    const Case c = planned("qwen3-30b-a3b", "ryzen-avx512-16gb");
    SglangInputs in;
    in.download_folder = "/m";
    const SglangExport e = export_sglang(c.model, c.plan, in);
    check_flags(e);
    bool said = false;
    for (const std::string& n : e.notes)
      said |= n.find("CPUINFER_ENABLE_AMX=OFF") != std::string::npos;
    QVERIFY(said);
  }

  void refusesWhatCannotBeHandedOver() {
    const Case oss = planned("gpt-oss-20b", "xeon-2s-amx-24gb");
    SglangInputs in;
    in.download_folder = "/m";
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, export_sglang(oss.model, oss.plan, in));
    const Case q = planned("qwen3-30b-a3b", "xeon-2s-amx-24gb");
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, export_sglang(q.model, q.plan, {}));
  }

  void quotesWhatTheShellWouldSplit() {
    const Case c = planned("qwen3-30b-a3b", "xeon-2s-amx-24gb");
    SglangInputs in;
    in.download_folder = "/my models/it's here";
    const std::string script = sglang_script(export_sglang(c.model, c.plan, in));
    QVERIFY2(script.find("'/my models/it'\\''s here'") != std::string::npos, script.c_str());
  }
};

QTEST_GUILESS_MAIN(TestSglangExport)
#include "tst_sglang_export.moc"
