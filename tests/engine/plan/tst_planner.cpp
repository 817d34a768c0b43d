// The planner on recorded machines and real model configurations: parameter counts and
// byte totals against hand-computed values, verdicts, and the rule that a plan that fits
// never uses more memory than it has.
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <QTemporaryDir>

#include "engine/backend/cpu/kv_cache.h"
#include "engine/hw/report_json.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_spec.h"
#include "engine/plan/catalog.h"
#include "engine/plan/gguf_shape.h"
#include "engine/plan/memory_planner.h"
#include "engine/plan/planned_format.h"
#include "engine/plan/run_profile.h"
#include "engine/schedule/hybrid_options.h"
#include "tests/support/gguf_bytes.h"

using namespace tandem;
using namespace tandem::plan;

namespace {

hw::HardwareReport machine(const std::string& name) {
  std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hardware/" + name + ".json");
  return hardware_from_json(nlohmann::json::parse(in));
}

ModelShape shape(const std::string& id) {
  const CatalogEntry* e = find_catalog_entry(id);
  if (e == nullptr) throw std::runtime_error("no catalog entry " + id);
  return model_shape_from_config(e->config, id);
}

std::uint64_t line(const std::vector<MemoryLine>& lines, const std::string& category) {
  for (const MemoryLine& l : lines) {
    if (l.category == category) return l.bytes;
  }
  return ~0ull;
}

constexpr std::uint64_t GiB = 1ull << 30;

// Every parameter the engine bound, counted from its weights.
std::int64_t bound_params(const model::ModelWeights& w, bool tied) {
  std::int64_t n = 0;
  const auto m = [&](const kernels::WeightMatrix& x) { n += x.rows * x.cols; };
  const auto v = [&](const std::vector<float>& x) { n += static_cast<std::int64_t>(x.size()); };
  const auto ffn = [&](const model::FeedForwardWeights& f) {
    m(f.gate), m(f.up), m(f.down), v(f.gate_bias), v(f.up_bias), v(f.down_bias);
  };
  m(w.embedding);
  if (!tied) m(w.output);
  v(w.final_norm);
  for (const model::LayerWeights& l : w.layers) {
    v(l.attention_norm), v(l.ffn_norm);
    const model::AttentionWeights& a = l.attention;
    for (const auto* x : {&a.q, &a.q_gate, &a.k, &a.v, &a.o, &a.q_a, &a.q_b, &a.kv_a, &a.kv_b})
      m(*x);
    for (const auto* x : {&a.q_norm, &a.k_norm, &a.q_bias, &a.k_bias, &a.v_bias, &a.o_bias,
                          &a.sinks, &a.q_a_norm, &a.kv_a_norm})
      v(*x);
    const model::LinearAttentionWeights& la = l.linear_attention;
    m(la.in_qkvz), m(la.in_ba), m(la.out), v(la.conv), v(la.a_log), v(la.dt_bias), v(la.norm);
    if (l.moe) {
      m(l.experts.router), v(l.experts.router_bias), v(l.experts.score_bias);
      m(l.experts.shared_gate);
      for (const auto& e : l.experts.experts) ffn(e);
      if (l.experts.shared) ffn(*l.experts.shared);
    } else {
      ffn(l.dense);
    }
  }
  return n;
}

}  // namespace

class TestPlanner : public QObject {
  Q_OBJECT
 private slots:
  // Qwen3-30B-A3B, by hand: hidden 2048, 32 query heads and 4 KV heads of 128, 48 layers,
  // 128 experts of intermediate 768, vocabulary 151936.
  // A config saved by transformers 5 plans as its transformers 4 twin does.
  void bothTransformersSpellings() {
    for (const char* f : {"qwen3-moe", "mixtral", "deepseek-v3", "qwen3", "llama"}) {
      const auto read = [](const std::string& folder) {
        std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/models/" + folder + "/config.json");
        return nlohmann::json::parse(in);
      };
      const ModelShape a = model_shape_from_config(read(f), f);
      const ModelShape b = model_shape_from_config(read(std::string(f) + "-tf5"), f);
      QCOMPARE(b.experts, a.experts);
      QCOMPARE(b.moe_layers, a.moe_layers);
      QCOMPARE(b.total_params(), a.total_params());
      QCOMPARE(b.kv_elements_per_token, a.kv_elements_per_token);
    }
  }

  void qwen3_30b_shape() {
    const ModelShape s = shape("qwen3-30b-a3b");
    QCOMPARE(s.embedding_params, std::int64_t{151936} * 2048);
    QCOMPARE(s.output_params, std::int64_t{151936} * 2048);
    const std::int64_t attention_layer =
        2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 2 * 2048;
    QCOMPARE(s.attention_params, attention_layer * 48);
    QCOMPARE(s.expert_params, std::int64_t{3} * 2048 * 768);
    QCOMPARE(s.routed_expert_params(), std::int64_t{3} * 2048 * 768 * 128 * 48);
    QCOMPARE(s.router_params, std::int64_t{128} * 2048 * 48);
    QCOMPARE(s.kv_elements_per_token, std::int64_t{48} * 2 * 4 * 128);
    QCOMPARE(s.moe_layers, std::int64_t{48});
  }

  // DeepSeek-V3 multi-head latent attention, by hand, and its cache of 576 values per layer.
  void deepseek_v3_shape() {
    const ModelShape s = shape("deepseek-v3-0324");
    const std::int64_t h = 7168, q_lora = 1536, kv_lora = 512, heads = 128;
    const std::int64_t mla = h * q_lora + q_lora + q_lora * heads * 192 + h * (kv_lora + 64) +
                             kv_lora + kv_lora * heads * 256 + heads * 128 * h + 2 * h;
    QCOMPARE(s.attention_params, mla * 61);
    QCOMPARE(s.kv_elements_per_token, std::int64_t{61} * 576);
    QCOMPARE(s.moe_layers, std::int64_t{58});
    QCOMPARE(s.dense_ffn_params, std::int64_t{3} * 3 * 7168 * 18432);
    QCOMPARE(s.shared_expert_params, std::int64_t{58} * 3 * 7168 * 2048);
    QVERIFY(s.mla);
  }

  // Totals land on the published sizes.
  void published_totals_data() {
    QTest::addColumn<QString>("id");
    QTest::addColumn<double>("billions");
    QTest::newRow("Qwen3-30B-A3B") << "qwen3-30b-a3b" << 30.5;
    QTest::newRow("Qwen3-235B-A22B") << "qwen3-235b-a22b-instruct-2507" << 235.0;
    QTest::newRow("DeepSeek-V3") << "deepseek-v3-0324" << 671.0;
    QTest::newRow("GLM-4.5-Air") << "glm-4.5-air" << 106.0;
    QTest::newRow("GLM-4.5") << "glm-4.5" << 355.0;
    QTest::newRow("Kimi-K2") << "kimi-k2-instruct" << 1030.0;
  }
  void published_totals() {
    QFETCH(QString, id);
    QFETCH(double, billions);
    const double total = static_cast<double>(shape(id.toStdString()).total_params()) / 1e9;
    QVERIFY2(std::abs(total - billions) / billions < 0.02, qPrintable(QString::number(total)));
  }

