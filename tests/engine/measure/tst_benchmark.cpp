// `tandem bench`'s measurement loop on the demo model: one measurement per repetition for
// prompt and decode, the warm-up pass reported but never counted, and the roofline figures
// derived from the measured bandwidth. Correctness only: no timing is asserted.
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>
#include <vector>

#include "engine/measure/benchmark.h"
#include "engine/measure/gguf_product_benchmark.h"
#include "engine/measure/kernel_benchmark.h"
#include "engine/measure/trace.h"
#include "engine/model/gguf/file.h"
#include "engine/model/loaded_model.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/onednn_matmul.h"

using namespace tandem;

namespace {
const std::string kDemo = std::string(TANDEM_SOURCE_DIR) + "/resources/demo-model";
const std::string kGgufModels = std::string(TANDEM_SOURCE_DIR) + "/tests/data/models-gguf/";
}  // namespace

class TestBenchmark : public QObject {
  Q_OBJECT
 private slots:
  void countsRepetitionsAndSkipsWarmup_data() {
    QTest::addColumn<bool>("warmup");
    QTest::newRow("with warm-up") << true;
    QTest::newRow("without") << false;
  }

  void countsRepetitionsAndSkipsWarmup() {
    QFETCH(bool, warmup);
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    const auto model = model::LoadedModel::load(kDemo, load);
    measure::BenchOptions o;
    o.prompt_tokens = 12;
    o.decode_tokens = 5;
    o.repetitions = 3;
    o.warmup = warmup;
    backend::NumaPools pool(2, model->pools());
    forward::ModelRunner runner(*model, pool);
    std::vector<std::string> lines;
    const measure::BenchResult r =
        measure::run_benchmark(runner, pool, o, [&](const std::string& l) { lines.push_back(l); });
    QCOMPARE(r.prompt.tokens_per_s.size(), std::size_t(3));
    QCOMPARE(r.decode.tokens_per_s.size(), std::size_t(3));
    for (double v : r.prompt.tokens_per_s) QVERIFY(v > 0);
    for (double v : r.decode.tokens_per_s) QVERIFY(v > 0);
    const auto warm = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("warm-up") != std::string::npos;
    });
    QCOMPARE(warm, warmup ? 2 : 0);  // one prompt line and one decode line
    QCOMPARE(lines.size(), std::size_t(warmup ? 8 : 6));
    QVERIFY(r.read_bandwidth_bytes_per_s > 0);
    QCOMPARE(r.active_bytes_per_token, model->active_weight_bytes_per_token());
    // The read rate after each counted decode run, and each run held against its own.
    QCOMPARE(r.decode_bandwidth_bytes_per_s.size(), std::size_t(3));
    for (double v : r.decode_bandwidth_bytes_per_s) QVERIFY(v > 0);
    const double bytes = double(r.active_bytes_per_token);
    QVERIFY(qFuzzyCompare(r.roofline_tokens_per_s(),
                          measure::sample_mean(r.decode_bandwidth_bytes_per_s) / bytes));
    double shares = 0;
    for (std::size_t i = 0; i < 3; ++i)
      shares += r.decode.tokens_per_s[i] * bytes / r.decode_bandwidth_bytes_per_s[i];
    QVERIFY(qFuzzyCompare(r.roofline_fraction(), shares / 3));
  }

  // Each decode run against the rate of its own moment: a run at half the speed while the
  // memory read at half its rate is as near the roofline as the others. Without rates beside
  // the runs (a prompt alone, or a trace), the rate after the runs.
  void rooflineHoldsEachRunAgainstItsOwnRate() {
    measure::BenchResult r;
    r.active_bytes_per_token = 1000;
    r.cache_bytes_per_token = 0;
    r.read_bandwidth_bytes_per_s = 80000;
    r.decode.tokens_per_s = {40, 20, 40};
    r.decode_bandwidth_bytes_per_s = {50000, 25000, 100000};
    QVERIFY(qFuzzyCompare(r.roofline_tokens_per_s(), 175000.0 / 3 / 1000));
    QVERIFY(qFuzzyCompare(r.roofline_fraction(), (0.8 + 0.8 + 0.4) / 3));
    r.decode_bandwidth_bytes_per_s.clear();
    QVERIFY(qFuzzyCompare(r.roofline_tokens_per_s(), 80.0));
    QVERIFY(qFuzzyCompare(r.roofline_fraction(), (100.0 / 3) / 80.0));
  }

  // With attention on the CPU, the decode roofline counts the keys and values a token reads:
  // at depth d, the i-th of n decoded tokens sees d + i positions in every layer (the demo
  // model: plain attention in each layer, no window), BF16, 2 x kv_heads x head_dim each.
  void rooflineCountsTheCacheAtDepth() {
    const auto model = model::LoadedModel::load(kDemo);
    const model::ModelSpec& spec = model->spec();
    QVERIFY(!spec.mla && !spec.has_linear_layers());
    for (std::int64_t w : spec.layer_window) QCOMPARE(w, std::int64_t{0});
    measure::BenchOptions o;
    o.prompt_tokens = 0;
    o.decode_tokens = 6;
    o.depth_tokens = 40;
    o.repetitions = 1;
    o.warmup = false;
    o.cpu_cache_format = backend::KvCacheFormat::Bf16;
    backend::NumaPools pool(1, model->pools());
    forward::ModelRunner runner(*model, pool);
    runner.set_cpu_kv_cache_format(backend::KvCacheFormat::Bf16);
    const measure::BenchResult r = measure::run_benchmark(runner, pool, o, {});
    const double seen = 40 + (6 + 1) / 2.0;
    const double want = static_cast<double>(spec.num_layers) * seen * 2.0 *
                        static_cast<double>(spec.num_kv_heads * spec.head_dim) * 2.0;
    QCOMPARE(r.cache_bytes_per_token, static_cast<std::uint64_t>(want));
    QVERIFY(r.cache_bytes_per_token > 0);
    QVERIFY(qFuzzyCompare(r.roofline_tokens_per_s(),
                          measure::sample_mean(r.decode_bandwidth_bytes_per_s) /
                              double(r.active_bytes_per_token + r.cache_bytes_per_token)));
    // F32 holds twice the bytes; without a CPU cache format, weights alone.
    QCOMPARE(measure::cache_bytes_per_decode_token(*model, 40, 6, backend::KvCacheFormat::F32),
             2 * r.cache_bytes_per_token);
    o.cpu_cache_format.reset();
    QCOMPARE(measure::run_benchmark(runner, pool, o, {}).cache_bytes_per_token, std::uint64_t{0});
  }

  // -d: every test starts from a cache holding `depth` tokens, filled anew (uncounted) before
  // each; the prompt test runs only its own tokens on top of them. Every token the model
  // ran is counted by its metrics: per repetition the depth twice, the prompt and the decode.
  void depthIsFilledBeforeEachTest() {
    const auto model = model::LoadedModel::load(kDemo);
    measure::BenchOptions o;
    o.prompt_tokens = 12;
    o.decode_tokens = 5;
    o.depth_tokens = 16;
    o.repetitions = 2;
    o.warmup = false;
    backend::NumaPools pool(2, model->pools());
    forward::ModelRunner runner(*model, pool);
    std::vector<std::string> lines;
    const measure::BenchResult r =
        measure::run_benchmark(runner, pool, o, [&](const std::string& l) { lines.push_back(l); });
    QCOMPARE(r.prompt.tokens_per_s.size(), std::size_t(2));
    QCOMPARE(r.decode.tokens_per_s.size(), std::size_t(2));
    QCOMPARE(runner.metrics()->snapshot().tokens, std::uint64_t(2 * (16 + 12 + 16 + 5)));
    QVERIFY2(lines.front().find("pp12 @ d16 run 1") != std::string::npos, lines.front().c_str());
    QVERIFY2(lines.back().find("tg5 @ d16 run 2") != std::string::npos, lines.back().c_str());
  }

  // --trace: a Chrome trace of the counted runs, with the engine thread's operations and
  // every worker's share of the loops under the operation's name; nothing of the warm-up.
  void traceShowsEveryThread() {
    // Packed, as `tandem bench` loads it: the experts' steps run in ExpertCompute::packed.
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    const auto model = model::LoadedModel::load(kDemo, load);
    measure::BenchOptions o;
    o.prompt_tokens = 40;
    o.decode_tokens = 3;
    o.repetitions = 1;
    o.trace = true;
    backend::NumaPools pool(2, model->pools(), /*pin=*/false);
    forward::ModelRunner runner(*model, pool);
    // No bandwidth probes inside the trace: its timeline is the runs' alone.
    QVERIFY(measure::run_benchmark(runner, pool, o).decode_bandwidth_bytes_per_s.empty());
    QVERIFY(!trace::enabled());
    QTemporaryDir dir;
    const std::string path = dir.filePath("trace.json").toStdString();
    std::string error;
    QVERIFY2(trace::write_chrome_json(path, &error), error.c_str());
    std::ifstream in(path);
    const auto json = nlohmann::json::parse(in);
    std::map<int, std::string> thread_names;
    std::map<int, std::set<std::string>> spans;
    double first = 1e300;
    for (const auto& e : json["traceEvents"]) {
      const int tid = e["tid"].get<int>();
      if (e["ph"] == "M") {
        thread_names[tid] = e["args"]["name"].get<std::string>();
        continue;
      }
      QCOMPARE(e["ph"].get<std::string>(), std::string("X"));
      QVERIFY(e["dur"].get<double>() >= 0);
      first = std::min(first, e["ts"].get<double>());
      spans[tid].insert(e["name"].get<std::string>());
    }
    QVERIFY(first >= 0);  // nothing from before the counted runs began
    int engine = -1, worker = -1;
    for (const auto& [tid, name] : thread_names) {
      if (name == "engine") engine = tid;
      if (name.rfind("worker ", 0) == 0) worker = tid;
    }
    QVERIFY2(engine > 0 && worker > 0, json.dump().substr(0, 400).c_str());
    for (const char* op : {"attention", "rms_norm", "cpu_experts"})
      QVERIFY2(spans[engine].count(op) == 1, op);
    // Each dense product by its matrix, and none left unnamed.
    for (const char* product : {"matmul: q", "matmul: k", "matmul: v", "matmul: o",
                                "matmul: router", "matmul: output head"}) {
      QVERIFY2(
          spans[engine].count(product) == 1,
          (std::string(product) + " not among " + nlohmann::json(spans[engine]).dump()).c_str());
    }
    QVERIFY(spans[engine].count("matmul") == 0);
    // The workers' shares of a product split between threads are named as it is.
    QVERIFY(spans[worker].count("matmul: output head") == 1);
    // The worker's share of the loops, under the operations that started them.
    QVERIFY(spans[worker].count("attention") == 1);
    // The experts' steps are named apart, and the worker's shares of their loops with them.
    for (const char* step : {"experts: pack", "experts: gate and up", "experts: down"}) {
      QVERIFY2(spans[engine].count(step) == 1,
               (std::string(step) + " not among " + nlohmann::json(spans[engine]).dump()).c_str());
      QVERIFY2(spans[worker].count(step) == 1, step);
    }
    QVERIFY(spans[engine].count("experts: weighted sums") == 1);
    QVERIFY(trace::event_count() > 0);
    // The worker's busy share: the union of its spans over the whole recording's time,
    // computed here again from the written trace.
    std::vector<std::pair<double, double>> intervals;
    double end = 0;
    for (const auto& e : json["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
      end = std::max(end, b + d);
      if (e["tid"].get<int>() == worker) intervals.emplace_back(b, b + d);
    }
    std::sort(intervals.begin(), intervals.end());
    double inside = 0, from = intervals.front().first, to = intervals.front().second;
    for (const auto& [b, e] : intervals) {
      if (b > to) {
        inside += to - from;
        from = b;
      }
      to = std::max(to, e);
    }
    inside += to - from;
    const double expected = inside / (end - first);
    bool found = false;
    for (const trace::ThreadShare& t : trace::busy_shares()) {
      if (t.name != thread_names[worker]) continue;
      found = true;
      QVERIFY2(std::abs(t.busy - expected) < 1e-3,
               qPrintable(QStringLiteral("%1 vs %2").arg(t.busy).arg(expected)));
      QVERIFY(t.busy > 0 && t.busy <= 1);
    }
    QVERIFY(found);

    // Per operation: the engine's outermost spans of each name (its own shares of the loops
    // nest inside them under the same name), and the worker's spans inside them, again from
    // the written trace, pair by pair.
    std::map<std::string, std::vector<std::pair<double, double>>> ops;
    std::vector<std::pair<double, double>> worker_spans;
    for (const auto& e : json["traceEvents"]) {
      if (e["ph"] != "X") continue;
      const double b = e["ts"].get<double>(), d = e["dur"].get<double>();
      if (e["tid"].get<int>() == engine) ops[e["name"].get<std::string>()].emplace_back(b, b + d);
      if (e["tid"].get<int>() == worker) worker_spans.emplace_back(b, b + d);
    }
    const std::vector<trace::OperationShare> shares = trace::operation_shares();
    QCOMPARE(shares.size(), ops.size());
    for (std::size_t i = 1; i < shares.size(); ++i)
      QVERIFY(shares[i - 1].seconds >= shares[i].seconds);
    for (const auto& [name, all] : ops) {
      std::vector<std::pair<double, double>> outer;
      for (const auto& s : all) {
        const bool nested = std::any_of(all.begin(), all.end(), [&](const auto& o) {
          return &o != &s && o.first <= s.first && s.second <= o.second &&
                 (o.first < s.first || s.second < o.second || &o < &s);
        });
        if (!nested) outer.push_back(s);
      }
      double total = 0, busy = 0;
      for (const auto& [b, e] : outer) {
        total += e - b;
        for (const auto& [wb, we] : worker_spans)
          busy += std::max(0.0, std::min(e, we) - std::max(b, wb));
      }
      const auto it = std::find_if(shares.begin(), shares.end(),
                                   [&](const trace::OperationShare& s) { return s.name == name; });
      QVERIFY2(it != shares.end(), name.c_str());
      QVERIFY2(std::abs(it->seconds - total / 1e6) < 1e-6, name.c_str());
      QVERIFY2(std::abs(it->share - total / (end - first)) < 1e-3, name.c_str());
      QVERIFY2(std::abs(it->workers_busy - busy / total) < 1e-3,
               qPrintable(QStringLiteral("%1: %2 vs %3")
                              .arg(QString::fromStdString(name))
                              .arg(it->workers_busy)
                              .arg(busy / total)));
      QVERIFY(it->workers_busy >= 0 && it->workers_busy <= 1 + 1e-9);
    }
  }

  // Where tiles overtake AVX-512: the fewest tokens from which they win at every larger
  // count measured, per shape, format and thread count.
  void tileCrossoverIsWhereTilesKeepWinning() {
    measure::KernelBenchReport report;
    const auto add = [&](const std::string& shape, int threads, std::int64_t tokens, double tiles,
                         double avx512) {
      measure::KernelBenchRow row;
      row.shape = {shape, 64, 64};
      row.format = "int8";
      row.threads = threads;
      row.tokens = tokens;
      row.tiles = measure::KernelPathResult{"tiles", 0, {{tiles}}, {}};
      row.avx512 = measure::KernelPathResult{"avx512", 0, {{avx512}}, {}};
      report.rows.push_back(row);
    };
    // Tiles win at 4, lose at 8, win from 16 on: from 16.
    add("up", 2, 1, 1.0, 2.0);
    add("up", 2, 4, 3.0, 2.0);
    add("up", 2, 8, 5.0, 6.0);
    add("up", 2, 16, 9.0, 6.0);
    add("up", 2, 64, 20.0, 7.0);
    // Winning everywhere: from the fewest measured. The rows need not come in order.
    add("up", 1, 8, 5.0, 3.0);
    add("up", 1, 1, 2.0, 1.0);
    // Losing at the most tokens measured: nowhere.
    add("down", 2, 1, 2.0, 1.0);
    add("down", 2, 16, 5.0, 5.0);
    // A row without the tile kernel (no AMX) counts for nothing.
    measure::KernelBenchRow plain;
    plain.shape = {"q", 64, 64};
    report.rows.push_back(plain);

    const std::vector<measure::TileCrossover> c = measure::tile_crossovers(report);
    QCOMPARE(c.size(), std::size_t{3});
    QCOMPARE(c[0].shape, std::string("up"));
    QCOMPARE(c[0].threads, 2);
    QCOMPARE(c[0].tiles_from, std::optional<std::int64_t>(16));
    QCOMPARE(c[0].tokens_measured_max, std::int64_t{64});
    QCOMPARE(c[1].threads, 1);
    QCOMPARE(c[1].tiles_from, std::optional<std::int64_t>(1));
    QCOMPARE(c[2].shape, std::string("down"));
    QVERIFY(!c[2].tiles_from.has_value());
    QCOMPARE(c[2].tokens_measured_max, std::int64_t{16});
  }

  // The tile kernel beside AVX-512 in the kernel benchmark, with the tile unit emulated (an
  // AMX machine measures its own from one token on).
  void kernelBenchTimesTilesBesideAvx512() {
    const kernels::IsaFeatures& usable = kernels::detect_isa().usable;
    if (!kernels::variant_supported(kernels::CpuVariant::Avx512, usable) || !usable.avx512_bf16)
      QSKIP(
          "this CPU lacks AVX-512 (F, BW, VL, DQ, VNNI) or AVX512_BF16, which the emulated "
          "AMX kernels need; it runs on every CPU that has them, AMX or not");
    measure::KernelBenchOptions options;
    options.shapes = {{"expert up", 40, 96}};
    options.tokens = {3, 17};
    options.threads = {2};
    options.repetitions = 2;
    options.min_sample_seconds = 0.001;
    options.working_set_bytes = 1;
    options.tile_kernel = [&](const kernels::PackedMatrix& w, const kernels::PackedActivations& x,
                              float* y, std::int64_t stride, std::int64_t b0, std::int64_t b1) {
      kernels::packed_matmul_amx_emulated(w, x, y, stride, b0, b1, 1);
    };
    options.formats = {kernels::PackedFormat::Int8, kernels::PackedFormat::Int4,
                       kernels::PackedFormat::Bf16};
    const measure::KernelBenchReport r = measure::run_kernel_benchmark(options);
    QCOMPARE(r.rows.size(), std::size_t{6});  // int8, int4 and bf16, 3 and 17 tokens
    for (const measure::KernelBenchRow& row : r.rows) {
      QVERIFY(row.tiles.has_value() && row.avx512.has_value());
      QCOMPARE(row.tiles->gflops.values.size(), std::size_t{2});
      QCOMPARE(row.avx512->gflops.values.size(), std::size_t{2});
      QVERIFY(row.tiles->gflops.mean() > 0 && row.avx512->gflops.mean() > 0);
      QCOMPARE(row.tiles->weight_bytes, row.packed.weight_bytes);
    }
    QCOMPARE(measure::tile_crossovers(r).size(), std::size_t{3});
    // oneDNN beside them where it takes the format on this CPU (kernels::onednn_refusal).
    for (const measure::KernelBenchRow& row : r.rows) {
      const bool taken =
          row.format == "int8"   ? kernels::onednn_refusal(kernels::PackedFormat::Int8).empty()
          : row.format == "bf16" ? kernels::onednn_refusal(kernels::PackedFormat::Bf16).empty()
                                 : false;
      QCOMPARE(row.onednn.has_value(), taken);
    }
    // Without a tile kernel (every machine without AMX), the rows have none.
    options.tile_kernel = {};
    for (const measure::KernelBenchRow& row : measure::run_kernel_benchmark(options).rows)
      QVERIFY(!row.tiles && !row.avx512);
  }

  // `tandem bench --gguf-products`: a row per block format the file's matrices use (in the
  // order the file first uses them), per token count and per SIMD variant the CPU runs, each
  // over the file's own matrices of that format; expert tensors count each expert.
  void ggufProductsTimeEveryBlockFormatOfTheFile_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("dense, nine formats") << "llama-mixed.gguf";
    QTest::newRow("MoE, IQ experts") << "qwen3moe-iq.gguf";
  }

  void ggufProductsTimeEveryBlockFormatOfTheFile() {
    QFETCH(QString, file);
    const std::string path = kGgufModels + file.toStdString();
    // What the file holds, read here on its own.
    struct Expected {
      std::string format, first;
      std::int64_t matrices = 0;
      std::uint64_t first_bytes = 0, first_weights = 0;
    };
    std::vector<Expected> expected;
    const model::GgufFile gguf(path);
    for (const model::GgufTensorInfo& t : gguf.tensors()) {
      kernels::DType dtype;
      if (t.dims.size() < 2 || !kernels::dtype_from_ggml_type(t.ggml_type, dtype) ||
          !kernels::gguf_matmul_supports(dtype))
        continue;
      const std::string format(kernels::dtype_name(dtype));
      const std::int64_t count = t.dims.size() == 3 ? static_cast<std::int64_t>(t.dims[2]) : 1;
      auto it = std::find_if(expected.begin(), expected.end(),
                             [&](const Expected& e) { return e.format == format; });
      if (it == expected.end()) {
        const auto weights = static_cast<std::int64_t>(t.dims[0] * t.dims[1]);
        expected.push_back({format, count == 1 ? t.name : t.name + " (expert 0)", 0,
                            kernels::dtype_bytes(dtype, weights),
                            static_cast<std::uint64_t>(weights)});
        it = expected.end() - 1;
      }
      it->matrices += count;
    }
    QVERIFY(expected.size() >= 3);
    std::vector<std::string> variants;
    const kernels::IsaFeatures& usable = kernels::detect_isa().usable;
    for (kernels::CpuVariant v : {kernels::CpuVariant::Avx2, kernels::CpuVariant::Avx512})
      if (kernels::variant_supported(v, usable)) variants.emplace_back(kernels::variant_name(v));
    if (variants.empty()) variants.emplace_back("scalar");

    measure::GgufProductBenchOptions options;
    options.path = path;
    options.tokens = {1, 3};
    options.threads = 2;
    options.repetitions = 2;
    options.min_sample_seconds = 0.001;
    options.working_set_bytes = 1;  // one matrix a pass
    const measure::GgufProductReport r = measure::run_gguf_product_benchmark(options);
    QCOMPARE(r.rows.size(), expected.size() * 2 * variants.size());
    std::size_t i = 0;
    for (const Expected& e : expected) {
      for (std::int64_t tokens : {1, 3}) {
        for (const std::string& variant : variants) {
          const measure::GgufProductRow& row = r.rows[i++];
          QCOMPARE(row.format, e.format);
          QCOMPARE(row.first, e.first);
          QCOMPARE(row.matrices, std::int64_t{1});
          QCOMPARE(row.matrices_in_file, e.matrices);
          QCOMPARE(row.pass_bytes, e.first_bytes);
          QCOMPARE(row.tokens, tokens);
          QCOMPARE(row.variant, variant);
          QCOMPARE(row.pass_weights, e.first_weights);
          QCOMPARE(row.weight_gb_per_s.values.size(), std::size_t{2});
          QCOMPARE(row.gflops.values.size(), std::size_t{2});
          QVERIFY(row.weight_gb_per_s.mean() > 0);
          // Both rates from the same seconds: their ratio is the pass's flops per byte.
          const double flops_per_byte = 2.0 * static_cast<double>(tokens) *
                                        static_cast<double>(row.pass_weights) /
                                        static_cast<double>(row.pass_bytes);
          QVERIFY(std::abs(row.gflops.values[0] / row.weight_gb_per_s.values[0] / flops_per_byte -
                           1.0) < 1e-9);
        }
      }
    }
    // A larger working set takes every matrix of a small file into the pass.
    options.working_set_bytes = std::uint64_t{1} << 30;
    options.tokens = {1};
    for (const measure::GgufProductRow& row : measure::run_gguf_product_benchmark(options).rows)
      QCOMPARE(row.matrices, row.matrices_in_file);
    // A variant forced by --cpu-variant is timed alone.
    qputenv("TANDEM_CPU_VARIANT", variants.front().c_str());
    const measure::GgufProductReport forced = measure::run_gguf_product_benchmark(options);
    qunsetenv("TANDEM_CPU_VARIANT");
    QCOMPARE(forced.rows.size(), expected.size());
    for (const measure::GgufProductRow& row : forced.rows) QCOMPARE(row.variant, variants.front());
  }

  // A file whose matrices are all F16 has nothing for the block kernels: a sentence says so
  // and names what it has.
  void ggufProductsRefuseAFileWithoutBlockFormats() {
    measure::GgufProductBenchOptions options;
    options.path = kGgufModels + "qwen3-f16.gguf";
    options.min_sample_seconds = 0.001;
    try {
      measure::run_gguf_product_benchmark(options);
      QFAIL("an F16 file was timed");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      QVERIFY2(what.find("has no matrix in a GGUF block format") != std::string::npos, e.what());
      QVERIFY2(what.find("F16") != std::string::npos, e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestBenchmark)
#include "tst_benchmark.moc"
