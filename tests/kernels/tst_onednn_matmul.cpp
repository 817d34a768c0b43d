// oneDNN's matmul with our packed weights: INT8 equal to the scalar packed reference (the
// same integer sums and scales), BF16 within rounding of it, both within the quantisation
// error of the fp32 product; on shapes that fill no tile, one token to many, several
// slices; and on our threads only, never a team of OpenMP threads of its own.
#include <QtTest>

#include <barrier>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "kernels/cpu/onednn_matmul.h"
#include "tests/support/onednn_hardware.h"
#include "tests/support/random_values.h"

using namespace tandem::kernels;

namespace {

using tandem::test::normal_values;

int threadsInProcess() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

// Skips the test where oneDNN cannot take `format`'s products on this CPU, with its reason
// (which names the instructions missing); fails where the CPU has what oneDNN needs
// (onednn_hardware_for). refusedWhereItWouldBeWrong holds the refusal itself.
#define SKIP_UNLESS_ONEDNN_TAKES(format)                                      \
  do {                                                                        \
    const std::string refusal_ = onednn_refusal(format);                      \
    if (!refusal_.empty()) {                                                  \
      QVERIFY2(!tandem::test::onednn_hardware_for(format), refusal_.c_str()); \
      QSKIP(qPrintable(QString::fromStdString(refusal_)));                    \
    }                                                                         \
  } while (false)

class TestOnednnMatmul : public QObject {
  Q_OBJECT
  int threads_at_start_ = 0;

 private slots:
  void initTestCase() {
    threads_at_start_ = threadsInProcess();
    qInfo("%s", onednn_description().c_str());
  }

  // First, before any other test has run oneDNN on this thread.
  void runsOnOurThreadsOnly() {
    SKIP_UNLESS_ONEDNN_TAKES(PackedFormat::Int8);
    const int rows = 512;
    const int cols = 256;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 3);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    OnednnMatmul m(source, PackedFormat::Int8, 2);
    const int tokens = 64;
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 4);
    std::vector<float> y(static_cast<std::size_t>(tokens * rows));
    m.run(x.data(), tokens, y.data(), rows, serial_for);
    QCOMPARE(threadsInProcess(), threads_at_start_);