  // The AVX2 laptop (26 GiB available, no GPU) and Qwen3-30B-A3B: INT8 does not fit, INT4
  // with INT8 downs does beside an 8-bit KV cache (which costs less accuracy than INT4's
  // downs would); every byte counted by hand.
  void laptop_qwen3_30b() {
    const hw::HardwareReport hw = machine("laptop-avx2");
    const ModelShape s = shape("qwen3-30b-a3b");
    const Plan p = make_plan(hw, s, {8192, Quality::Balanced, {}});
    QCOMPARE(p.verdict, Verdict::FitsWithChanges);
    QVERIFY(!p.uses_gpu);
    // INT8's experts do not fit; INT4's with INT8 downs do.
    QCOMPARE(p.cpu_format, WeightFormat::Int4Down8);
    QCOMPARE(p.ram_budget,
             26 * GiB - (32 * GiB) / 20);       // a twentieth of the RAM is left to the system
    const double int4 = (4.0 + 32.0 / 32) / 8;  // 4 bits, and an FP16 scale and offset per 32
    const double int8 = (8.0 + 16.0 / 32) / 8;  // 8 bits, and an FP16 scale per 32
    QCOMPARE(line(p.ram, "routed experts (CPU)"),
             static_cast<std::uint64_t>(std::llround(2048.0 * 768 * 128 * 48 * (2 * int4 + int8))));
    QCOMPARE(line(p.ram, "embeddings"), std::uint64_t{151936} * 2048 * 2);
    QVERIFY(p.kv_cache_int8);
    QCOMPARE(line(p.ram, "KV cache"),
             // 8 bits, a float per 32 of a key and one per value row of 128
             std::uint64_t{8192} * 48 * 4 * ((128 + 4 * 4) + (128 + 4)));
    QCOMPARE(static_cast<int>(p.changes.size()), 2);
    QCOMPARE(p.cpu_format_changes, 1);
    QCOMPARE(line(p.ram, "runtime overhead"), GiB);
    QVERIFY(p.ram_total() <= p.ram_budget);
    QCOMPARE(p.vram_total(), std::uint64_t{0});
  }

  // The 2-socket Xeon with AMX and a 24 GB GPU runs DeepSeek-V3 with INT4 experts (their
  // downs INT8) on the CPU and INT8 attention on the GPU, two thread pools.
  void xeon_deepseek_v3() {
    const Plan p = make_plan(machine("xeon-2s-amx-24gb"), shape("deepseek-v3-0324"),
                             {8192, Quality::Balanced, {}});
    QCOMPARE(p.verdict, Verdict::FitsWithChanges);
    QVERIFY(p.uses_gpu);
    QCOMPARE(p.gpu_format, WeightFormat::Int8);
    QCOMPARE(p.cpu_format, WeightFormat::Int4Down8);
    QCOMPARE(line(p.vram, "KV cache"), std::uint64_t{8192} * 61 * 576 * 4);  // fp32 on the GPU
    QVERIFY(p.vram_total() <= p.vram_budget);
    QVERIFY(p.ram_total() <= p.ram_budget);
    QVERIFY(p.gpu_experts_per_layer >= 1);
    std::map<std::string, std::string> params;
    for (const Parameter& x : p.parameters) params[x.name] = x.value;
    QCOMPARE(params["kt-method"], std::string("AMXINT4DOWN8"));
    QCOMPARE(params["cpuinfer"], std::string("112"));
    QCOMPARE(params["threadpool-count"], std::string("2"));
    QCOMPARE(params["num-gpu-experts"], std::to_string(p.gpu_experts_per_layer));
  }

  // A format the user chose is planned as chosen: smaller than the plan's own, and larger
  // even when it does not fit (the verdict says so instead of quietly shrinking it).
  void aChosenFormatIsKept() {
    PlanWishes wishes{8192, Quality::Balanced, {}};
    wishes.cpu_format = WeightFormat::Int4;
    const Plan small = make_plan(machine("ryzen-avx512-16gb"), shape("qwen3-30b-a3b"), wishes);
    QCOMPARE(small.cpu_format, WeightFormat::Int4);
    wishes.cpu_format = WeightFormat::Bf16;
    const Plan big =
        make_plan(machine("laptop-avx2"), shape("qwen3-235b-a22b-instruct-2507"), wishes);
    QCOMPARE(big.cpu_format, WeightFormat::Bf16);
    QCOMPARE(big.verdict, Verdict::DoesNotFit);
    wishes.cpu_format.reset();
    QVERIFY(make_plan(machine("laptop-avx2"), shape("qwen3-235b-a22b-instruct-2507"), wishes)
                .cpu_format != WeightFormat::Bf16);
  }

  // The Ryzen with 16 GB: Qwen3-30B-A3B fits as asked, with experts on the GPU.
  void ryzen_qwen3_30b() {
    const Plan p = make_plan(machine("ryzen-avx512-16gb"), shape("qwen3-30b-a3b"),
                             {8192, Quality::Balanced, "qwen3-stats.json"});
    QCOMPARE(p.verdict, Verdict::Fits);
    QCOMPARE(p.gpu_format, WeightFormat::Bf16);
    QCOMPARE(p.cpu_format, WeightFormat::Int8);
    QVERIFY(p.gpu_experts_per_layer > 0 && p.gpu_experts_per_layer < 128);
    // Whatever is not on the GPU is in RAM.
    // INT8: a byte a weight and an FP16 scale per 32.
    QCOMPARE(line(p.ram, "routed experts (CPU)"),
             std::uint64_t(128 - p.gpu_experts_per_layer) * 48 * 3 * 2048 * 768 * 17 / 16);
    QCOMPARE(line(p.vram, "routed experts (GPU)"),
             std::uint64_t(p.gpu_experts_per_layer) * 48 * 3 * 2048 * 768 * 2);
    std::map<std::string, std::string> params;
    for (const Parameter& x : p.parameters) params[x.name] = x.value;
    QCOMPARE(params["expert-placement-strategy"], std::string("frequency"));
    QCOMPARE(params["expert-stats"], std::string("qwen3-stats.json"));
    QCOMPARE(params["enable-dynamic-expert-update"], std::string("true"));
    QCOMPARE(params["accelerator"], std::string("auto"));
    // N is what the hybrid engine places with the same memory: the code is shared. Copying
    // a layer's 128 experts for every prompt chunk does not pay here
    // (layerwisePrefillWherePays), so no staging is reserved.
    const std::uint64_t expert = std::uint64_t{3} * 2048 * 768 * 2;  // BF16 on the GPU
    QCOMPARE(line(p.vram, "layerwise prefill staging"), ~0ull);
    const std::uint64_t fixed = p.vram_total() - line(p.vram, "routed experts (GPU)");
    QCOMPARE(p.gpu_experts_per_layer,
             tandem::schedule::experts_that_fit(p.vram_budget - fixed, expert, 128, 48, false,
                                                tandem::schedule::PlacementStrategy::Frequency));
    QCOMPARE(params["gpu-prefill-token-threshold"], std::string("0"));
  }

