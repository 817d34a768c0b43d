// Every packed-weight kernel variant this CPU can run against the scalar reference, on
// shapes that are and are not multiples of the tiles, from one token to many; and the
// scalar reference against plain fp32 arithmetic within the quantisation error.
#include <QtTest>
#include <random>

#include "kernels/cpu/packed_matmul.h"

using namespace tandem::kernels;

namespace {

std::vector<float> randomValues(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

using Kernel = void (*)(const PackedMatrix&, const PackedActivations&, float*, std::int64_t, std::int64_t, std::int64_t);

}  // namespace

class TestPackedMatmul : public QObject {
  Q_OBJECT
 private slots:
  void variantsMatchScalar_data() {
    QTest::addColumn<int>("variant");
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    const IsaFeatures& usable = detect_isa().usable;
    for (CpuVariant v : {CpuVariant::Avx2, CpuVariant::Avx512}) {
      // A variant the CPU lacks cannot run here; the scalar one always runs.
      if (!variant_supported(v, usable)) continue;
      if (v == CpuVariant::Avx512 && !usable.avx512_bf16) continue;
      for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Bf16}) {
        for (int tokens : {1, 3, 8, 9, 17}) {
          for (auto [rows, cols] : {std::pair{16, 64}, {37, 30}, {64, 257}, {5, 3}}) {
            const QString name = QStringLiteral("%1 %2 t%3 %4x%5")
                                     .arg(QString::fromUtf8(variant_name(v).data()),
                                          f == PackedFormat::Int8 ? QStringLiteral("int8") : QStringLiteral("bf16"))
                                     .arg(tokens)
                                     .arg(rows)
                                     .arg(cols);
            QTest::newRow(qPrintable(name)) << int(v) << int(f) << tokens << rows << cols;
          }
        }
      }
    }
  }

  void variantsMatchScalar() {
    QFETCH(int, variant);
    QFETCH(int, format);
    QFETCH(int, tokens);
    QFETCH(int, rows);
    QFETCH(int, cols);
    const auto values = randomValues(static_cast<std::size_t>(rows * cols), 11);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedFormat f = static_cast<PackedFormat>(format);
    const PackedMatrix w = f == PackedFormat::Int8 ? pack_int8(source) : pack_bf16(source);
    const auto x = randomValues(static_cast<std::size_t>(tokens * cols), 12);
    PackedActivations a;
    pack_activations(x.data(), tokens, cols, f, a);
    // y has a wider stride than rows, and sentinels there must stay untouched.
    const std::int64_t stride = rows + 3;
    std::vector<float> want(static_cast<std::size_t>(tokens * stride), -7.0f);
    std::vector<float> got(want);
    packed_matmul_scalar(w, a, want.data(), stride, 0, w.blocks);
    packed_matmul(w, a, got.data(), stride, 0, w.blocks, static_cast<CpuVariant>(variant));
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (f == PackedFormat::Int8) {
        QCOMPARE(got[i], want[i]);  // the same integer sums, scaled in the same order
      } else {
        QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * (1.0f + std::abs(want[i])),
                 qPrintable(QStringLiteral("%1 vs %2 at %3").arg(got[i]).arg(want[i]).arg(i)));
      }
    }
  }

  void scalarIsCloseToFloat_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<double>("tolerance");
    QTest::newRow("int8") << int(PackedFormat::Int8) << 0.03;
    QTest::newRow("bf16") << int(PackedFormat::Bf16) << 0.01;
  }

  // Quantisation error: relative to the size of the result's typical magnitude.
  void scalarIsCloseToFloat() {
    QFETCH(int, format);
    QFETCH(double, tolerance);
    const int tokens = 4, rows = 48, cols = 256;
    const auto values = randomValues(static_cast<std::size_t>(rows * cols), 21);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedFormat f = static_cast<PackedFormat>(format);
    const PackedMatrix w = f == PackedFormat::Int8 ? pack_int8(source) : pack_bf16(source);
    const auto x = randomValues(static_cast<std::size_t>(tokens * cols), 22);
    PackedActivations a;
    pack_activations(x.data(), tokens, cols, f, a);
    std::vector<float> got(static_cast<std::size_t>(tokens * rows));
    packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
    double err = 0, norm = 0;
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        double exact = 0;
        for (int c = 0; c < cols; ++c) exact += double(x[t * cols + c]) * values[r * cols + c];
        err += (got[t * rows + r] - exact) * (got[t * rows + r] - exact);
        norm += exact * exact;
      }
    }
    QVERIFY2(std::sqrt(err / norm) < tolerance, qPrintable(QString::number(std::sqrt(err / norm))));
  }

  void allBlocksInParallelChunks() {
    const int rows = 100, cols = 64, tokens = 2;
    const auto values = randomValues(static_cast<std::size_t>(rows * cols), 31);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int8(source);
    const auto x = randomValues(static_cast<std::size_t>(tokens * cols), 32);
    PackedActivations a;
    pack_activations(x.data(), tokens, cols, PackedFormat::Int8, a);
    std::vector<float> want(static_cast<std::size_t>(tokens * rows)), got(want.size());
    packed_matmul_scalar(w, a, want.data(), rows, 0, w.blocks);
    const ParallelFor oneAtATime = [](std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body) {
      for (std::int64_t i = n - 1; i >= 0; --i) body(i, i + 1);
    };
    packed_matmul_all(w, a, got.data(), rows, CpuVariant::Scalar, oneAtATime);
    QCOMPARE(got, want);
  }
};

QTEST_GUILESS_MAIN(TestPackedMatmul)
#include "tst_packed_matmul.moc"