    // Two threads, each running half of the slices; the threads are counted while both
    // still exist. OpenMP's default would add a team for each.
    int during = 0;
    auto two_threads = [&](std::int64_t n,
                           const std::function<void(std::int64_t, std::int64_t)>& body) {
      const std::int64_t half = n / 2;
      std::barrier<> sync(2);
      std::thread other([&] {
        body(half, n);
        sync.arrive_and_wait();
        sync.arrive_and_wait();
      });
      body(0, half);
      sync.arrive_and_wait();
      during = threadsInProcess();
      sync.arrive_and_wait();
      other.join();
    };
    m.run(x.data(), tokens, y.data(), rows, two_threads);
    QCOMPARE(during, threads_at_start_ + 1);
  }

  void int8EqualsPackedReference_data() { shapes(); }
  void int8EqualsPackedReference() { compareWithPacked(PackedFormat::Int8); }
  void bf16MatchesPackedReference_data() { shapes(); }
  void bf16MatchesPackedReference() { compareWithPacked(PackedFormat::Bf16); }

  // Against plain fp32 arithmetic: the error of quantised weights and activations, bounded
  // per output by sum_k |x_k| |dw_k| + |w_k| |dx_k| + |dw_k| |dx_k|.
  void withinQuantisationErrorOfFp32_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("tokens");
    for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Bf16}) {
      for (int tokens : {1, 7, 64}) {
        QTest::newRow(qPrintable(
            QStringLiteral("%1 t%2").arg(f == PackedFormat::Int8 ? "int8" : "bf16").arg(tokens)))
            << int(f) << tokens;
      }
    }
  }

  void withinQuantisationErrorOfFp32() {
    QFETCH(int, format);
    QFETCH(int, tokens);
    const PackedFormat f = static_cast<PackedFormat>(format);
    SKIP_UNLESS_ONEDNN_TAKES(f);
    const int rows = 37;
    const int cols = 300;
    const auto w = normal_values(static_cast<std::size_t>(rows * cols), 21);
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 22);
    WeightMatrix source;
    source.data = w.data();
    source.rows = rows;
    source.cols = cols;
    OnednnMatmul m(source, f, 2);
    std::vector<float> y(static_cast<std::size_t>(tokens * rows));
    m.run(x.data(), tokens, y.data(), rows, serial_for);
    for (int t = 0; t < tokens; ++t) {
      const float* xt = x.data() + t * cols;
      float x_max = 0.0f;
      for (int c = 0; c < cols; ++c) x_max = std::max(x_max, std::abs(xt[c]));
      for (int r = 0; r < rows; ++r) {
        const float* wr = w.data() + r * cols;
        float w_max = 0.0f;
        for (int c = 0; c < cols; ++c) w_max = std::max(w_max, std::abs(wr[c]));
        double want = 0.0;
        double bound = 1e-4;
        for (int c = 0; c < cols; ++c) {
          want += static_cast<double>(xt[c]) * wr[c];
          // INT8: half a step of the row's or token's scale; BF16: 2^-9 relative per value.
          const double dw = f == PackedFormat::Int8 ? w_max / 127.0 / 2 : std::abs(wr[c]) / 256;
          const double dx = f == PackedFormat::Int8 ? x_max / 127.0 / 2 : std::abs(xt[c]) / 256;
          bound += std::abs(xt[c]) * dw + std::abs(wr[c]) * dx + dw * dx;
        }
        const float got = y[static_cast<std::size_t>(t * rows + r)];
        QVERIFY2(std::abs(got - want) <= bound,
                 qPrintable(QStringLiteral("t%1 r%2: %3 vs %4 (bound %5)")
                                .arg(t)
                                .arg(r)
                                .arg(got)
                                .arg(want)
                                .arg(bound)));
      }
    }
  }

  void rejectsAnotherFormat() {
    const auto w = normal_values(16 * 8, 5);
    WeightMatrix source;
    source.data = w.data();
    source.rows = 16;
    source.cols = 8;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, OnednnMatmul(pack_int4(source, 8), 1));
    QVERIFY(!onednn_refusal(PackedFormat::Int4).empty());
    SKIP_UNLESS_ONEDNN_TAKES(PackedFormat::Int8);
    OnednnMatmul m(source, PackedFormat::Int8, 1);
    PackedActivations bf16;
    const auto x = normal_values(8, 6);
    pack_activations(x.data(), 1, 8, PackedFormat::Bf16, bf16, 0);
    std::vector<float> y(16);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, m.run(bf16, y.data(), 16, serial_for));
  }

  // On every CPU: where oneDNN takes a format, a product whose integer pairs pass 16 bits
  // (every weight and activation +-1 with equal signs: 127 * 127 in each, 255 * 127 as
  // oneDNN's unsigned activations see it) comes out exact; where it is refused, building
  // one throws the refusal. A CPU without VNNI must refuse INT8: oneDNN adds pairs of byte
  // products in 16 bits there.
  void refusedWhereItWouldBeWrong_data() {
    QTest::addColumn<int>("format");
    QTest::newRow("int8") << int(PackedFormat::Int8);
    QTest::newRow("bf16") << int(PackedFormat::Bf16);
  }

  void refusedWhereItWouldBeWrong() {
    QFETCH(int, format);
    const auto f = static_cast<PackedFormat>(format);
    const int rows = 40, cols = 256;
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    std::vector<float> x(static_cast<std::size_t>(64 * cols));
    for (int c = 0; c < cols; ++c) {
      const float sign = (c * 7) % 5 < 2 ? -1.0f : 1.0f;
      for (int r = 0; r < rows; ++r) w[static_cast<std::size_t>(r * cols + c)] = sign;
      for (int t = 0; t < 64; ++t) x[static_cast<std::size_t>(t * cols + c)] = sign;
    }
    WeightMatrix source;
    source.data = w.data();
    source.rows = rows;
    source.cols = cols;
    const IsaFeatures& usable = detect_isa().usable;
    if (f == PackedFormat::Int8 && !usable.avx512_vnni && !usable.avx_vnni)
      QVERIFY(!onednn_refusal(f).empty());
    if (tandem::test::onednn_hardware_for(f)) QCOMPARE(onednn_refusal(f), std::string());
    if (const std::string refusal = onednn_refusal(f); !refusal.empty()) {
      qInfo("refused: %s", refusal.c_str());
      try {
        OnednnMatmul m(source, f, 2);
        QFAIL("built a oneDNN product that onednn_refusal refuses");
      } catch (const std::runtime_error& e) {
        QCOMPARE(std::string(e.what()), refusal);
      }
      return;
    }
    OnednnMatmul m(source, f, 2);
    for (int tokens : {1, 5, 64}) {
      std::vector<float> y(static_cast<std::size_t>(tokens * rows));
      m.run(x.data(), tokens, y.data(), rows, serial_for);
      for (float v : y) {
        QVERIFY2(
            std::abs(v - cols) <= 1e-3f * cols,
            qPrintable(QStringLiteral("%1 at %2 tokens, not %3").arg(v).arg(tokens).arg(cols)));
      }
    }
  }

 private:
  void shapes() {
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("slices");
    // Rows and columns off every tile size (37 x 30, 5 x 3, 64 x 257), whole tiles (48 x 384),
    // a wide product (2048 x 256); one slice, and more slices than threads.
    const std::vector<std::pair<int, int>> sizes = {{37, 30},  {5, 3},    {16, 64},
                                                    {64, 257}, {48, 384}, {2048, 256}};
    for (int tokens : {1, 7, 64}) {
      for (auto [rows, cols] : sizes) {
        for (int slices : {1, 3}) {
          QTest::newRow(qPrintable(
              QStringLiteral("t%1 %2x%3 s%4").arg(tokens).arg(rows).arg(cols).arg(slices)))
              << tokens << rows << cols << slices;
        }
      }
    }
  }

  void compareWithPacked(PackedFormat f) {
    QFETCH(int, tokens);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, slices);
    SKIP_UNLESS_ONEDNN_TAKES(f);
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 11);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix packed = f == PackedFormat::Int8 ? pack_int8(source) : pack_bf16(source);
    OnednnMatmul m(packed, slices);
    QCOMPARE(m.rows(), rows);
    QCOMPARE(m.cols(), cols);
    QVERIFY(m.slices() >= 1 && m.slices() <= slices);
    const QString impl = QString::fromStdString(m.implementation(tokens));
    QVERIFY2(!impl.startsWith(QLatin1String("ref")),
             qPrintable(QStringLiteral("oneDNN fell back to %1").arg(impl)));
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 12);
    // oneDNN takes INT8 activations with one scale per token.
    PackedActivations a;
    pack_activations(x.data(), tokens, cols, f, a, kWholeRow);
    // y has a wider stride than rows, and sentinels there must stay untouched.
    const std::int64_t stride = rows + 3;
    std::vector<float> want(static_cast<std::size_t>(tokens * stride), -7.0f);
    std::vector<float> got(want);
    if (f == PackedFormat::Int8) {
      // oneDNN takes one weight scale per row: each row of the packed weights (a scale per 32
      // columns) rounded again on its largest weight's step.
      std::vector<float> row(static_cast<std::size_t>(cols));
      for (int r = 0; r < rows; ++r) {
        unpack_row(packed, r, row.data());
        float max_abs = 0.0f;
        for (float v : row) max_abs = std::max(max_abs, std::abs(v));
        const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
        for (int t = 0; t < tokens; ++t) {
          double sum = 0;
          for (int c = 0; c < cols; ++c) {
            const double q = std::clamp(std::nearbyint(row[static_cast<std::size_t>(c)] / scale),
                                        -127.0f, 127.0f);
            sum += q * a.q[static_cast<std::size_t>(t * a.cols_padded + c)];
          }
          want[static_cast<std::size_t>(t * stride + r)] =
              static_cast<float>(sum * scale * a.scale[static_cast<std::size_t>(t)]);
        }
      }
    } else {
      packed_matmul_scalar(packed, a, want.data(), stride, 0, packed.blocks);
    }
    m.run(x.data(), tokens, got.data(), stride, serial_for);
    float largest = 0.0f;
    for (float v : want) largest = std::max(largest, std::abs(v));
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (f == PackedFormat::Int8) {
        // The same integer products, exact on both sides; the scales meet in another order.
        QVERIFY2(std::abs(got[i] - want[i]) <= 2e-5f * largest,
                 qPrintable(QStringLiteral("%1 vs %2 at %3").arg(got[i]).arg(want[i]).arg(i)));
      } else {
        QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * (1.0f + std::abs(want[i])),
                 qPrintable(QStringLiteral("%1 vs %2 at %3").arg(got[i]).arg(want[i]).arg(i)));
      }
    }
  }
};

QTEST_GUILESS_MAIN(TestOnednnMatmul)
#include "tst_onednn_matmul.moc"
