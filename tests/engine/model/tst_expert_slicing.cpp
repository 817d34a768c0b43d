// Routed experts split across thread pools: which pool counts can split an expert and the
// sentence for those that cannot; a model split for 2 or 3 pools gives the logits of one
// pool within the quantization noise of its down slices and the same greedy tokens, the
// same bits whatever the thread count, and the reference path is not split at all.
#include <QtTest>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include "tests/support/logit_divergence.h"

#include "engine/generate/generator.h"
#include "engine/hw/binding.h"
#include "engine/hw/topology.h"
#include "engine/model/expert_slicing.h"
#include "engine/model/loaded_model.h"
#include "engine/model/model_error.h"

using namespace tandem;

namespace {

std::string fixture(const QString& name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name.toStdString();
}

// Last-position logits and 16 greedy tokens of every fixture prompt.
struct Outcome {
  std::vector<std::vector<float>> logits;
  std::vector<std::vector<std::int32_t>> greedy;
};

Outcome run_prompts(const model::LoadedModel& model, int threads) {
  backend::NumaPools pools(threads, model.pools());
  generate::Generator generator(model, pools, 128);
  std::ifstream in(model.folder() + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  Outcome out;
  for (const auto& c : expected.at("prompts")) {
    const auto ids = c["ids"].get<std::vector<std::int32_t>>();
    out.logits.push_back(generator.evaluate(ids));
    generate::GenerationOptions options;
    options.sampling = generate::SamplingParams::greedy();
    options.max_tokens = 16;
    options.stop_at_eos = false;
    generator.reset();
    std::vector<std::int32_t> tokens;
    generator.generate(ids, options, [&](std::int32_t t) {
      tokens.push_back(t);
      return true;
    });
    out.greedy.push_back(tokens);
  }
  return out;
}

model::LoadOptions options(const QString& format, int pools, int group) {
  model::LoadOptions o;
  model::parse_cpu_format(format.toStdString(), o.cpu_format);
  o.pools = pools;
  if (group > 0) o.int4_group = group;
  return o;
}

// The largest |difference| over the logit range of `want`.
float relative_difference(const std::vector<float>& got, const std::vector<float>& want) {
  const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
  float worst = 0.0f;
  for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  return worst / (*hi - *lo);
}

// The experts each step routed its tokens to, as hits per (layer, expert).
std::vector<std::uint64_t> routing_hits(const generate::Generator& g) {
  return g.metrics()->snapshot().hits;
}

// `got` against `want` at every step of `want`'s greedy path from each fixture prompt (a
// free-running comparison would drift apart at the first near-tie and compare unrelated
// texts). Steps where a router's near-tie sent a token to other experts in the two models
// are counted apart: there any rounding makes a large, legitimate difference.
struct Comparison {
  int steps = 0;
  int rerouted = 0;  // steps whose tokens went to other experts in `got`
  // Over the other steps:
  float worst_difference = 0;  // largest |difference| over the logit range
  double mean_kl = 0;          // KL(want || got)
  int decisive = 0;            // steps where want's best token leads by over 5% of the range
  int agree = 0;               // ... and got picks it too
};

Comparison compare_along_greedy_path(const model::LoadedModel& want,
                                     const model::LoadedModel& got) {
  backend::NumaPools want_pools(2, want.pools()), got_pools(2, got.pools());
  generate::Generator a(want, want_pools, 128), b(got, got_pools, 128);
  std::ifstream in(want.folder() + "/expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  Comparison c;
  for (const auto& prompt : expected.at("prompts")) {
    std::vector<std::int32_t> seq = prompt["ids"].get<std::vector<std::int32_t>>();
    for (int step = 0; step < 16; ++step) {
      std::vector<std::uint64_t> routed_a = routing_hits(a), routed_b = routing_hits(b);
      const std::vector<float> x = a.evaluate(seq);
      const std::vector<float>& y = b.evaluate(seq);
      const std::vector<std::uint64_t> after_a = routing_hits(a), after_b = routing_hits(b);
      for (std::size_t i = 0; i < after_a.size(); ++i) {
        routed_a[i] = after_a[i] - routed_a[i];
        routed_b[i] = after_b[i] - routed_b[i];
      }
      ++c.steps;
      const auto best = std::max_element(x.begin(), x.end()) - x.begin();
      seq.push_back(static_cast<std::int32_t>(best));
      if (routed_a != routed_b) {
        ++c.rerouted;
        continue;
      }
      c.worst_difference = std::max(c.worst_difference, relative_difference(y, x));
      c.mean_kl += test::kl_divergence_of_logits(x, y);
      std::vector<float> sorted = x;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 0.05f * (sorted[0] - *std::min_element(x.begin(), x.end()))) {
        ++c.decisive;
        c.agree += std::max_element(y.begin(), y.end()) - y.begin() == best;
      }
    }
  }
  c.mean_kl /= std::max(1, c.steps - c.rerouted);
  return c;
}

}  // namespace

class TestExpertSlicing : public QObject {
  Q_OBJECT
 private slots:
  void poolCountsThatSplitAnExpert() {
    QVERIFY(model::can_slice_experts(40, 1, 0));  // one pool takes any width
    QVERIFY(!model::can_slice_experts(40, 2, 0));
    QVERIFY(model::can_slice_experts(768, 4, 0));
    QVERIFY(model::can_slice_experts(768, 4, 64));  // 192 columns: three groups of 64
    QVERIFY(!model::can_slice_experts(768, 4, 128));
    QCOMPARE(model::valid_pool_counts(768, 0, 8), (std::vector<int>{1, 2, 3, 4, 6, 8}));
    QCOMPARE(model::valid_pool_counts(768, 128, 8), (std::vector<int>{1, 2, 3, 6}));
    const model::SliceRange r = model::expert_slice(768, 3, 2);
    QCOMPARE(r.begin, std::int64_t{512});
    QCOMPARE(r.width, std::int64_t{256});
  }

