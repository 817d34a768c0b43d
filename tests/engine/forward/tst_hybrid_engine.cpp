// The hybrid engine on the emulated accelerator (and on an NVIDIA GPU, where there is one)
// against the CPU alone, on every fixture family: every placement strategy, N from none to all
// experts, layerwise prefill on and off, the dynamic update moving experts while it generates, all
// give the CPU's greedy tokens and its logits within fp tolerance (only the order of the sums
// differs). Deferral changes the result by design: its KL from no deferral is measured and
// reported.
#include <QtTest>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/backend/cpu/numa_pools.h"
#include "engine/backend/emulated/emulated_backend.h"
#include "engine/forward/model_runner.h"
#include "engine/generate/generator.h"
#include "engine/model/loaded_model.h"
#include "engine/schedule/routing_stats.h"
#include "engine/text/tokenizer.h"
#include "kernels/cuda/device_query.h"
#include "tests/support/logit_divergence.h"
#if TANDEM_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

using namespace tandem;

namespace {

// A model folder's fixture, or a GGUF one (NAME.gguf, with NAME.json beside it).
std::string fixture(const QString& name) {
  if (name.endsWith(QLatin1String(".gguf")))
    return std::string(TANDEM_TEST_DATA_DIR) + "/models-gguf/" + name.toStdString();
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name.toStdString();
}

nlohmann::json expected(const QString& name) {
  std::string path = fixture(name) + "/expected.json";
  if (name.endsWith(QLatin1String(".gguf")))
    path = fixture(name).substr(0, fixture(name).size() - 5) + ".json";
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

struct Output {
  std::vector<std::vector<float>> logits;  // per prompt: after the prompt, then per step
  std::vector<std::vector<std::int32_t>> greedy;
};

// Each prompt evaluated, then 12 greedy tokens generated after it.
Output run(generate::Generator& g, const nlohmann::json& prompts) {
  Output out;
  for (const auto& p : prompts) {
    const auto ids = p["ids"].get<std::vector<std::int32_t>>();
    g.reset();
    out.logits.push_back(g.evaluate(ids));
    generate::GenerationOptions o;
    o.sampling = generate::SamplingParams::greedy();
    o.max_tokens = 12;
    o.stop_at_eos = false;
    std::vector<std::int32_t> tokens;
    g.reset();
    g.generate(ids, o, [&](std::int32_t t) {
      tokens.push_back(t);
      out.logits.push_back(g.last_logits());
      return true;
    });
    out.greedy.push_back(tokens);
  }
  return out;
}

std::unique_ptr<backend::Backend> emulated(const model::ModelSpec& spec) {
  backend::EmulatedOptions o;
  o.memory_bytes = 256ull << 20;
  return std::make_unique<backend::EmulatedBackend>(o, spec);
}

using BackendFactory = std::function<std::unique_ptr<backend::Backend>(const model::ModelSpec&)>;

// The first NVIDIA GPU this build can compute on, or -1 with the reason in `why`.
int usable_gpu(std::string& why) {
  static const kernels::cuda::DeviceQuery q = kernels::cuda::query_devices();
  if (!q.compiled) {
    why = "this build has no CUDA kernels (nvcc was not found when it was configured)";
    return -1;
  }
  for (const auto& d : q.devices)
    if (d.usable) return d.index;
  why = !q.devices.empty() ? q.devices.front().name + ": " + q.devices.front().not_usable
        : q.reason.empty() ? std::string("no NVIDIA GPU was found")
                           : q.reason;
  return -1;
}

// One position of a teacher-forced comparison: both generators have read the same tokens.
struct ForcedPosition {
  double difference = 0;  // the largest logit difference over the reference's range
  bool rerouted = false;  // this position's tokens were sent to other experts
};

// Each prompt, then the reference's greedy tokens one at a time, fed to both generators
// (teacher forcing): a GPU's logits are compared position by position, also past a near tie
// that would send free-running greedy decoding elsewhere. Routing is compared through the
// runners' routing hits, which each step adds to.
std::vector<ForcedPosition> teacher_forced(generate::Generator& reference,
                                           generate::Generator& other,
                                           const nlohmann::json& prompts,
                                           const std::vector<std::vector<std::int32_t>>& greedy) {
  std::vector<ForcedPosition> out;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    auto ids = prompts[p]["ids"].get<std::vector<std::int32_t>>();
    reference.reset();
    other.reset();
    for (std::size_t step = 0; step <= greedy[p].size(); ++step) {
      const auto r0 = reference.metrics()->snapshot().hits;
      const auto o0 = other.metrics()->snapshot().hits;
      const std::vector<float> want = reference.evaluate(ids);
      const std::vector<float>& got = other.evaluate(ids);
      const auto r1 = reference.metrics()->snapshot().hits;
      const auto o1 = other.metrics()->snapshot().hits;
      ForcedPosition f;
      for (std::size_t i = 0; i < r1.size(); ++i)
        f.rerouted = f.rerouted || r1[i] - r0[i] != o1[i] - o0[i];
      const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
      const double range = *hi - *lo;
      for (std::size_t j = 0; j < want.size(); ++j)
        f.difference = std::max(f.difference, std::abs(got[j] - want[j]) / range);
      out.push_back(f);
      if (step < greedy[p].size()) ids.push_back(greedy[p][step]);
    }
  }
  return out;
}

// What a teacher-forced comparison found: over the positions routed as on the reference, the
// largest and the median difference, and how many positions were routed otherwise.
struct ForcedSummary {
  double worst = 0, median = 0;
  std::int64_t rerouted = 0, positions = 0;
};
ForcedSummary summarize(const std::vector<ForcedPosition>& positions) {
  ForcedSummary s;
  std::vector<double> same_routing;
  for (const ForcedPosition& p : positions) {
    if (p.rerouted) {
      ++s.rerouted;
      continue;
    }
    same_routing.push_back(p.difference);
    s.worst = std::max(s.worst, p.difference);
  }
  s.positions = static_cast<std::int64_t>(positions.size());
  if (!same_routing.empty()) {
    std::sort(same_routing.begin(), same_routing.end());
    s.median = same_routing[same_routing.size() / 2];
  }
  return s;
}

double worst_relative(const Output& a, const Output& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.logits.size(); ++i) {
    const auto& want = b.logits[i];
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    for (std::size_t j = 0; j < want.size(); ++j)
      worst =
          std::max(worst, static_cast<double>(std::abs(a.logits[i][j] - want[j]) / (*hi - *lo)));
  }
  return worst;
}

}  // namespace