  // Layerwise prefill copies each layer's experts to the GPU again for every 512-token chunk
  // of a prompt, at the bus's speed but no faster than the host widens them to BF16 (1.1 GB/s
  // measured): for Qwen3-30B-A3B on 16 cores that pays only from thousands of tokens, so it
  // stays off and the reason says from where. A bus slower than the widening, as measured at
  // the first start, moves that point in proportion. A model of few experts on one core pays
  // within a chunk, and the threshold is then that point.
  void layerwisePrefillWherePays() {
    const auto threshold = [](const Plan& p) {
      for (const Parameter& x : p.parameters)
        if (x.name == "gpu-prefill-token-threshold")
          return std::pair{std::stoll(x.value), x.reason};
      return std::pair{-1LL, std::string()};
    };
    const auto pays_from = [](const std::string& reason) {
      const std::string marker = "pays only from ";
      const std::size_t at = reason.find(marker);
      return at == std::string::npos ? -1LL : std::stoll(reason.substr(at + marker.size()));
    };
    tandem::hw::HardwareReport hw = machine("ryzen-avx512-16gb");
    const PlanWishes wishes{8192, Quality::Balanced, "qwen3-stats.json"};
    const auto [fast, fast_reason] = threshold(make_plan(hw, shape("qwen3-30b-a3b"), wishes));
    QCOMPARE(fast, 0LL);
    QVERIFY2(fast_reason.find("as fast as the host widens them to BF16") != std::string::npos,
             fast_reason.c_str());
    QVERIFY2(pays_from(fast_reason) > 512, fast_reason.c_str());
    QVERIFY(!hw.gpus.devices.empty());
    for (auto& d : hw.gpus.devices) d.host_to_device_bytes_per_s = 0.22e9;  // 1.1 GB/s / 5
    const auto [slow, slow_reason] = threshold(make_plan(hw, shape("qwen3-30b-a3b"), wishes));
    QCOMPARE(slow, 0LL);
    QVERIFY2(slow_reason.find("0.2 GB/s, the bus measured") != std::string::npos,
             slow_reason.c_str());
    const long long a = pays_from(fast_reason), b = pays_from(slow_reason);
    QVERIFY2(b >= 5 * a - 5 && b <= 5 * a + 5,
             qPrintable(QStringLiteral("%1 against %2").arg(b).arg(a)));
    // What `tandem detect --json` writes is read back with the measurement.
    const tandem::hw::HardwareReport again = hardware_from_json(tandem::hw::to_json(hw));
    QCOMPARE(again.gpus.devices.front().host_to_device_bytes_per_s, 0.22e9);

    // AMX tiles ran a prompt's experts only 1.07x as fast as AVX-512 end to end on a 16-core
    // Xeon (docs/benchmarks.md, "The hybrid engine on an NVIDIA H200"), so the planner counts
    // its CPU as about as fast either way: the same Xeon without AMX pays from nearly the same
    // prompt length, not from four times as many tokens.
    tandem::hw::HardwareReport amx = machine("xeon-2s-amx-24gb");
    QCOMPARE(kernels::best_variant(amx.isa.usable), kernels::CpuVariant::Amx);
    const long long with_amx =
        pays_from(threshold(make_plan(amx, shape("qwen3-30b-a3b"), wishes)).second);
    amx.isa.usable.amx_tile = amx.isa.usable.amx_int8 = amx.isa.usable.amx_bf16 = false;
    QCOMPARE(kernels::best_variant(amx.isa.usable), kernels::CpuVariant::Avx512);
    const long long without =
        pays_from(threshold(make_plan(amx, shape("qwen3-30b-a3b"), wishes)).second);
    QVERIFY2(
        without > 0 && with_amx >= without && with_amx <= without * 5 / 4,
        qPrintable(QStringLiteral("%1 with AMX against %2 without").arg(with_amx).arg(without)));

    // Eight experts a layer on one core: copying pays from a few hundred tokens.
    ModelShape few = shape("qwen3-30b-a3b");
    few.experts = 8;
    tandem::hw::HardwareReport one_core = machine("ryzen-avx512-16gb");
    one_core.topology.physical_cores = 1;
    const Plan p = make_plan(one_core, few, {8192, Quality::Balanced, ""});
    const auto [on, on_reason] = threshold(p);
    QVERIFY2(on > 0 && on <= 512, on_reason.c_str());
    QVERIFY2(on_reason.find("above " + std::to_string(on) + " prompt tokens") != std::string::npos,
             on_reason.c_str());
  }