  void impossibleSplitsHaveASentence_data() {
    QTest::addColumn<int>("width");
    QTest::addColumn<int>("pools");
    QTest::addColumn<int>("group");
    QTest::addColumn<QString>("sentence");
    QTest::newRow("768 in 5") << 768 << 5 << 0
                              << "the expert width 768 cannot be split into 5 pools of whole "
                                 "16-row blocks; use 1, 2, 3, 4, 6 or 8 pools";
    QTest::newRow("40 in 2") << 40 << 2 << 0
                             << "the expert width 40 cannot be split into 2 pools of whole "
                                "16-row blocks; use 1 pool";
    QTest::newRow("768 in 4, int4 groups of 128")
        << 768 << 4 << 128
        << "the expert width 768 cannot be split into 4 pools of whole 16-row blocks and scale "
           "groups of 128 columns; use 1, 2, 3 or 6 pools";
    QTest::newRow("possible") << 768 << 4 << 64 << "";
  }

  void impossibleSplitsHaveASentence() {
    QFETCH(int, width);
    QFETCH(int, pools);
    QFETCH(int, group);
    QFETCH(QString, sentence);
    QCOMPARE(QString::fromStdString(model::expert_slicing_error(width, pools, group)), sentence);
  }

  // Gate and up slices are the whole matrices' rows; each down slice is quantized on its
  // own (INT8: a scale per row of the slice; its activations: a scale per token of the
  // slice), and the partial sums add in another order. So INT8 and INT4 differ from one
  // pool by quantization noise: bounded here by 2.5% of the logit range (measured up to 1.8%
  // on these random tiny models, about half of what INT8 itself moves them from fp32) and a
  // mean KL divergence of 1e-3 (measured about 2e-4). BF16 quantizes nothing differently
  // (measured: no difference at all; bound 1e-5). Every greedy step the bound cannot flip
  // (a lead of more than twice it) picks the same token. A step where a router's near-tie
  // picks other experts (measured: at most 1 of 32) is exempt; at most 4 may.
  void splitModelMatchesOnePool_data() {
    QTest::addColumn<QString>("fixture");
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("pools");
    QTest::addColumn<int>("group");
    QTest::addColumn<double>("tolerance");
    // deepseek-v3's experts are 32 wide (2 pools of one block), mixtral's 48 (3 pools).
    QTest::newRow("deepseek-v3 int8, 2 pools") << "deepseek-v3"
                                               << "int8" << 2 << 0 << 2.5e-2;
    QTest::newRow("deepseek-v3 bf16, 2 pools") << "deepseek-v3"
                                               << "bf16" << 2 << 0 << 1e-5;
    QTest::newRow("deepseek-v3 int4/16, 2 pools") << "deepseek-v3"
                                                  << "int4" << 2 << 16 << 2.5e-2;
    QTest::newRow("deepseek-v3-fp8 int8, 2 pools") << "deepseek-v3-fp8"
                                                   << "int8" << 2 << 0 << 2.5e-2;
    // gpt-oss's 64-wide experts: two slices of whole 32-column MXFP4 groups, codes kept; the
    // down slices' activations are quantised per slice (the clamped SwiGLU's outputs spread
    // wider than SiLU's), hence a wider bound.
    QTest::newRow("gpt-oss mxfp4, 2 pools") << "gpt-oss"
                                            << "mxfp4" << 2 << 0 << 4e-2;
    QTest::newRow("glm4-moe-fp8 int8, 2 pools") << "glm4-moe-fp8"
                                                << "int8" << 2 << 0 << 2.5e-2;
    QTest::newRow("mixtral int8, 3 pools") << "mixtral"
                                           << "int8" << 3 << 0 << 2.5e-2;
    QTest::newRow("mixtral int4/16, 3 pools") << "mixtral"
                                              << "int4" << 3 << 16 << 2.5e-2;
    // INT4 gate and up, INT8 down slices.
    QTest::newRow("deepseek-v3 int4-down8/16, 2 pools") << "deepseek-v3"
                                                        << "int4-down8" << 2 << 16 << 2.5e-2;
  }