class TestHybridEngine : public QObject {
  Q_OBJECT

  static void hybrid_cases() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("format");
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<int>("experts");  // per layer on the accelerator; -1: as many as fit
    QTest::addColumn<int>("threshold");
    QTest::addColumn<bool>("dynamic");
    for (const char* f : {"qwen3-moe", "deepseek-v3", "deepseek-v2", "mixtral", "glm4-moe",
                          "gpt-oss", "qwen3-next"}) {
      for (const char* format : {"native", "int8"}) {
        for (const char* s : {"uniform", "frequency", "front-loading", "random"}) {
          for (int n : {0, 3, -1}) {
            for (int threshold : {0, 10}) {
              QTest::addRow("%s %s %s N=%d layerwise=%d", f, format, s, n, threshold)
                  << f << format << s << n << threshold << false;
            }
          }
        }
        QTest::addRow("%s %s dynamic update", f, format)
            << f << format << "uniform" << 2 << 0 << true;
        QTest::addRow("%s %s dynamic update, layerwise", f, format)
            << f << format << "random" << 1 << 10 << true;
      }
    }
    // Dense families: everything but nothing to place.
    for (const char* f : {"qwen3", "llama"}) {
      for (const char* format : {"native", "int8"})
        QTest::addRow("%s %s", f, format) << f << format << "uniform" << -1 << 0 << false;
    }
    QTest::addRow("deepseek-v3-fp8 native") << "deepseek-v3-fp8"
                                            << "native"
                                            << "uniform" << 3 << 10 << true;
    QTest::addRow("gpt-oss mxfp4") << "gpt-oss"
                                   << "mxfp4"
                                   << "frequency" << 2 << 10 << true;
    QTest::addRow("qwen3-next-fp8 native") << "qwen3-next-fp8"
                                           << "native"
                                           << "frequency" << 2 << 10 << true;
    QTest::addRow("glm4-moe-fp8 int8") << "glm4-moe-fp8"
                                       << "int8"
                                       << "uniform" << 3 << 10 << true;
    QTest::addRow("qwen3-moe int4") << "qwen3-moe"
                                    << "int4"
                                    << "uniform" << 2 << 10 << false;
    // INT4 gate and up with INT8 downs: each matrix crosses to the accelerator in its own
    // format.
    QTest::addRow("mixtral int4-down8 layerwise") << "mixtral"
                                                  << "int4-down8"
                                                  << "uniform" << 3 << 10 << false;
    // GGUF files as stored: the accelerator computes on the same blocks.
    for (int n : {0, 2, -1}) {
      QTest::addRow("qwen3moe-mixed.gguf N=%d", n) << "qwen3moe-mixed.gguf"
                                                   << "native"
                                                   << "uniform" << n << 0 << false;
    }
    QTest::addRow("qwen3moe-mixed.gguf layerwise, dynamic update") << "qwen3moe-mixed.gguf"
                                                                   << "native"
                                                                   << "random" << 1 << 10 << true;
    QTest::addRow("mixtral-q4_k.gguf N=2") << "mixtral-q4_k.gguf"
                                           << "native"
                                           << "frequency" << 2 << 0 << false;
    QTest::addRow("deepseek2-split.gguf N=2") << "deepseek2-split.gguf"
                                              << "native"
                                              << "uniform" << 2 << 0 << false;
    QTest::addRow("deepseek2-v2.gguf N=3 layerwise") << "deepseek2-v2.gguf"
                                                     << "native"
                                                     << "random" << 3 << 10 << true;
    QTest::addRow("glm4moe-mixed.gguf N=-1") << "glm4moe-mixed.gguf"
                                             << "native"
                                             << "frequency" << -1 << 0 << false;
    QTest::addRow("llama-mixed.gguf int8") << "llama-mixed.gguf"
                                           << "int8"
                                           << "uniform" << -1 << 0 << false;
  }

  // The data row's model and placement on the accelerator `make` gives, against the CPU:
  // the same greedy tokens, and logits within `float_tolerance` of the range (`gguf_tolerance`
  // where activations are quantised to 8 bits: GGUF blocks as stored, INT8, INT4).
  //
  // `teacher_forced` (a GPU): BF16 weights and, in prompts, BF16 activations round where the
  // CPU computes in fp32 or with INT8 activations of its own, and on these tiny random models
  // that moves near-tied router scores and top tokens. The two are then compared position by
  // position on the CPU's greedy tokens (teacher_forced above). Where a position's tokens went
  // to the same experts, its logits must be within `float_tolerance` of the range, or, where
  // the CPU multiplies with 8-bit activations, within `gguf_tolerance` with a median under 3%
  // (a top token may differ where the CPU's own top two are closer than that). Positions whose
  // routing differs (a near tie decided the other way) are counted and must be at most
  // `rerouted_share` of them. For 8-bit formats each bound is raised to 1.25 times what the
  // CPU's own BF16 run of the same weights shows, where that is more.
  void compare_with_cpu(const BackendFactory& make, double float_tolerance, double gguf_tolerance,
                        bool forced = false, double rerouted_share = 0.0) {
    QFETCH(QString, fixture);
    QFETCH(QString, format);
    QFETCH(QString, strategy);
    QFETCH(int, experts);
    QFETCH(int, threshold);
    QFETCH(bool, dynamic);
    model::LoadOptions load;
    QVERIFY(model::parse_cpu_format(format.toStdString(), load.cpu_format));
    load.int4_group = 16;
    const auto model = model::LoadedModel::load(::fixture(fixture), load);
    const auto prompts = expected(fixture)["prompts"];
    backend::NumaPools cpu(1);
    generate::Generator alone(*model, cpu, 64);
    const Output want = run(alone, prompts);

    schedule::HybridOptions o;
    QVERIFY(schedule::parse_strategy(strategy.toStdString(), o.strategy));
    o.gpu_experts_per_layer = experts;
    o.prefill_token_threshold = threshold;
    o.dynamic_update = dynamic;
    o.move_bytes_per_step = 1 << 20;  // several experts a step, so moves happen while it runs
    o.histogram_half_life_tokens = 4;
    o.context_tokens = 64;
    if (o.strategy == schedule::PlacementStrategy::Frequency) {
      // Statistics as --record-expert-stats writes them, from the CPU run above.
      const auto snap = alone.metrics()->snapshot();
      o.stats = schedule::RoutingStatistics::empty_for(model->spec());
      for (std::int64_t l = 0; l < snap.layers; ++l)
        for (std::int64_t e = 0; e < model->spec().num_experts; ++e)
          o.stats->counts[l][e] = snap.hits[static_cast<std::size_t>(l * snap.experts + e)];
    }
    forward::ModelRunner runner(*model, cpu, make(model->spec()), o);
    const std::int64_t moe_layers =
        std::count(model->spec().layer_is_moe.begin(), model->spec().layer_is_moe.end(), true);
    const std::int64_t all = model->spec().num_experts;
    QCOMPARE(runner.gpu_experts_per_layer(),
             experts < 0 ? all : std::min<std::int64_t>(experts, all));
    QCOMPARE(runner.placement().count(), runner.gpu_experts_per_layer() * moe_layers);
    QCOMPARE(runner.layerwise_prefill(),
             threshold > 0 && moe_layers > 0 && runner.gpu_experts_per_layer() < all);
    generate::Generator hybrid(runner, 64);
    // GGUF blocks as stored, INT8 and INT4 are multiplied with 8-bit activations, a scale
    // per 32 columns; where the experts' inputs differ in their last bits (sums in another
    // order), an activation can round the other way, which moved the mixed GGUF fixture's
    // logits by 0.3% of the range, and Qwen3-Next's in INT8 by 0.33% (the greedy tokens stay
    // the same). BF16 and fp32 compute in floats: 1e-4. FP8 weights count as 8-bit where a
    // GPU holds them in BF16 against the CPU's own product.
    const bool int8_activations =
        (fixture.endsWith(QLatin1String(".gguf")) && format == "native") || format == "int8" ||
        format == "int4" || format == "int4-down8" || format == "mxfp4" ||
        (forced && fixture.endsWith(QLatin1String("-fp8")));
    // Against a GPU, 8-bit formats are also measured against what they cost the CPU itself:
    // the same weights in BF16 (`format_noise`), compared in the same way. Where the CPU's own
    // rounding moves the logits and the routing more (Qwen3-Next's recurrent layers in INT8:
    // a median of 6% of the range, a third of the positions rerouted), the GPU may too.
    ForcedSummary format_noise;
    if (forced && rerouted_share > 0 && int8_activations) {
      model::LoadOptions float_load = load;
      float_load.cpu_format = model::CpuFormat::Bf16;
      const auto float_model = model::LoadedModel::load(::fixture(fixture), float_load);
      generate::Generator float_cpu(*float_model, cpu, 64);
      format_noise = summarize(teacher_forced(alone, float_cpu, prompts, want.greedy));
      qInfo(
          "the CPU's own BF16 run differs by %.4f at most, %.4f in the median, %lld of %lld "
          "positions rerouted",
          format_noise.worst, format_noise.median, static_cast<long long>(format_noise.rerouted),
          static_cast<long long>(format_noise.positions));
    }
    const auto check_against_cpu = [&] {
      if (!forced) {
        const Output got = run(hybrid, prompts);
        QCOMPARE(got.greedy, want.greedy);
        const double worst = worst_relative(got, want);
        QVERIFY2(worst <= (int8_activations ? gguf_tolerance : float_tolerance),
                 qPrintable(QStringLiteral("largest difference %1 of the range").arg(worst)));
        return;
      }
      const ForcedSummary got = summarize(teacher_forced(alone, hybrid, prompts, want.greedy));
      const double worst_allowed =
          int8_activations ? std::max(gguf_tolerance, 1.25 * format_noise.worst) : float_tolerance;
      QVERIFY2(got.worst <= worst_allowed,
               qPrintable(QStringLiteral("largest difference %1 of the range at a position "
                                         "routed as on the CPU (allowed: %2)")
                              .arg(got.worst)
                              .arg(worst_allowed)));
      const double rerouted_allowed =
          std::max(rerouted_share * got.positions, 1.25 * format_noise.rerouted);
      QVERIFY2(got.rerouted <= rerouted_allowed,
               qPrintable(QStringLiteral("%1 of %2 positions were routed to other experts "
                                         "(allowed: %3)")
                              .arg(got.rerouted)
                              .arg(got.positions)
                              .arg(rerouted_allowed)));
      const double median_allowed = std::max(3e-2, 1.25 * format_noise.median);
      QVERIFY2(!int8_activations || got.median <= median_allowed,
               qPrintable(QStringLiteral("median difference %1 of the range (allowed: %2)")
                              .arg(got.median)
                              .arg(median_allowed)));
    };
    check_against_cpu();
    if (QTest::currentTestFailed()) return;
    const auto snap = runner.metrics()->snapshot();
    QVERIFY(snap.accelerator);
    // The placement is real: experts on the accelerator are computed there, the others on
    // the CPU, and the heat map sees what is resident.
    if (moe_layers > 0) {
      // Layerwise prefill runs every expert on the accelerator, whatever the placement.
      if (runner.gpu_experts_per_layer() == 0 && !runner.layerwise_prefill())
        QCOMPARE(snap.gpu_expert_seconds, 0.0);
      if (runner.gpu_experts_per_layer() > 0) QVERIFY(snap.gpu_expert_seconds > 0);
      if (runner.gpu_experts_per_layer() == all) QCOMPARE(snap.cpu_expert_seconds, 0.0);
      if (runner.gpu_experts_per_layer() < all && threshold == 0)
        QVERIFY(snap.cpu_expert_seconds > 0);
      const auto placement = runner.placement();
      std::int64_t marked = 0;
      for (std::size_t i = 0; i < snap.resident.size(); ++i) marked += snap.resident[i];
      QCOMPARE(marked, placement.count());
    }
    if (dynamic) {
      // A move is entered when its copy has arrived, which a loaded machine may not have
      // managed within the few tokens above: the runner goes on generating (at most a few
      // hundred tokens more) until one has. The results above were already compared.
      auto moved = snap;
      for (int round = 0; round < 20 && moved.moves == 0; ++round) {
        check_against_cpu();  // moving experts changes nothing computed
        if (QTest::currentTestFailed()) return;
        moved = runner.metrics()->snapshot();
      }
      QVERIFY2(moved.moves > 0, "the dynamic update moved no expert");
      qInfo("%llu moves (%llu bytes) while generating",
            static_cast<unsigned long long>(moved.moves),
            static_cast<unsigned long long>(moved.moved_bytes));
    }
  }

 private slots:
  void matchesTheCpu_data() { hybrid_cases(); }
  void matchesTheCpu() { compare_with_cpu(emulated, 1e-4, 1e-2); }
  // The GPU's teacher-forced comparison, run here on the emulated accelerator, where it must
  // find the same routing everywhere.
  void matchesTheCpuTeacherForced_data() { hybrid_cases(); }
  void matchesTheCpuTeacherForced() { compare_with_cpu(emulated, 1e-4, 1e-2, /*forced=*/true); }

  // The same cases on an NVIDIA GPU: BF16 weights (fp32 ones stay fp32) and, for prompts,
  // activations rounded to BF16 for the tensor cores, compared teacher-forced (see
  // compare_with_cpu). Measured on an H200 (2026-12-04): with the CPU's routing, float formats
  // within 0.31% of the range, 8-bit ones within 14% (the mixed GGUF file's Q2_K and Q3_K
  // layers; the CPU's own BF16 run of that file differs from its block products by as much),
  // medians 0.1% and 1-2%; at most 4 of 26 positions rerouted.
  void cudaMatchesTheCpu_data() {
    std::string why;
    if (usable_gpu(why) >= 0) {
      hybrid_cases();
      return;
    }
    // One row that says why, rather than every case skipped one by one.
    QTest::addColumn<QString>("fixture");
    QTest::newRow("no GPU") << QString();
  }
  void cudaMatchesTheCpu() {
    std::string why;
    const int gpu = usable_gpu(why);
    if (gpu < 0) QSKIP(qPrintable("needs a usable NVIDIA GPU: " + QString::fromStdString(why)));
#if TANDEM_HAVE_CUDA
    compare_with_cpu(
        [gpu](const model::ModelSpec& spec) -> std::unique_ptr<backend::Backend> {
          backend::CudaOptions o;
          o.device = gpu;
          o.memory_bytes = 256ull << 20;
          return std::make_unique<backend::CudaBackend>(o, spec);
        },
        1e-2, 0.2, /*forced=*/true, /*rerouted_share=*/0.25);
#endif
  }

  // Over a slow bus, staging takes longer than computing: a layer must wait for its experts
  // to arrive (and a slot for its previous layer to finish) or it computes with garbage. The
  // emulated accelerator's copies keep their format's every field (rotated INT8's rotation).
  void layerwiseWaitsForItsStaging_data() {
    QTest::addColumn<int>("format");
    QTest::newRow("int8") << int(model::CpuFormat::Int8);
    QTest::newRow("int8-rotated") << int(model::CpuFormat::Int8Rotated);
  }

  void layerwiseWaitsForItsStaging() {
    QFETCH(int, format);
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat(format);
    const auto model = model::LoadedModel::load(::fixture(QStringLiteral("deepseek-v3")), load);
    const auto prompts = expected(QStringLiteral("deepseek-v3"))["prompts"];
    backend::NumaPools cpu(1);
    generate::Generator alone(*model, cpu, 64);
    const Output want = run(alone, prompts);
    schedule::HybridOptions o;
    o.gpu_experts_per_layer = 1;
    o.prefill_token_threshold = 2;
    o.context_tokens = 64;
    backend::EmulatedOptions slow;
    slow.memory_bytes = 64 << 20;
    slow.bus_bytes_per_s = 4e6;  // a staged layer takes about 5 ms
    forward::ModelRunner runner(*model, cpu,
                                std::make_unique<backend::EmulatedBackend>(slow, model->spec()), o);
    QVERIFY(runner.layerwise_prefill());
    generate::Generator hybrid(runner, 64);
    const Output got = run(hybrid, prompts);
    QCOMPARE(got.greedy, want.greedy);
    QVERIFY(worst_relative(got, want) <= 1e-4);
    // A prompt alone runs every expert on the accelerator; decode steps, below the
    // threshold, split them.
    forward::ModelRunner prompts_only(
        *model, cpu, std::make_unique<backend::EmulatedBackend>(slow, model->spec()), o);
    auto cache = prompts_only.make_cache(64);
    std::vector<float> logits;
    prompts_only.forward(prompts[0]["ids"].get<std::vector<std::int32_t>>(), *cache, logits);
    QCOMPARE(prompts_only.metrics()->snapshot().cpu_expert_seconds, 0.0);
    QVERIFY(prompts_only.metrics()->snapshot().gpu_expert_seconds > 0);
  }

  // An accelerator's memory that cannot hold all the experts gets as many per layer as fit,
  // and one that cannot hold the dense part is refused with a sentence.
  void expertsSizedToTheBudget() {
    const auto model = model::LoadedModel::load(::fixture(QStringLiteral("qwen3-moe")));
    backend::NumaPools cpu(1);
    schedule::HybridOptions o;
    o.context_tokens = 64;
    forward::ModelRunner probe(*model, cpu, emulated(model->spec()), o);
    const std::uint64_t expert =
        probe.device().expert_bytes(model->weights().layers[0].experts.experts[0]);
    const std::uint64_t fixed = probe.device().memory_used() -
                                static_cast<std::uint64_t>(probe.placement().count()) * expert;
    backend::EmulatedOptions small;
    // The dense part, the KV cache of 64 tokens, and 5 experts: 2 per layer of 2 MoE layers.
    small.memory_bytes = fixed + probe.device().kv_cache_bytes(model->spec(), 64) + 5 * expert;
    o.gpu_experts_per_layer = -1;
    forward::ModelRunner sized(*model, cpu,
                               std::make_unique<backend::EmulatedBackend>(small, model->spec()), o);
    QCOMPARE(sized.gpu_experts_per_layer(), std::int64_t{2});  // 5 experts for 2 MoE layers
    o.gpu_experts_per_layer = 4;
    try {
      forward::ModelRunner refused(
          *model, cpu, std::make_unique<backend::EmulatedBackend>(small, model->spec()), o);
      QFAIL("more experts than fit were placed");
    } catch (const backend::DeviceOutOfMemory& e) {
      QVERIFY2(std::string(e.what()).find("give at most 2") != std::string::npos, e.what());
    }
    backend::EmulatedOptions tiny;
    tiny.memory_bytes = 64 << 10;
    try {
      forward::ModelRunner refused(
          *model, cpu, std::make_unique<backend::EmulatedBackend>(tiny, model->spec()), o);
      QFAIL("a model was placed on an accelerator too small for it");
    } catch (const backend::DeviceOutOfMemory& e) {
      QVERIFY2(std::string(e.what()).find("--accelerator none") != std::string::npos, e.what());
    }
  }

  void badOptionsHaveSentences() {
    const auto model = model::LoadedModel::load(::fixture(QStringLiteral("qwen3-moe")));
    backend::NumaPools cpu(1);
    const auto refused = [&](const schedule::HybridOptions& o, const char* words) {
      try {
        forward::ModelRunner r(*model, cpu, emulated(model->spec()), o);
      } catch (const std::invalid_argument& e) {
        QVERIFY2(std::string(e.what()).find(words) != std::string::npos, e.what());
        return;
      }
      QFAIL(words);
    };
    schedule::HybridOptions o;
    o.gpu_experts_per_layer = 7;
    refused(o, "give at most 6");
    o = {};
    o.max_deferred_per_token = 2;
    refused(o, "give at most 1");
    o = {};
    o.strategy = schedule::PlacementStrategy::Frequency;
    refused(o, "--record-expert-stats");
    o.stats = schedule::RoutingStatistics::empty_for(model->spec());
    o.stats->experts = 8;
    refused(o, "do not fit this model");
  }

  // Deferral adds each token's lowest-weighted CPU experts one layer late: a different model
  // by design. How far it moves the predictions on real text (the perplexity fixture's, and
  // for the demo model its README), for every MoE fixture and the trained demo model.
  void deferralKlIsReported_data() {
    QTest::addColumn<QString>("folder");
    QTest::addColumn<QString>("text");
    const QString fixture_text =
        QStringLiteral(TANDEM_TEST_DATA_DIR "/perplexity/fixture-text.txt");
    for (const char* f : {"qwen3-moe", "deepseek-v3", "mixtral"})
      QTest::newRow(f) << QString::fromStdString(fixture(QString::fromLatin1(f))) << fixture_text;
    QTest::newRow("demo model") << QStringLiteral(TANDEM_SOURCE_DIR "/resources/demo-model")
                                << QStringLiteral(TANDEM_SOURCE_DIR
                                                  "/resources/demo-model/README.md");
  }
  void deferralKlIsReported() {
    QFETCH(QString, folder);
    QFETCH(QString, text);
    const auto model = model::LoadedModel::load(folder.toStdString());
    const auto tokenizer = text::load_tokenizer(folder.toStdString());
    std::ifstream in(text.toStdString());
    const std::string words((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::int32_t> ids = tokenizer->encode(words, /*parse_special=*/false);
    ids.resize(std::min<std::size_t>(ids.size(), 128));
    QVERIFY(ids.size() >= 64);
    backend::NumaPools cpu(1);
    const auto logits_with = [&](std::int64_t deferred) {
      schedule::HybridOptions o;
      o.gpu_experts_per_layer = 0;
      o.max_deferred_per_token = deferred;
      o.context_tokens = 128;
      forward::ModelRunner runner(*model, cpu, emulated(model->spec()), o);
      auto cache = runner.make_cache(128);
      std::vector<float> logits;
      runner.forward(ids, *cache, logits, {.all_logits = true});
      return logits;
    };
    const std::vector<float> plain = logits_with(0), deferred = logits_with(1);
    const auto vocab = static_cast<std::size_t>(model->spec().vocab_size);
    double kl = 0;
    const std::size_t rows = plain.size() / vocab;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::vector<float> a(plain.begin() + r * vocab, plain.begin() + (r + 1) * vocab);
      const std::vector<float> b(deferred.begin() + r * vocab, deferred.begin() + (r + 1) * vocab);
      kl += test::kl_divergence_of_logits(a, b);
    }
    kl /= static_cast<double>(rows);
    qInfo("mean KL of one of %lld experts per token deferred, from none: %.5f over %zu positions",
          static_cast<long long>(model->spec().experts_per_token), kl, rows);
    QVERIFY2(kl > 0, "deferral changed nothing: it is not deferring");
    QVERIFY(std::isfinite(kl));
  }
};

QTEST_GUILESS_MAIN(TestHybridEngine)
#include "tst_hybrid_engine.moc"
