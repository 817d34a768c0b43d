// The reference matrix products and type conversions, against straightforward loops.
#include <QtTest>
#include <random>

#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/isa.h"
#include "tests/support/random_values.h"

using namespace tandem::kernels;

namespace {

std::vector<float> randomVector(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Stored {
  std::vector<std::uint8_t> bytes;
  std::vector<float> scales;
  std::vector<float> dense;  // the exact values the stored matrix represents
};

// Stores `values` [rows x cols] as `type`; fp8 gets per-block scales.
Stored store(const std::vector<float>& values, std::int64_t rows, std::int64_t cols, DType type,
             std::int64_t block) {
  Stored s;
  const std::size_t n = values.size();
  s.bytes.resize(n * dtype_size(type));
  s.dense.resize(n);
  if (type == DType::F32) {
    std::memcpy(s.bytes.data(), values.data(), n * 4);
    s.dense = values;
  } else if (type == DType::BF16) {
    auto* p = reinterpret_cast<std::uint16_t*>(s.bytes.data());
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = f32_to_bf16(values[i]);
      s.dense[i] = bf16_to_f32(p[i]);
    }
  } else if (type == DType::F16) {
    auto* p = reinterpret_cast<std::uint16_t*>(s.bytes.data());
    for (std::size_t i = 0; i < n; ++i) {
      p[i] = f32_to_f16(values[i]);
      s.dense[i] = f16_to_f32(p[i]);
    }
  } else if (type == DType::F8E4M3) {
    // Encode by searching the 256 codes for the nearest value: slow, obviously right.
    const std::int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
    s.scales.assign(static_cast<std::size_t>(br * bc), 0.0f);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        float& sc = s.scales[static_cast<std::size_t>((r / block) * bc + c / block)];
        sc = std::max(sc, std::abs(values[static_cast<std::size_t>(r * cols + c)]) / 448.0f);
      }
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * cols + c);
        const float sc = s.scales[static_cast<std::size_t>((r / block) * bc + c / block)];
        int best = 0;
        for (int code = 0; code < 256; ++code) {
          const float v = f8e4m3_to_f32(static_cast<std::uint8_t>(code));
          if (std::isnan(v)) continue;
          if (std::abs(v - values[i] / sc) <
              std::abs(f8e4m3_to_f32(static_cast<std::uint8_t>(best)) - values[i] / sc))
            best = code;
        }
        s.bytes[i] = static_cast<std::uint8_t>(best);
        s.dense[i] = f8e4m3_to_f32(static_cast<std::uint8_t>(best)) * sc;
      }
    }
  }
  return s;
}

}  // namespace

class TestDenseMatmul : public QObject {
  Q_OBJECT
 private slots:
  // FP16 rows convert eight values an instruction where the CPU has F16C: every one of the
  // 65 536 half values, in runs and at odd offsets, to the bit of f16_to_f32 (subnormals,
  // infinities, and NaNs with their payloads as they are).
  void f16RowsConvertAsEachValue() {
    std::vector<std::uint16_t> all(65536);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
    for (std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
      std::vector<float> out(all.size() - offset);
      convert_to_f32(DType::F16, all.data() + offset, out.data(), out.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        const float want = f16_to_f32(all[i + offset]);
        std::uint32_t a = 0, b = 0;
        std::memcpy(&a, &out[i], 4);
        std::memcpy(&b, &want, 4);
        QVERIFY2(a == b, qPrintable(QStringLiteral("half 0x%1: 0x%2 against 0x%3")
                                        .arg(all[i + offset], 4, 16, QLatin1Char('0'))
                                        .arg(a, 8, 16, QLatin1Char('0'))
                                        .arg(b, 8, 16, QLatin1Char('0'))));
      }
    }
  }