  void splitModelMatchesOnePool() {
    QFETCH(QString, fixture);
    QFETCH(QString, format);
    QFETCH(int, pools);
    QFETCH(int, group);
    QFETCH(double, tolerance);
    const auto whole = model::LoadedModel::load(::fixture(fixture), options(format, 1, group));
    const auto split = model::LoadedModel::load(::fixture(fixture), options(format, pools, group));
    QVERIFY(!whole->experts_sliced());
    QVERIFY(split->experts_sliced());
    QCOMPARE(split->pools(), pools);
    QCOMPARE(split->weights().layers.back().experts.experts[0].slices.size(),
             static_cast<std::size_t>(pools));
    // Each slice in the format its whole matrix has without the split.
    const model::FeedForwardWeights& one = whole->weights().layers.back().experts.experts[0];
    for (const auto& slice : split->weights().layers.back().experts.experts[0].slices) {
      QCOMPARE(slice.gate->format, one.gate.packed->format);
      QCOMPARE(slice.up->format, one.up.packed->format);
      QCOMPARE(slice.down->format, one.down.packed->format);
    }
    // Split or not, the experts hold the same bytes, give or take the slices' scales.
    const double ratio = static_cast<double>(split->packed_bytes()) / whole->packed_bytes();
    QVERIFY2(ratio > 0.99 && ratio < 1.2, qPrintable(QString::number(ratio)));
    const Comparison c = compare_along_greedy_path(*whole, *split);
    qInfo(
        "%d steps, %d rerouted; the others: largest difference %.2e of the logit range, mean "
        "KL %.2e, %d of %d decisive greedy steps agree",
        c.steps, c.rerouted, double(c.worst_difference), c.mean_kl, c.agree, c.decisive);
    QVERIFY2(c.rerouted <= 4, qPrintable(QString::number(c.rerouted)));
    QVERIFY2(c.worst_difference <= tolerance, qPrintable(QString::number(c.worst_difference)));
    QVERIFY2(c.worst_difference > 0 || format == "bf16", "the split changed nothing: was it used?");
    QVERIFY2(c.mean_kl <= 1e-3, qPrintable(QString::number(c.mean_kl)));
    QVERIFY(c.decisive >= 8);
    QCOMPARE(c.agree, c.decisive);
  }