  // A report written before BMI2 was listed still plans the AVX-512 kernels its CPU runs:
  // every CPU with AVX2 has BMI2. One that lists it as absent is taken at its word.
  void reportsWithoutBmi2() {
    std::ifstream in(std::string(TANDEM_TEST_DATA_DIR) + "/hardware/ryzen-avx512-16gb.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["cpu"]["features"].erase("bmi2");
    j["cpu"]["cpuid_features"].erase("bmi2");
    const hw::HardwareReport old = hardware_from_json(j);
    QVERIFY(old.isa.usable.bmi2);
    QCOMPARE(kernels::best_variant(old.isa.usable), kernels::CpuVariant::Avx512);
    j["cpu"]["features"]["bmi2"] = false;
    QCOMPARE(kernels::best_variant(hardware_from_json(j).isa.usable), kernels::CpuVariant::Avx2);
  }

  // A prompt token's scratch on the CPU for Qwen3-30B-A3B, counted by hand: the runner's
  // rows in fp32 (four of the hidden 2048, the query and attended rows of 32 x 128, the keys
  // and values of 4 x 128 each, the router's 128 logits and 8 choices with their weights, and
  // six more of the hidden for the experts' outputs and their host copies); the widest
  // product input (attention's 4096) and the attention kernel's copy of the queries, two bytes
  // an element each; and for each of its 8 experts the gate, up (768) and down (2048) rows in
  // fp32 beside the input and hidden in 8 bits with a scale per 32, with the token's own input
  // once.
  void cpu_scratch_per_token() {
    const ModelShape s = shape("qwen3-30b-a3b");
    QCOMPARE(s.attention_width, std::int64_t{32} * 128);
    const std::uint64_t rows = 4ull * (4 * 2048 + 2 * 4096 + 2 * 512 + 128 + 2 * 8 + 6 * 2048);
    const std::uint64_t inputs = 2ull * 4096 + 2 * 4096;
    const std::uint64_t experts = 8ull * (4 * (2 * 768 + 2048) + (2048 + 768) * 9 / 8);
    QCOMPARE(cpu_scratch_bytes_per_token(s), rows + inputs + experts + 2048 * 9 / 8);
    // Measured (2 threads, the Qwen3-30B-A3B-shaped synthetic): the resident memory grows
    // by 267-273 KB a token from passes of 512 to passes of 2048.
    QVERIFY(cpu_scratch_bytes_per_token(s) > 273'000);
    QVERIFY(cpu_scratch_bytes_per_token(s) < 290'000);
    // DeepSeek-V3: the rows of the hidden 7168, the query and attended rows of 128 x 192, the
    // low-rank query (1536) and the latent with its rotary key (576), the dense gate and up
    // (18432), 16 heads' latent queries and weighed latents (576 + 512), the router's 256 and
    // 8 x 2, six more of the hidden; the widest input (attention's 24576) and the latent
    // queries' copy; and 8 experts of 2048.
    const ModelShape ds = shape("deepseek-v3-0324");
    QCOMPARE(ds.attention_extra_width, std::int64_t{1536});
    const std::uint64_t ds_rows = 4ull * (4 * 7168 + 2 * 24576 + 1536 + 576 + 2 * 18432 +
                                          16 * (576 + 512) + 256 + 2 * 8 + 6 * 7168);
    const std::uint64_t ds_inputs = 2ull * 24576 + 2 * 16 * 576;
    const std::uint64_t ds_experts = 8ull * (4 * (2 * 2048 + 7168) + (7168 + 2048) * 9 / 8);
    QCOMPARE(cpu_scratch_bytes_per_token(ds), ds_rows + ds_inputs + ds_experts + 7168 * 9 / 8);
    QCOMPARE(cpu_scratch_bytes(s, 2048), 2048 * cpu_scratch_bytes_per_token(s) + (256ull << 20));
    // Qwen3-Next's attention has more rows: the gate beside its 16 queries of 256, and the
    // gated DeltaNet's q, k (16 heads of 128 each), v and z (32 of 128 each), b and a (32).
    const ModelShape next = shape("qwen3-next-80b-a3b-instruct");
    QCOMPARE(next.attention_extra_width, std::int64_t{16 * 256 + 2 * 16 * 128 + 2 * 32 * 128 + 64});
    ModelShape without = next;
    without.attention_extra_width = 0;
    QCOMPARE(cpu_scratch_bytes_per_token(next) - cpu_scratch_bytes_per_token(without),
             std::uint64_t{4} * next.attention_extra_width);
  }

  // Without a GPU a model with routed experts takes prompts in passes of 2048 tokens where
  // RAM holds their scratch besides what the plan would keep with passes of 512; where it
  // does not (the laptop, whose plan fills its RAM), 512, with the reason. With a GPU, and
  // for a model without routed experts, 512.
  void prefill_chunk() {
    const auto chunk = [](const Plan& p) {
      for (const Parameter& x : p.parameters)
        if (x.name == "prefill-chunk") return std::make_pair(x.value, x.reason);
      return std::make_pair(std::string(), std::string());
    };
    const ModelShape moe = shape("qwen3-30b-a3b");
    hw::HardwareReport roomy = machine("ryzen-avx512-16gb");
    roomy.gpus.devices.clear();
    const Plan wide = make_plan(roomy, moe, {8192, Quality::Balanced, {}});
    QCOMPARE(chunk(wide).first, std::string("2048"));
    QCOMPARE(wide.prefill_chunk_tokens, std::int64_t{2048});
    QCOMPARE(to_json(wide)["prefill_chunk"].get<std::int64_t>(), std::int64_t{2048});
    QCOMPARE(line(wide.ram, "activations and scratch"), cpu_scratch_bytes(moe, 2048));
    const Plan laptop = make_plan(machine("laptop-avx2"), moe, {8192, Quality::Balanced, {}});
    QCOMPARE(chunk(laptop).first, std::string("512"));
    QVERIFY2(chunk(laptop).second.find("would not leave room") != std::string::npos,
             chunk(laptop).second.c_str());
    QCOMPARE(line(laptop.ram, "activations and scratch"), cpu_scratch_bytes(moe, 512));
    QCOMPARE(laptop.cpu_format, WeightFormat::Int4Down8);  // not INT4 for faster prompts
    // Half a gigabyte more holds the longer passes' scratch, or the BF16 cache: the cache,
    // which keeps the attention closer to the model's, wins. A gigabyte holds both.
    const std::uint64_t more = cpu_scratch_bytes(moe, 2048) - cpu_scratch_bytes(moe, 512);
    hw::HardwareReport edge = machine("laptop-avx2");
    edge.memory.available_bytes += 500'000'000;
    QVERIFY(500'000'000 > more);
    const Plan either = make_plan(edge, moe, {8192, Quality::Balanced, {}});
    QVERIFY(!either.kv_cache_int8);
    QCOMPARE(chunk(either).first, std::string("512"));
    edge.memory.available_bytes += 500'000'000;
    const Plan both = make_plan(edge, moe, {8192, Quality::Balanced, {}});
    QVERIFY(!both.kv_cache_int8);
    QCOMPARE(chunk(both).first, std::string("2048"));
    QCOMPARE(both.cpu_format, WeightFormat::Int4Down8);
    QVERIFY(both.ram_total() <= both.ram_budget);
    QVERIFY2(chunk(both).second.find("0.4 GiB more scratch") != std::string::npos,
             chunk(both).second.c_str());
    const Plan gpu = make_plan(machine("ryzen-avx512-16gb"), moe, {8192, Quality::Balanced, {}});
    QVERIFY(gpu.uses_gpu);
    QCOMPARE(chunk(gpu).first, std::string("512"));
    nlohmann::json config = find_catalog_entry("qwen3-30b-a3b")->config;
    config["architectures"] = {"Qwen3ForCausalLM"};
    config.erase("num_experts");
    const Plan dense =
        make_plan(roomy, model_shape_from_config(config, "dense"), {8192, Quality::Balanced, {}});
    QCOMPARE(dense.cpu_format, WeightFormat::Int8);
    QCOMPARE(chunk(dense).first, std::string("512"));
  }

  // CPU only: INT4 experts keep INT8 dense matrices, as the runtime packs them, and no
  // second copy in oneDNN's layout (the runtime uses oneDNN only when asked).
  void cpu_only_dense_matrices() {
    const ModelShape s = shape("qwen3-30b-a3b");
    const std::uint64_t attention = std::uint64_t{48} * (2048 * 4096 * 2 + 2048 * 512 * 2);
    const std::uint64_t head = std::uint64_t{151936} * 2048 * 17 / 16;  // INT8
    hw::HardwareReport avx512 = machine("ryzen-avx512-16gb");
    avx512.gpus.devices.clear();
    const Plan p = make_plan(avx512, s, {8192, Quality::Balanced, {}});
    QVERIFY(!p.uses_gpu);
    QCOMPARE(line(p.ram, "output head"), head);  // INT8 whatever the experts' format
    QVERIFY(line(p.ram, "attention and dense weights") >= attention);
    QCOMPARE(line(p.ram, "dense weights in oneDNN's layout (prompts)"), ~0ull);
    const Plan laptop = make_plan(machine("laptop-avx2"), s, {8192, Quality::Balanced, {}});
    QCOMPARE(laptop.cpu_format, WeightFormat::Int4Down8);
    QCOMPARE(line(laptop.ram, "output head"), head);
  }

  // Without a GPU, the KV cache goes to 8 bits where RAM would not hold BF16's at the context
  // asked (before the experts shrink or the context does: it costs the least accuracy), and
  // back to BF16 where smaller experts leave room for it; at Quality::Speed on a CPU with
  // AVX-512 VNNI, or with AVX2 alone, it is 8 bits for speed (at Qwen3-30B-A3B's whole 40960
  // positions). Heads the 8-bit
  // cache does not take keep BF16 and the context shortens instead. The profile's kv-cache says
  // which, with its reason.
  void kvCacheIn8BitsWhereRamIsShort() {
    const ModelShape s = shape("qwen3-30b-a3b");
    QCOMPARE(s.kv_key_width, 128);
    QCOMPARE(s.kv_value_width, 128);
    hw::HardwareReport hw = machine("ryzen-avx512-16gb");
    hw.gpus.devices.clear();
    hw.memory.total_bytes = 128 * GiB;
    hw.memory.available_bytes = 120 * GiB;
    const auto params = [](const Plan& p) {
      std::map<std::string, std::string> out;
      for (const Parameter& x : p.parameters) out[x.name] = x.value;
      return out;
    };
    PlanWishes wishes{40960, Quality::Balanced, {}};
    const std::uint64_t elements = std::uint64_t{40960} * 48 * 2 * 4 * 128;
    const Plan roomy = make_plan(hw, s, wishes);
    QCOMPARE(roomy.verdict, Verdict::Fits);
    QVERIFY(!roomy.kv_cache_int8);
    QCOMPARE(line(roomy.ram, "KV cache"), elements * 2);
    QCOMPARE(params(roomy)["kv-cache"], std::string("bf16"));
    QCOMPARE(to_json(roomy)["kv_cache"].get<std::string>(), std::string("bf16"));

    // A budget a third of BF16's cache short: 8 bits (1.125 bytes a key's element, 1.03125 a
    // value's) fit, with the INT8 experts and the whole context kept.
    const std::uint64_t reserve = hw.memory.total_bytes / 20;
    hw.memory.available_bytes = reserve + roomy.ram_total() - elements * 2 / 3;
    const Plan tight = make_plan(hw, s, wishes);
    QCOMPARE(tight.verdict, Verdict::FitsWithChanges);
    QVERIFY(tight.kv_cache_int8);
    QCOMPARE(tight.cpu_format, WeightFormat::Int8);
    QCOMPARE(tight.context_tokens, 40960);
    QCOMPARE(line(tight.ram, "KV cache"), elements / 2 * 9 / 8 + elements / 2 * 33 / 32);
    QVERIFY(tight.ram_total() <= tight.ram_budget);
    QVERIFY2(QString::fromStdString(tight.changes.front()).contains(QLatin1String("8 bits")),
             tight.changes.front().c_str());
    QCOMPARE(tight.cpu_format_changes, 0);  // the cache is a change of its own
    QCOMPARE(params(tight)["kv-cache"], std::string("int8"));
    QCOMPARE(to_json(tight)["kv_cache"].get<std::string>(), std::string("int8"));

    // So short that the experts go to INT4 anyway: then BF16's cache fits again and stays.
    // (INT4 saves 41% of INT8's experts; INT4 with 8-bit downs 27.5%, and 34% with the 8-bit
    // cache: 37% short is past it.)
    hw.memory.available_bytes =
        reserve + roomy.ram_total() - line(roomy.ram, "routed experts (CPU)") * 37 / 100;
    const Plan smaller = make_plan(hw, s, wishes);
    QCOMPARE(smaller.cpu_format, WeightFormat::Int4);
    QVERIFY(!smaller.kv_cache_int8);
    // Its one change is the experts' format (which a list of formats can call "INT4 fits").
    QCOMPARE(smaller.verdict, Verdict::FitsWithChanges);
    QCOMPARE(static_cast<int>(smaller.changes.size()), 1);
    QCOMPARE(smaller.cpu_format_changes, 1);
    QCOMPARE(params(smaller)["kv-cache"], std::string("bf16"));
    QVERIFY(smaller.ram_total() <= smaller.ram_budget);

    // Heads of 80 (not whole 32s): BF16, and (the INT8 experts chosen) the context shortens
    // to fit instead.
    ModelShape odd = s;
    odd.kv_key_width = odd.kv_value_width = 80;
    hw.memory.available_bytes = reserve + roomy.ram_total() - elements * 2 / 3;
    PlanWishes int8_experts = wishes;
    int8_experts.cpu_format = WeightFormat::Int8;
    QVERIFY(make_plan(hw, s, int8_experts).kv_cache_int8);
    const Plan shortened = make_plan(hw, odd, int8_experts);
    QVERIFY(!shortened.kv_cache_int8);
    QVERIFY(shortened.context_tokens < 40960);
    for (const Parameter& x : shortened.parameters)
      if (x.name == "kv-cache")
        QVERIFY2(QString::fromStdString(x.reason).contains(QLatin1String("not 80")),
                 x.reason.c_str());

    // Speed on AVX-512 VNNI: 8 bits though BF16 fits; on the AVX2 laptop too (VPMADDWD); not
    // on an AVX-512 CPU without VNNI (the Portable fp32 kernel), nor with a GPU.
    hw.memory.available_bytes = 120 * GiB;
    const Plan fast = make_plan(hw, s, {40960, Quality::Speed, {}});
    QVERIFY(fast.kv_cache_int8);
    QCOMPARE(fast.verdict, Verdict::Fits);
    const auto kv_reason = [](const Plan& p) {
      for (const Parameter& x : p.parameters)
        if (x.name == "kv-cache") return QString::fromStdString(x.reason);
      return QString();
    };
    QVERIFY2(kv_reason(fast).contains(QLatin1String("faster with AVX-512 VNNI")),
             qPrintable(kv_reason(fast)));
    const Plan avx2 =
        make_plan(machine("laptop-avx2"), shape("qwen3-30b-a3b"), {2048, Quality::Speed, {}});
    QCOMPARE(params(avx2)["kv-cache"], std::string("int8"));
    QVERIFY2(kv_reason(avx2).contains(QLatin1String("faster with AVX2")),
             qPrintable(kv_reason(avx2)));
    QCOMPARE(params(make_plan(machine("laptop-avx2"), shape("qwen3-30b-a3b"),
                              {2048, Quality::Balanced, {}}))["kv-cache"],
             std::string("bf16"));
    hw::HardwareReport no_vnni = hw;
    no_vnni.isa.usable.avx512_vnni = false;
    QVERIFY(!make_plan(no_vnni, s, {40960, Quality::Speed, {}}).kv_cache_int8);
    const Plan hybrid = make_plan(machine("ryzen-avx512-16gb"), s, {8192, Quality::Speed, {}});
    QVERIFY(hybrid.uses_gpu);
    QVERIFY(!hybrid.kv_cache_int8);

    // DeepSeek's latent (512 and the rotary key's 64) is taken.
    const ModelShape mla = shape("deepseek-v3-0324");
    QCOMPARE(mla.kv_key_width, 576);
    QCOMPARE(mla.kv_value_width, 512);
    // The CPU keeps the latent twice: beside the rotary key to score, alone to weigh.
    hw::HardwareReport big = machine("xeon-2s-amx-24gb");
    big.gpus.devices.clear();
    const Plan cpu_mla = make_plan(big, mla, {8192, Quality::Balanced, {}});
    QVERIFY(!cpu_mla.uses_gpu);
    QCOMPARE(line(cpu_mla.ram, "KV cache"),
             std::uint64_t{8192} * 61 * (576 + 512) * (cpu_mla.kv_cache_int8 ? 1 : 2) +
                 (cpu_mla.kv_cache_int8 ? std::uint64_t{8192} * 61 * (576 + 512) / 32 * 4 : 0));
  }

  // The plan's context stays within the positions the model takes: its trained length, or as
  // far as YaRN stretches it (transformers 4's rope_scaling and 5's rope_parameters alike).
  // Asked for more, the plan says so in the parameter's reason; that is not a change made to
  // fit, so the verdict stays.
  // Between INT8 and INT4 the plan tries INT4 with INT8 downs (with routed experts): where
  // INT8's experts do not fit and these do, it keeps them (one change, from the wished
  // format), sized as two thirds INT4 and a third INT8, with the dense matrices INT8; where
  // they do not fit either, INT4. The kt-method names it, and a profile reads it back.
  void int4Down8BetweenInt8AndInt4() {
    const ModelShape s = shape("qwen3-30b-a3b");
    hw::HardwareReport hw = machine("ryzen-avx512-16gb");
    hw.gpus.devices.clear();
    hw.memory.total_bytes = 128 * GiB;
    hw.memory.available_bytes = 120 * GiB;
    const PlanWishes wishes{8192, Quality::Balanced, {}};
    const Plan roomy = make_plan(hw, s, wishes);
    QCOMPARE(roomy.cpu_format, WeightFormat::Int8);
    const std::uint64_t experts8 = line(roomy.ram, "routed experts (CPU)");
    const std::uint64_t reserve = hw.memory.total_bytes / 20;

    // Short by a fifth of INT8's experts: INT4 with INT8 downs (27% smaller) fits.
    hw.memory.available_bytes = reserve + roomy.ram_total() - experts8 / 5;
    const Plan mid = make_plan(hw, s, wishes);
    QCOMPARE(mid.cpu_format, WeightFormat::Int4Down8);
    QCOMPARE(mid.verdict, Verdict::FitsWithChanges);
    QCOMPARE(static_cast<int>(mid.changes.size()), 1);
    QCOMPARE(mid.cpu_format_changes, 1);
    QVERIFY2(mid.changes.front().find("int4-down8 instead of int8") != std::string::npos,
             mid.changes.front().c_str());
    const double bits = (2 * (4.0 + 32.0 / 32) + (8.0 + 16.0 / 32)) / 3;  // 5, 5 and 8.5
    QCOMPARE(line(mid.ram, "routed experts (CPU)"),
             static_cast<std::uint64_t>(
                 std::llround(static_cast<double>(s.routed_expert_params()) * bits / 8)));
    QCOMPARE(line(mid.ram, "output head"), line(roomy.ram, "output head"));  // INT8
    QCOMPARE(line(mid.ram, "attention and dense weights"),
             line(roomy.ram, "attention and dense weights"));
    std::map<std::string, std::string> params;
    for (const Parameter& x : mid.parameters) params[x.name] = x.value;
    QCOMPARE(params["kt-method"], std::string("AVX512INT4DOWN8"));
    QCOMPARE(cpu_format_of_method(params["kt-method"]), std::string("int4-down8"));
    QCOMPARE(to_json(mid)["cpu_format"].get<std::string>(), std::string("int4-down8"));

    // Short by a third: INT4 (41% smaller), still one change.
    hw.memory.available_bytes = reserve + roomy.ram_total() - experts8 / 3;
    const Plan small = make_plan(hw, s, wishes);
    QCOMPARE(small.cpu_format, WeightFormat::Int4);
    QCOMPARE(static_cast<int>(small.changes.size()), 1);
    QVERIFY2(small.changes.front().find("int4 instead of int8") != std::string::npos,
             small.changes.front().c_str());

    // A model without experts goes from INT8 to INT4: its downs are INT8 in both.
    const ModelShape dense = model_shape_from_config(
        nlohmann::json::parse(
            std::ifstream(std::string(TANDEM_TEST_DATA_DIR) + "/models/llama/config.json")),
        "llama");
    hw.memory.available_bytes = 120 * GiB;
    const Plan dense_roomy = make_plan(hw, dense, wishes);
    hw.memory.available_bytes = reserve + dense_roomy.ram_total() - 1;
    const Plan dense_short = make_plan(hw, dense, wishes);
    QVERIFY(dense_short.cpu_format != WeightFormat::Int4Down8);
  }

  // At balanced quality a CPU with AMX takes INT8 rotated, whose prompts its integer tiles
  // multiply (the same bytes as INT8); a CPU without AMX, or one told to use its AVX-512
  // kernels, keeps plain INT8, and so does quality where BF16 does not fit. Short of memory,
  // the rotated experts shrink as INT8's do. A format the user names is kept. The kt-method
  // names the rotated format, and a profile reads it back as that CPU format.
  void int8RotatedWhereAmxTakesIt() {
    const ModelShape s = shape("qwen3-30b-a3b");
    hw::HardwareReport amx = machine("xeon-2s-amx-24gb");
    amx.gpus.devices.clear();
    const PlanWishes balanced{8192, Quality::Balanced, {}};
    const Plan rotated = make_plan(amx, s, balanced);
    QCOMPARE(rotated.verdict, Verdict::Fits);
    QCOMPARE(rotated.cpu_format, WeightFormat::Int8Rotated);
    QCOMPARE(int8_format_for(kernels::CpuVariant::Amx), WeightFormat::Int8Rotated);
    std::map<std::string, std::string> params, reasons;
    for (const Parameter& x : rotated.parameters)
      params[x.name] = x.value, reasons[x.name] = x.reason;
    QCOMPARE(params["kt-method"], std::string("AMXINT8ROTATED"));
    QCOMPARE(cpu_format_of_method(params["kt-method"]), std::string("int8-rotated"));
    model::CpuFormat loaded = model::CpuFormat::Native;
    QVERIFY(model::parse_cpu_format(cpu_format_of_method(params["kt-method"]), loaded));
    QCOMPARE(loaded, model::CpuFormat::Int8Rotated);
    QVERIFY2(reasons["kt-method"].find("integer tiles") != std::string::npos,
             reasons["kt-method"].c_str());
    QCOMPARE(to_json(rotated)["cpu_format"].get<std::string>(), std::string("int8-rotated"));

    // The same memory as INT8 in every line.
    QCOMPARE(bytes_per_param(WeightFormat::Int8Rotated), bytes_per_param(WeightFormat::Int8));
    PlanWishes plain = balanced;
    plain.cpu_format = WeightFormat::Int8;
    const Plan asked = make_plan(amx, s, plain);
    QCOMPARE(asked.cpu_format, WeightFormat::Int8);
    QCOMPARE(asked.ram_total(), rotated.ram_total());
    for (const Parameter& x : asked.parameters)
      if (x.name == "kt-method") QCOMPARE(x.value, std::string("AMXINT8"));

    // Without AMX's integer tiles: plain INT8.
    hw::HardwareReport avx512 = amx;
    avx512.isa.usable.amx_tile = avx512.isa.usable.amx_int8 = avx512.isa.usable.amx_bf16 = false;
    QCOMPARE(kernels::best_variant(avx512.isa.usable), kernels::CpuVariant::Avx512);
    QCOMPARE(make_plan(avx512, s, balanced).cpu_format, WeightFormat::Int8);
    hw::HardwareReport avx2 = machine("laptop-avx2");
    avx2.memory = amx.memory;
    avx2.gpus.devices.clear();
    QCOMPARE(make_plan(avx2, s, balanced).cpu_format, WeightFormat::Int8);

    // Quality where BF16 does not fit: plain INT8, the more exact with AMX.
    const std::uint64_t reserve = amx.memory.total_bytes / 20;
    hw::HardwareReport tight = amx;
    tight.memory.available_bytes = reserve + rotated.ram_total();
    const Plan quality = make_plan(tight, s, {8192, Quality::Quality, {}});
    QCOMPARE(quality.cpu_format, WeightFormat::Int8);
    QCOMPARE(quality.cpu_format_changes, 1);

    // Short of memory: INT4 with INT8 downs instead of the rotated INT8, said so.
    tight.memory.available_bytes =
        reserve + rotated.ram_total() - line(rotated.ram, "routed experts (CPU)") / 5;
    const Plan smaller = make_plan(tight, s, balanced);
    QCOMPARE(smaller.cpu_format, WeightFormat::Int4Down8);
    QCOMPARE(smaller.cpu_format_changes, 1);
    QVERIFY2(
        smaller.changes.front().find("int4-down8 instead of int8-rotated") != std::string::npos,
        smaller.changes.front().c_str());
  }

  // A Hugging Face folder that nothing gave a CPU format runs in its plan's: INT8, rotated
  // with AMX, with the kt-method and its reason. A converted folder and a GGUF file carry their
  // own formats, and a folder without config.json is no model to plan; a damaged config.json
  // is a sentence.
  void plannedFormatOfAFolderNothingFormats() {
    const std::string folder = std::string(TANDEM_TEST_DATA_DIR) + "/models/qwen3-moe";
    const auto avx512 = planned_cpu_format(machine("ryzen-avx512-16gb"), folder);
    QVERIFY(avx512);
    QCOMPARE(avx512->format, model::CpuFormat::Int8);
    QVERIFY2(avx512->reason.rfind("AVX512INT8: int8 experts", 0) == 0, avx512->reason.c_str());
    hw::HardwareReport amx = machine("xeon-2s-amx-24gb");
    const auto rotated = planned_cpu_format(amx, folder, 256);
    QVERIFY(rotated);
    QCOMPARE(rotated->format, model::CpuFormat::Int8Rotated);
    QVERIFY2(rotated->reason.rfind("AMXINT8ROTATED: ", 0) == 0, rotated->reason.c_str());
    QVERIFY(avx512->fits && rotated->fits);
    // Where not even INT4 fits, the plan says so: packing could only run out of memory.
    hw::HardwareReport small = machine("laptop-avx2");
    small.gpus.devices.clear();
    small.memory.total_bytes = small.memory.available_bytes = GiB;
    const auto none = planned_cpu_format(small, folder);
    QVERIFY(none);
    QVERIFY(!none->fits);
    QVERIFY2(none->reason.find("needs") != std::string::npos, none->reason.c_str());

    QVERIFY(!planned_cpu_format(
        amx, std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-q8_0.gguf"));
    QTemporaryDir dir;
    const std::string converted = dir.path().toStdString() + "/converted";
    std::filesystem::create_directories(converted);
    std::filesystem::copy_file(folder + "/config.json", converted + "/config.json");
    QVERIFY(planned_cpu_format(amx, converted));  // a model folder, until it is converted
    std::ofstream(converted + "/" + model::kManifestName) << "{}";
    QVERIFY(!planned_cpu_format(amx, converted));
    QVERIFY(!planned_cpu_format(amx, dir.path().toStdString()));  // no config.json
    const std::string damaged = dir.path().toStdString() + "/damaged";
    std::filesystem::create_directories(damaged);
    std::ofstream(damaged + "/config.json") << "{\"architectures\": [";
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, planned_cpu_format(amx, damaged));
  }

  void contextStaysWithinThePositionsTheModelTakes() {
    const ModelShape qwen = shape("qwen3-30b-a3b");
    QCOMPARE(qwen.max_positions, 40960);
    QCOMPARE(shape("deepseek-v3-0324").max_positions, 163840);  // 40 x 4096 by YaRN
    hw::HardwareReport big = machine("xeon-2s-amx-24gb");
    big.gpus.devices.clear();
    const Plan asked = make_plan(big, qwen, {65536, Quality::Balanced, {}, {}, true});
    QCOMPARE(asked.context_tokens, 40960);
    QCOMPARE(asked.max_positions, 40960);
    QCOMPARE(asked.verdict, Verdict::Fits);
    QCOMPARE(to_json(asked)["max_positions"].get<int>(), 40960);
    for (const Parameter& x : asked.parameters)
      if (x.name == "context-length")
        QCOMPARE(x.reason, std::string("the most this model takes (65536 asked)"));
    QCOMPARE(make_plan(big, qwen, {32768, Quality::Balanced, {}, {}, true}).context_tokens, 32768);

    const CatalogEntry* entry = find_catalog_entry("qwen3-30b-a3b");
    nlohmann::json yarn = entry->config;
    yarn["rope_scaling"] = {
        {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
    QCOMPARE(model_shape_from_config(yarn, "yarn").max_positions, 131072);
    nlohmann::json v5 = entry->config;
    v5.erase("rope_scaling");
    v5["rope_parameters"] = {{"rope_type", "yarn"},
                             {"factor", 2.0},
                             {"original_max_position_embeddings", 32768},
                             {"rope_theta", 1000000.0}};
    QCOMPARE(model_shape_from_config(v5, "v5").max_positions, 65536);
    v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    QCOMPARE(model_shape_from_config(v5, "v5").max_positions, 40960);
    nlohmann::json unsaid = entry->config;
    unsaid.erase("max_position_embeddings");
    QCOMPARE(model_shape_from_config(unsaid, "unsaid").max_positions, 0);
    QCOMPARE(make_plan(big, model_shape_from_config(unsaid, "unsaid"),
                       {65536, Quality::Balanced, {}, {}, true})
                 .context_tokens,
             65536);
  }

  void kimi_does_not_fit_on_a_laptop() {
    const Plan p =
        make_plan(machine("laptop-avx2"), shape("kimi-k2-instruct"), {8192, Quality::Balanced, {}});
    QCOMPARE(p.verdict, Verdict::DoesNotFit);
    QVERIFY(QString::fromStdString(p.verdict_reason).contains(QLatin1String("of RAM")));
  }

  // Every machine x catalog model x quality: a plan that fits stays inside its memory, and
  // every parameter the seeds name is there with a reason.
  // The planner's parameter counts from config.json alone, for every family the engine
  // runs, against what the engine binds from the fixture's weights (each saved by
  // transformers 4 and 5): only the small vectors the planner leaves out may differ (the
  // final norm, DeepSeek's low-rank norms, GLM's correction bias).
  void plannerKnowsEveryFamily_data() {
    QTest::addColumn<QString>("fixture");
    for (const char* f : {"qwen3-moe", "mixtral", "deepseek-v3", "qwen3", "llama", "glm4-moe",
                          "gpt-oss", "qwen3-next", "qwen3-moe-tf5", "mixtral-tf5",
                          "deepseek-v3-tf5", "glm4-moe-tf5", "gpt-oss-tf5", "qwen3-next-tf5"})
      QTest::newRow(f) << QString::fromLatin1(f);
  }
  void plannerKnowsEveryFamily() {
    QFETCH(QString, fixture);
    const std::string folder =
        std::string(TANDEM_TEST_DATA_DIR) + "/models/" + fixture.toStdString();
    std::ifstream in(folder + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(in);
    const ModelShape s = model_shape_from_config(config, folder);
    const auto loaded = model::LoadedModel::load(folder);
    const std::int64_t bound = bound_params(loaded->weights(), loaded->spec().tie_word_embeddings);
    const double off = std::abs(double(s.total_params() - bound)) / double(bound);
    qInfo("off %g", off);
    QVERIFY2(off < 1e-3,
             qPrintable(QStringLiteral("planned %1, bound %2").arg(s.total_params()).arg(bound)));
    QCOMPARE(s.experts, loaded->spec().num_experts);
    QCOMPARE(s.mxfp4_experts, loaded->spec().mxfp4_experts);
    std::int64_t sliding = 0;
    for (std::int64_t w : loaded->spec().layer_window) sliding += w > 0 ? 1 : 0;
    QCOMPARE(s.sliding_layers, sliding);
    // The positions the plan allows are the ones the engine takes.
    QCOMPARE(s.max_positions, loaded->spec().position_limit());
    // The cache the planner counts is the one the engine allocates: for Qwen3-Next only the
    // full-attention layers' keys and values, and the recurrent state twice (live and the
    // snapshot a regenerated reply returns to). Latent attention keeps the latent twice, as
    // keys beside the rotary key and as values.
    const auto capacity = std::int64_t{64};
    const std::uint64_t kv = backend::KvCache::bytes_for(loaded->spec(), capacity);
    if (loaded->spec().mla) {
      QCOMPARE(kv, static_cast<std::uint64_t>(capacity * s.layers *
                                              (s.kv_key_width + s.kv_value_width)) *
                       sizeof(float));
      return;
    }
    QCOMPARE(kv, static_cast<std::uint64_t>(capacity * s.kv_elements_per_token +
                                            2 * s.recurrent_state_elements) *
                     sizeof(float));
  }

  // The catalog lists what runs; an entry whose architecture Tandem does not run says so,
  // and what it lacks, in its description. Models stored as MXFP4 plan their experts so.
  void catalogSaysWhatRuns() {
    for (const CatalogEntry& e : catalog()) {
      if (e.config.is_null()) continue;
      const std::string arch = e.config["architectures"][0].get<std::string>();
      bool runs = false;
      for (const std::string& a :
           {std::string("Qwen3MoeForCausalLM"), std::string("MixtralForCausalLM"),
            std::string("DeepseekV3ForCausalLM"), std::string("DeepseekV2ForCausalLM"),
            std::string("KimiK2ForCausalLM"), std::string("Glm4MoeForCausalLM"),
            std::string("GptOssForCausalLM"), std::string("Qwen3NextForCausalLM"),
            std::string("Qwen3ForCausalLM"), std::string("LlamaForCausalLM")})
        runs = runs || (arch == a && model::supported_architectures().find(a) != std::string::npos);
      const bool says_not =
          e.description.find("Not runnable yet: Tandem lacks") != std::string::npos;
      QVERIFY2(runs != says_not, e.id.c_str());
      QVERIFY2(e.description.find("planned") == std::string::npos, e.id.c_str());
    }
    // DeepSeek's figures for V2-Lite: 15.7B parameters, 2.4B active.
    const ModelShape lite = shape("deepseek-v2-lite-chat");
    QVERIFY(std::abs(lite.total_params() / 1e9 - 15.7) < 0.1);
    QVERIFY(std::abs(lite.active_params_per_token() / 1e9 - 2.45) < 0.1);
    const ModelShape oss = shape("gpt-oss-120b");
    QVERIFY(oss.mxfp4_experts);
    QCOMPARE(oss.sliding_layers, std::int64_t{18});
    // openai's figures: 117B parameters, 5.1B active.
    QVERIFY(std::abs(oss.total_params() / 1e9 - 116.8) < 0.2);
    QVERIFY(std::abs(oss.active_params_per_token() / 1e9 - 5.13) < 0.05);
    const Plan p = make_plan(machine("xeon-2s-amx-24gb"), oss, {8192, Quality::Quality, {}});
    QCOMPARE(p.cpu_format, WeightFormat::Mxfp4);
    QCOMPARE(format_name(p.cpu_format), std::string_view("mxfp4"));
    QCOMPARE(find_catalog_entry("gpt-oss-20b") != nullptr, true);
    QCOMPARE(catalog_stored_format(*find_catalog_entry("gpt-oss-20b")), std::string("mxfp4"));
  }

  void plans_never_exceed_memory() {
    std::vector<hw::HardwareReport> machines = {machine("xeon-2s-amx-24gb"),
                                                machine("ryzen-avx512-16gb"),
                                                machine("laptop-avx2"), hw::probe_hardware({})};
    int plans = 0;
    for (const auto& m : machines) {
      for (const CatalogEntry& e : catalog()) {
        if (e.config.is_null()) continue;
        const ModelShape s = model_shape_from_config(e.config, e.id);
        for (Quality q : {Quality::Quality, Quality::Balanced, Quality::Speed}) {
          for (std::int64_t ctx : {4096, 32768}) {
            const Plan p = make_plan(m, s, {ctx, q, {}});
            ++plans;
            if (p.verdict != Verdict::DoesNotFit) {
              QVERIFY2(p.ram_total() <= p.ram_budget, qPrintable(QString::fromStdString(e.id)));
              QVERIFY2(p.vram_total() <= p.vram_budget, qPrintable(QString::fromStdString(e.id)));
            }
            QVERIFY(!p.verdict_reason.empty());
            std::set<std::string> names;
            for (const Parameter& x : p.parameters) {
              names.insert(x.name);
              QVERIFY2(!x.reason.empty(), x.name.c_str());
            }
            for (const char* n : {"kt-method", "cpuinfer", "threadpool-count", "num-gpu-experts",
                                  "max-deferred-experts-per-token", "gpu-prefill-token-threshold",
                                  "expert-placement-strategy", "enable-dynamic-expert-update",
                                  "kv-cache", "prefill-chunk"}) {
              QVERIFY2(names.count(n) == 1, n);
            }
          }
        }
      }
    }
    QVERIFY(plans >= 200);
  }

  // A GGUF MoE file: parameters summed from its tensors, the KV cache from its metadata.
  void gguf_shape() {
    model::GgufBytes w;
    w.header(3, 7, 10);
    w.key("general.architecture", model::GgufType::kString).string("qwen3moe");
    // 256 positions stretched four times from 128 by YaRN: 512.
    w.key("qwen3moe.context_length", model::GgufType::kUint32).raw<std::uint32_t>(256);
    w.key("qwen3moe.rope.scaling.type", model::GgufType::kString).string("yarn");
    w.key("qwen3moe.rope.scaling.factor", model::GgufType::kFloat32).raw<float>(4.0f);
    w.key("qwen3moe.rope.scaling.original_context_length", model::GgufType::kUint32)
        .raw<std::uint32_t>(128);
    w.key("qwen3moe.block_count", model::GgufType::kUint32).raw<std::uint32_t>(2);
    w.key("qwen3moe.embedding_length", model::GgufType::kUint32).raw<std::uint32_t>(64);
    w.key("qwen3moe.expert_count", model::GgufType::kUint32).raw<std::uint32_t>(4);
    w.key("qwen3moe.expert_used_count", model::GgufType::kUint32).raw<std::uint32_t>(2);
    w.key("qwen3moe.attention.head_count_kv", model::GgufType::kUint32).raw<std::uint32_t>(2);
    // F32 tensors; dims innermost first. Two layers, but only layer 1 is MoE.
    std::uint64_t offset = 0;
    auto tensor = [&](const std::string& name, std::vector<std::uint64_t> dims) {
      std::uint64_t n = 1;
      for (auto d : dims) n *= d;
      w.tensor(name, dims, 0, offset);
      offset += n * 4;
      offset = (offset + 31) / 32 * 32;
    };
    tensor("token_embd.weight", {64, 100});
    tensor("output.weight", {64, 100});
    tensor("blk.0.attn_q.weight", {64, 64});
    tensor("blk.0.ffn_up.weight", {64, 96});
    tensor("blk.1.ffn_gate_inp.weight", {64, 4});
    tensor("blk.1.ffn_gate_exps.weight", {64, 16, 4});
    tensor("blk.1.ffn_down_exps.weight", {16, 64, 4});
    w.pad_to(32);
    w.bytes.append(offset, '\0');
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/tiny.gguf").toStdString();
    std::ofstream(path, std::ios::binary) << w.bytes;
    const ModelShape s = model_shape_from_gguf(model::GgufSet(path));
    QCOMPARE(s.architecture, std::string("gguf:qwen3moe"));
    QCOMPARE(s.embedding_params, std::int64_t{6400});
    QCOMPARE(s.output_params, std::int64_t{6400});
    QCOMPARE(s.attention_params, std::int64_t{4096});
    QCOMPARE(s.dense_ffn_params, std::int64_t{6144});
    QCOMPARE(s.router_params, std::int64_t{256});
    QCOMPARE(s.moe_layers, std::int64_t{1});
    QCOMPARE(s.expert_params, std::int64_t{2 * 64 * 16});
    // No key_length: the head size is embedding / heads (heads default to 1 here).
    QCOMPARE(s.kv_elements_per_token, std::int64_t{2} * 2 * (64 + 64));
    QCOMPARE(s.kv_key_width, std::int64_t{64});  // the rows the 8-bit cache would take
    QCOMPARE(s.kv_value_width, std::int64_t{64});
    QCOMPARE(s.max_positions, std::int64_t{512});
    // And the bytes as stored (F32 here): one expert is its gate and down projections.
    QVERIFY(s.stored.known);
    QCOMPARE(s.stored.embedding, std::uint64_t{6400 * 4});
    QCOMPARE(s.stored.attention, std::uint64_t{4096 * 4});
    QCOMPARE(s.stored.expert, std::uint64_t{2 * 64 * 16 * 4});
  }

  // A GGUF file's positions (its context length, stretched by its RoPE scaling) are the ones
  // the engine takes from it.
  void ggufPositionsAreTheEngines() {
    for (const char* f : {"qwen3moe-q8_0.gguf", "deepseek2-kv_b.gguf", "glm4moe-mixed.gguf",
                          "llama-mixed.gguf", "mixtral-q4_k.gguf", "qwen3-f16.gguf"}) {
      const std::string path = std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + f;
      const ModelShape s = model_shape_from_gguf(model::GgufSet(path));
      const auto loaded = model::LoadedModel::load(path);
      QVERIFY2(s.max_positions > 0, f);
      QCOMPARE(s.max_positions, loaded->spec().position_limit());
    }
  }

  // A GGUF model is planned as it runs: every tensor as stored, whatever the quality.
  void gguf_planned_as_stored() {
    const std::string path = std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/qwen3moe-mixed.gguf";
    const model::GgufSet file(path);
    const ModelShape s = model_shape_from_gguf(file);
    std::uint64_t experts = 0;
    for (const auto& [name, t] : file.tensors())
      if (name.find("_exps.") != std::string::npos) experts += t.info->size_bytes;
    for (Quality q : {Quality::Quality, Quality::Balanced, Quality::Speed}) {
      const Plan p = make_plan(machine("xeon-2s-amx-24gb"), s, {8192, q, {}});
      QCOMPARE(p.cpu_format, WeightFormat::Native);
      QVERIFY(p.uses_gpu);
      QCOMPARE(p.gpu_format, WeightFormat::Native);
      const std::uint64_t placed =
          line(p.ram, "routed experts (CPU)") + line(p.vram, "routed experts (GPU)");
      // Every expert once, on one side or the other (to rounding of the per-expert average).
      QVERIFY2(placed <= experts && placed + 64 * s.experts * s.moe_layers >= experts,
               qPrintable(QStringLiteral("%1 of %2").arg(placed).arg(experts)));
      QCOMPARE(line(p.ram, "embeddings"), s.stored.embedding);
      bool named = false;
      for (const Parameter& x : p.parameters)
        named |= x.name == "kt-method" && x.value.find("GGUF") != std::string::npos;
      QVERIFY(named);
    }
    // Chosen by the user, a packed format is sized as packed.
    PlanWishes int4{8192, Quality::Balanced, {}};
    int4.cpu_format = WeightFormat::Int4;
    const Plan packed = make_plan(machine("xeon-2s-amx-24gb"), s, int4);
    QCOMPARE(packed.cpu_format, WeightFormat::Int4);
  }

  void catalog_is_complete() {
    for (const char* id :
         {"tandem-demo", "glm-4.5", "glm-4.5-air", "qwen3-30b-a3b", "qwen3-235b-a22b-instruct-2507",
          "qwen3-235b-a22b-thinking-2507", "qwen3-next-80b-a3b-instruct", "deepseek-r1-0528",
          "deepseek-v3-0324", "kimi-k2-instruct"}) {
      const CatalogEntry* e = find_catalog_entry(id);
      QVERIFY2(e != nullptr, id);
      QVERIFY(e->builtin || !e->repo.empty());
      QVERIFY(e->builtin || !e->config.is_null());
    }
    const SizeEstimate sizes = estimate_sizes(shape("qwen3-30b-a3b"));
    QVERIFY(sizes.bf16_bytes > 60e9 &&
            sizes.bf16_bytes < 62e9);  // the published download is about 61 GB
  }
};

QTEST_GUILESS_MAIN(TestPlanner)
#include "tst_planner.moc"