  void conversions() {
    QCOMPARE(bf16_to_f32(0x3f80), 1.0f);
    QCOMPARE(bf16_to_f32(0xc040), -3.0f);
    QCOMPARE(f32_to_bf16(1.0f), std::uint16_t{0x3f80});
    QCOMPARE(f32_to_bf16(1.00390625f), std::uint16_t{0x3f80});  // a tie rounds to even
    QCOMPARE(f16_to_f32(0x3c00), 1.0f);
    QCOMPARE(f16_to_f32(0xc000), -2.0f);
    QCOMPARE(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    QCOMPARE(f16_to_f32(0x7bff), 65504.0f);
    QVERIFY(std::isinf(f16_to_f32(0x7c00)));
    // Every half against IEEE's definition: (-1)^s 2^(e - 15) (1 + m / 1024), subnormals
    // 2^-14 m / 1024, e = 31 infinity or NaN.
    for (std::uint32_t v = 0; v < 0x10000; ++v) {
      const int e = (v >> 10) & 31, m = v & 1023;
      const float sign = (v & 0x8000) ? -1.0f : 1.0f;
      const float got = f16_to_f32(static_cast<std::uint16_t>(v));
      if (e == 31) {
        QVERIFY(m == 0 ? std::isinf(got) && std::signbit(got) == (sign < 0) : std::isnan(got));
        continue;
      }
      const float want = sign * (e == 0 ? std::ldexp(static_cast<float>(m), -24)
                                        : std::ldexp(1.0f + m / 1024.0f, e - 15));
      QVERIFY2(got == want && std::signbit(got) == std::signbit(want),
               qPrintable(QString::number(v)));
    }
    QCOMPARE(f8e4m3_to_f32(0x38), 1.0f);
    QCOMPARE(f8e4m3_to_f32(0x7e), 448.0f);  // the largest finite value
    QCOMPARE(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
    QCOMPARE(f8e4m3_to_f32(0xb8), -1.0f);
    QVERIFY(std::isnan(f8e4m3_to_f32(0x7f)));
    QVERIFY(std::isnan(f8e4m3_to_f32(0xff)));
    float out[3];
    const std::uint16_t h[3] = {0x3c00, 0x4000, 0xbc00};
    convert_to_f32(DType::F16, h, out, 3);
    QCOMPARE(out[1], 2.0f);
  }

  void matmulAgainstLoops_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    for (DType t : {DType::F32, DType::BF16, DType::F8E4M3}) {
      const std::string name(dtype_name(t));
      QTest::newRow((name + " 1 token").c_str()) << int(t) << 1 << 37 << 53;
      QTest::newRow((name + " 7 tokens").c_str()) << int(t) << 7 << 70 << 100;
      QTest::newRow((name + " odd").c_str()) << int(t) << 3 << 5 << 17;
    }
  }

  void matmulAgainstLoops() {
    QFETCH(int, type);
    QFETCH(int, m);
    QFETCH(int, rows);
    QFETCH(int, cols);
    const DType t = static_cast<DType>(type);
    const auto values = randomVector(static_cast<std::size_t>(rows * cols), 1);
    const Stored s = store(values, rows, cols, t, 16);
    WeightMatrix w;
    w.dtype = t;
    w.data = s.bytes.data();
    w.rows = rows;
    w.cols = cols;
    w.block_rows = w.block_cols = 16;
    if (!s.scales.empty()) w.block_scale = s.scales.data();
    const auto x = randomVector(static_cast<std::size_t>(m * cols), 2);
    std::vector<float> y(static_cast<std::size_t>(m * rows));
    // Split into uneven chunks the way a thread pool would.
    const ParallelFor chunked = [](std::int64_t n,
                                   const std::function<void(std::int64_t, std::int64_t)>& body) {
      for (std::int64_t b = 0; b < n; b += 3) body(b, std::min(n, b + 3));
    };
    matmul_xwt(x.data(), m, w, y.data(), rows, chunked);
    for (int i = 0; i < m; ++i) {
      for (int n = 0; n < rows; ++n) {
        double want = 0;
        for (int k = 0; k < cols; ++k) want += double(x[i * cols + k]) * s.dense[n * cols + k];
        QVERIFY2(std::abs(y[i * rows + n] - want) < 1e-4 * (1 + std::abs(want)),
                 qPrintable(QString::number(want)));
      }
    }

    // x·W with a row slice: the block scales must follow the rows' true positions.
    const int first = rows / 3, count = rows - first;
    const WeightMatrix part = w.slice_rows(first, count);
    const auto xr = randomVector(static_cast<std::size_t>(m * count), 3);
    std::vector<float> z(static_cast<std::size_t>(m * cols));
    matmul_xw(xr.data(), m, part, z.data(), serial_for);
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < cols; ++c) {
        double want = 0;
        for (int r = 0; r < count; ++r)
          want += double(xr[i * count + r]) * s.dense[(first + r) * cols + c];
        QVERIFY(std::abs(z[i * cols + c] - want) < 1e-4 * (1 + std::abs(want)));
      }
    }
  }

  // Many tokens by many rows go four by four (the last few tokens by eight rows), and each
  // result must still be dot_f32's to the bit (decode and prompts agree, and so do the
  // threads' splits): fp32, BF16 and FP16 weights (read in place), token and row counts past
  // whole fours and eights, widths past whole 16s.
  void matmulEqualsRowDots_data() {
    QTest::addColumn<int>("type");
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      const std::string name(dtype_name(t));
      QTest::newRow((name + " 9 x 37 x 133").c_str()) << int(t) << 9 << 37 << 133;
      QTest::newRow((name + " 16 x 128 x 2048").c_str()) << int(t) << 16 << 128 << 2048;
      QTest::newRow((name + " 4 x 4 x 8").c_str()) << int(t) << 4 << 4 << 8;
      // A decoded token's router (eight rows at a time, then the rows left), and three tokens.
      QTest::newRow((name + " 1 x 128 x 2048").c_str()) << int(t) << 1 << 128 << 2048;
      QTest::newRow((name + " 3 x 21 x 133").c_str()) << int(t) << 3 << 21 << 133;
      // A prompt's tokens split into tasks of 32, the last of 6.
      QTest::newRow((name + " 70 x 37 x 133").c_str()) << int(t) << 70 << 37 << 133;
    }
  }

  void matmulEqualsRowDots() {
    QFETCH(int, type);
    QFETCH(int, m);
    QFETCH(int, rows);
    QFETCH(int, cols);
    const DType t = static_cast<DType>(type);
    const Stored s =
        store(randomVector(static_cast<std::size_t>(rows * cols), 4), rows, cols, t, 16);
    WeightMatrix w;
    w.dtype = t;
    w.data = s.bytes.data();
    w.rows = rows;
    w.cols = cols;
    const auto x = randomVector(static_cast<std::size_t>(m * cols), 5);
    const int stride = rows + 3;
    std::vector<float> y(static_cast<std::size_t>(m * stride), -1.0f);
    // Uneven chunks, as a thread pool hands them out.
    const ParallelFor chunked = [](std::int64_t n,
                                   const std::function<void(std::int64_t, std::int64_t)>& body) {
      for (std::int64_t b = n; b > 0; b -= 2) body(std::max<std::int64_t>(0, b - 2), b);
    };
    matmul_xwt(x.data(), m, w, y.data(), stride, chunked);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      w.row_f32(r, row.data());
      for (int i = 0; i < m; ++i) {
        const float want = dot_f32(x.data() + i * cols, row.data(), cols);
        QVERIFY2(y[static_cast<std::size_t>(i * stride + r)] == want,
                 qPrintable(QStringLiteral("token %1, row %2: %3 vs %4")
                                .arg(i)
                                .arg(r)
                                .arg(y[static_cast<std::size_t>(i * stride + r)], 0, 'g', 9)
                                .arg(want, 0, 'g', 9)));
      }
    }
    for (int i = 0; i < m; ++i)
      for (int j = rows; j < stride; ++j)
        QCOMPARE(y[static_cast<std::size_t>(i * stride + j)], -1.0f);
  }

  // FP16 rows are read in place by the AVX-512 variant and converted first by the others:
  // both give dot_f32's results to the bit, for a decoded token and for a prompt's rows.
  void f16RowsAgreeAcrossVariants() {
    if (!variant_supported(CpuVariant::Avx512, detect_isa().usable))
      QSKIP(
          "needs a CPU with AVX-512, which this one lacks: only the AVX-512 variant reads FP16 "
          "rows in place (the others convert them first)");
    constexpr int rows = 37, cols = 133;
    const Stored s = store(randomVector(rows * cols, 21), rows, cols, DType::F16, 16);
    WeightMatrix w;
    w.dtype = DType::F16;
    w.data = s.bytes.data();
    w.rows = rows;
    w.cols = cols;
    for (int m : {1, 6}) {
      const auto x = randomVector(static_cast<std::size_t>(m * cols), 22);
      std::vector<float> in_place(static_cast<std::size_t>(m * rows)), converted(in_place.size());
      setenv("TANDEM_CPU_VARIANT", "avx512", 1);
      matmul_xwt(x.data(), m, w, in_place.data(), rows, serial_for);
      setenv("TANDEM_CPU_VARIANT", "avx2", 1);
      matmul_xwt(x.data(), m, w, converted.data(), rows, serial_for);
      unsetenv("TANDEM_CPU_VARIANT");
      for (int i = 0; i < m; ++i) {
        for (int r = 0; r < rows; ++r) {
          const float want = dot_f32(x.data() + i * cols, s.dense.data() + r * cols, cols);
          QCOMPARE(in_place[static_cast<std::size_t>(i * rows + r)], want);
          QCOMPARE(converted[static_cast<std::size_t>(i * rows + r)], want);
        }
      }
    }
  }

  // x·W reads FP32 and BF16 rows where they lie and converts other formats once per task; a
  // BF16 matrix, the same values in FP32 and in FP16 (BF16's values with few bits, exact in
  // both) give the same results to the bit, in whole blocks of 64 columns and a narrower last
  // one, one token and several.
  void matmulXwInPlaceEqualsConverted_data() {
    QTest::addColumn<int>("m");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::newRow("a decoded token's absorbed key, 1 x 128 x 512") << 1 << 128 << 512;
    QTest::newRow("6 x 37 x 133") << 6 << 37 << 133;
    QTest::newRow("3 x 5 x 40") << 3 << 5 << 40;
  }
  void matmulXwInPlaceEqualsConverted() {
    QFETCH(int, m);
    QFETCH(int, rows);
    QFETCH(int, cols);
    const std::size_t n = static_cast<std::size_t>(rows * cols);
    std::vector<float> values = randomVector(n, 11);
    // Multiples of 1/16 below 8 in size: at most 7 significant bits, exact in BF16 and FP16.
    for (float& v : values) v = std::clamp(std::round(v * 16.0f) / 16.0f, -7.9375f, 7.9375f);
    std::vector<std::uint16_t> b16(n), f16(n);
    for (std::size_t i = 0; i < n; ++i) {
      b16[i] = f32_to_bf16(values[i]);
      f16[i] = f32_to_f16(values[i]);
      QCOMPARE(bf16_to_f32(b16[i]), values[i]);
      QCOMPARE(f16_to_f32(f16[i]), values[i]);
    }
    const auto x = randomVector(static_cast<std::size_t>(m * rows), 12);
    const auto product = [&](DType t, const void* data) {
      WeightMatrix w;
      w.dtype = t;
      w.data = data;
      w.rows = rows;
      w.cols = cols;
      std::vector<float> y(static_cast<std::size_t>(m * cols), -1.0f);
      matmul_xw(x.data(), m, w, y.data(), serial_for);
      return y;
    };
    const std::vector<float> f32 = product(DType::F32, values.data());
    const std::vector<float> bf16 = product(DType::BF16, b16.data());
    const std::vector<float> half = product(DType::F16, f16.data());
    for (std::size_t i = 0; i < f32.size(); ++i) {
      QVERIFY2(bf16[i] == f32[i] && half[i] == f32[i], qPrintable(QStringLiteral("%1: %2, %3, %4")
                                                                      .arg(i)
                                                                      .arg(f32[i], 0, 'g', 9)
                                                                      .arg(bf16[i], 0, 'g', 9)
                                                                      .arg(half[i], 0, 'g', 9)));
    }
    // And each is the plain loop's sum to float rounding.
    for (int i = 0; i < m; ++i) {
      for (int c = 0; c < cols; ++c) {
        double want = 0;
        for (int r = 0; r < rows; ++r) want += double(x[i * rows + r]) * values[r * cols + c];
        QVERIFY(std::abs(f32[i * cols + c] - want) < 1e-4 * (1 + std::abs(want)));
      }
    }
  }

  // The vectorised SiLU(gate) * up, and SiLU alone, against double precision, over values from far
  // negative (e^-x overflows there) to far positive, with and without a tail after the 16-wide
  // part.
  void siluMulMatchesDouble() {
    for (int n : {1, 15, 16, 33, 1000}) {
      std::vector<float> gate(static_cast<std::size_t>(n)), up(gate.size());
      for (int i = 0; i < n; ++i) {
        gate[static_cast<std::size_t>(i)] =
            -120.0f + 240.0f * static_cast<float>(i) / static_cast<float>(n);
        up[static_cast<std::size_t>(i)] = 0.5f + static_cast<float>(i % 7);
      }
      gate[0] = 0.3f;
      std::vector<double> want(gate.size());
      for (std::size_t i = 0; i < gate.size(); ++i)
        want[i] = gate[i] / (1.0 + std::exp(-double(gate[i]))) * up[i];
      std::vector<float> alone = gate;
      silu_mul(gate.data(), up.data(), n);
      silu(alone.data(), n);  // SiLU alone: the same without the product
      for (std::size_t i = 0; i < gate.size(); ++i) {
        QVERIFY2(
            std::abs(gate[i] - want[i]) <= 1e-6 * std::abs(want[i]) + 1e-30,
            qPrintable(
                QStringLiteral("n %1 at %2: %3 vs %4").arg(n).arg(i).arg(gate[i]).arg(want[i])));
        const double silu_want = want[i] / up[i];
        QVERIFY2(std::abs(alone[i] - silu_want) <= 1e-6 * std::abs(silu_want) + 1e-30,
                 qPrintable(QStringLiteral("silu, n %1 at %2: %3 vs %4")
                                .arg(n)
                                .arg(i)
                                .arg(alone[i])
                                .arg(silu_want)));
      }
    }
  }

  // RMSNorm against double precision, in place and not, with values of very different sizes
  // (so a float sum of squares in one order would lose the small ones) and of one size (where
  // every lane's share counts), for lengths with and without a tail after the 256-value
  // stretches, and rows shorter than one (heads of 64 and 128 values, one short stretch; 200,
  // one with a tail).
  void rmsNormMatchesDouble() {
    for (bool mixed : {true, false})
      for (int n : {1, 17, 64, 128, 200, 256, 300, 2048, 7168}) {
        std::vector<float> x(static_cast<std::size_t>(n)), w(x.size());
        for (int i = 0; i < n; ++i) {
          x[static_cast<std::size_t>(i)] =
              (mixed && i % 97 == 0 ? 300.0f : 0.01f) * std::sin(static_cast<float>(i) + 0.5f);
          w[static_cast<std::size_t>(i)] = 0.5f + static_cast<float>(i % 5) * 0.25f;
        }
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        const double inv = 1.0 / std::sqrt(ss / n + 1e-6);
        std::vector<float> y(x.size()), in_place = x;
        rms_norm_f32(x.data(), w.data(), n, 1e-6, y.data());
        rms_norm_f32(in_place.data(), w.data(), n, 1e-6, in_place.data());
        QCOMPARE(in_place, y);
        for (std::size_t i = 0; i < x.size(); ++i) {
          const double want = x[i] * inv * w[i];
          QVERIFY2(std::abs(y[i] - want) <= 1e-6 * std::abs(want) + 1e-30,
                   qPrintable(QStringLiteral("n %1 (%2) at %3: %4 vs %5")
                                  .arg(n)
                                  .arg(mixed ? "mixed" : "even")
                                  .arg(i)
                                  .arg(y[i])
                                  .arg(want)));
        }
      }
  }

  // The delta rule's fused state-row update against double precision, with and without a
  // tail after the 16-wide part.
  void decayUpdateRowMatchesDouble() {
    for (int n : {1, 15, 16, 33, 130}) {
      const auto count = static_cast<std::size_t>(n);
      std::vector<float> s = tandem::test::normal_values(count, 61),
                         u = tandem::test::normal_values(count, 62),
                         o = tandem::test::normal_values(count, 63);
      std::vector<double> want_s(count), want_o(count);
      for (std::size_t i = 0; i < count; ++i) {
        want_s[i] = 0.75 * double(s[i]) + -1.25 * double(u[i]);
        want_o[i] = double(o[i]) + 0.5 * want_s[i];
      }
      decay_update_row(s.data(), 0.75f, -1.25f, u.data(), 0.5f, o.data(), n);
      for (std::size_t i = 0; i < count; ++i) {
        QVERIFY2(std::abs(s[i] - want_s[i]) <= 1e-6 * (1 + std::abs(want_s[i])),
                 qPrintable(QStringLiteral("n %1, s at %2").arg(n).arg(i)));
        QVERIFY2(std::abs(o[i] - want_o[i]) <= 1e-6 * (1 + std::abs(want_o[i])),
                 qPrintable(QStringLiteral("n %1, o at %2").arg(n).arg(i)));
      }
    }
  }

  // gpt-oss's clamped SwiGLU against double precision: values inside and beyond the clamp
  // (7), where gate is clamped from above only and up on both sides.
  void clampedSwigluMatchesDouble() {
    const Glu g{Glu::Kind::ClampedSwiglu, 1.702f, 7.0f};
    for (int n : {1, 15, 16, 33, 1000}) {
      std::vector<float> gate(static_cast<std::size_t>(n)), up(gate.size());
      for (int i = 0; i < n; ++i) {
        gate[static_cast<std::size_t>(i)] =
            -30.0f + 60.0f * static_cast<float>(i) / static_cast<float>(n);
        up[static_cast<std::size_t>(i)] = -12.0f + static_cast<float>((i * 5) % 25);
      }
      gate[0] = 9.0f;  // above the clamp
      std::vector<double> want(gate.size());
      for (std::size_t i = 0; i < gate.size(); ++i) {
        const double gi = std::min(double(gate[i]), 7.0);
        const double ui = std::clamp(double(up[i]), -7.0, 7.0);
        want[i] = gi / (1.0 + std::exp(-1.702 * gi)) * (ui + 1.0);
      }
      glu(g, gate.data(), up.data(), n);
      for (std::size_t i = 0; i < gate.size(); ++i)
        QVERIFY2(
            std::abs(gate[i] - want[i]) <= 2e-6 * std::abs(want[i]) + 1e-12,
            qPrintable(
                QStringLiteral("n %1 at %2: %3 vs %4").arg(n).arg(i).arg(gate[i]).arg(want[i])));
    }
  }
};

QTEST_GUILESS_MAIN(TestDenseMatmul)
#include "tst_dense_matmul.moc"