  // Each output value is computed by one task in a fixed way and the pools' partial sums
  // add in pool order, so the thread count does not change a bit.
  void splitModelIsDeterministic() {
    const auto model = model::LoadedModel::load(fixture("deepseek-v3"), options("int8", 2, 0));
    const Outcome two = run_prompts(*model, 2);
    const Outcome five = run_prompts(*model, 5);
    QCOMPARE(five.logits, two.logits);
    QCOMPARE(five.greedy, two.greedy);
  }

  void impossibleSplitIsAModelError() {
    // qwen3-moe's experts are 40 wide: not two pools of whole 16-row blocks.
    try {
      model::LoadedModel::load(fixture("qwen3-moe"), options("int8", 2, 0));
      QFAIL("loaded");
    } catch (const model::ModelError& e) {
      QVERIFY2(QString::fromUtf8(e.what()).endsWith(
                   "the expert width 40 cannot be split into 2 pools of whole 16-row blocks; use "
                   "1 pool."),
               e.what());
    }
    // INT4 groups of 32 do not divide deepseek-v3's 16-column down slices.
    try {
      model::LoadedModel::load(fixture("deepseek-v3"), options("int4", 2, 0));
      QFAIL("loaded");
    } catch (const model::ModelError& e) {
      QVERIFY2(QString::fromUtf8(e.what()).contains("scale groups of 32 columns; use 1 pool."),
               e.what());
    }
  }

  // The fp32 reference path splits nothing: more pools only spread its work, bit for bit.
  void referencePathIgnoresPools() {
    const auto one = model::LoadedModel::load(fixture("qwen3-moe"), options("native", 1, 0));
    const auto two = model::LoadedModel::load(fixture("qwen3-moe"), options("native", 2, 0));
    QCOMPARE(two->pools(), 2);
    QVERIFY(!two->experts_sliced());
    QCOMPARE(run_prompts(*two, 3).logits, run_prompts(*one, 2).logits);
  }

  // Without --pools: one pool per NUMA node, or the most below that the experts allow.
  void defaultPoolsFollowTheNodes() {
    const int nodes = hw::default_pool_count(hw::probe_topology());
    int expected = nodes;
    while (!model::can_slice_experts(32, expected, 0)) --expected;
    QCOMPARE(model::LoadedModel::load(fixture("deepseek-v3"), options("int8", 0, 0))->pools(),
             expected);
    QCOMPARE(model::LoadedModel::load(fixture("qwen3-moe"), options("int8", 0, 0))->pools(), 1);
  }

  // Each pool's slices lie in memory bound to the pool's NUMA nodes (where the system can
  // bind memory at all; elsewhere they are in ordinary memory and the log says so once).
  void slicesLieInTheirPoolsMemory() {
    const auto model = model::LoadedModel::load(fixture("deepseek-v3"), options("int8", 2, 0));
    const auto nodes = hw::pool_numa_nodes(hw::probe_topology(), 2);
    const bool binds = hw::NodeMemory(4096, nodes[0]).bound();
    int slices = 0;
    for (const model::LayerWeights& layer : model->weights().layers) {
      for (const model::FeedForwardWeights& expert : layer.experts.experts) {
        QCOMPARE(expert.slices.size(), std::size_t(2));
        QVERIFY(expert.gate.packed == nullptr);  // no whole copy besides the slices
        for (std::size_t p = 0; p < 2; ++p) {
          for (const kernels::PackedMatrix* m :
               {expert.slices[p].gate, expert.slices[p].up, expert.slices[p].down}) {
            ++slices;
            if (!binds) continue;
            const std::vector<int> where = hw::memory_nodes(m->bytes.data.get(), m->bytes.size);
            QVERIFY(!where.empty());
            for (int node : where)
              QVERIFY(std::find(nodes[p].begin(), nodes[p].end(), node) != nodes[p].end());
          }
        }
      }
    }
    QCOMPARE(slices, 2 * 8 * 2 * 3);  // two MoE layers of 8 experts, 2 pools, 3 matrices
  }

  void poolsMustMatchTheSplit() {
    const auto model = model::LoadedModel::load(fixture("deepseek-v3"), options("int8", 2, 0));
    backend::NumaPools pools(2, 1);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, generate::Generator(*model, pools, 16));
  }
};

QTEST_GUILESS_MAIN(TestExpertSlicing)
#include "tst_expert_slicing.moc"
