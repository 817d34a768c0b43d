// The block kernels of kernels/cpu/gguf/matmul.h on the random blocks of every format
// (tests/data/gguf-blocks): the unpacked codes, scales and offsets decode to the scalar
// reference's weights; the scalar kernel's products are within the bound that 8-bit
// activations allow of the exact fp32 product; and every variant the CPU runs gives the
// scalar kernel's products to float rounding.
#include <QDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/gguf/blocks.h"
#include "kernels/cpu/gguf/matmul.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/matmul.h"

using namespace tandem::kernels;

namespace {

struct Fixture {
  DType dtype = DType::F32;
  std::int64_t cols = 0;       // one row: all the file's blocks
  std::string blocks;          // one row's bytes
  std::vector<float> weights;  // gguf-py's dequantisation of them
};

Fixture read_fixture(const QString& file) {
  std::ifstream in(file.toStdString(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::uint32_t type = 0, count = 0, per_block = 0;
  std::memcpy(&type, bytes.data(), 4);
  std::memcpy(&count, bytes.data() + 4, 4);
  std::memcpy(&per_block, bytes.data() + 8, 4);
  Fixture f;
  dtype_from_ggml_type(type, f.dtype);
  f.cols = std::int64_t(count) * per_block;
  const std::size_t size = dtype_bytes(f.dtype, f.cols);
  f.blocks = bytes.substr(12, size);
  f.weights.resize(static_cast<std::size_t>(f.cols));
  std::memcpy(f.weights.data(), bytes.data() + 12 + size, f.weights.size() * 4);
  return f;
}

// The fixture's blocks over and over, `blocks` of them.
Fixture repeat_blocks(const Fixture& f, std::int64_t blocks) {
  const DTypeBlock b = dtype_block(f.dtype);
  const std::int64_t have = f.cols / b.elements;
  Fixture wide;
  wide.dtype = f.dtype;
  wide.cols = blocks * b.elements;
  for (std::int64_t j = 0; j < blocks; ++j) {
    const std::int64_t from = j % have;
    wide.blocks += f.blocks.substr(static_cast<std::size_t>(from * b.bytes), b.bytes);
    wide.weights.insert(wide.weights.end(), f.weights.begin() + from * b.elements,
                        f.weights.begin() + (from + 1) * b.elements);
  }
  return wide;
}

// A matrix of `rows` rows: row r holds the fixture's blocks rotated by r blocks.
struct Matrix {
  std::string bytes;
  std::vector<float> weights;  // [rows][cols]
  WeightMatrix w;
};

Matrix make_matrix(const Fixture& f, std::int64_t rows) {
  Matrix m;
  const DTypeBlock b = dtype_block(f.dtype);
  const std::int64_t blocks = f.cols / b.elements;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < blocks; ++j) {
      const std::int64_t from = (j + r) % blocks;
      m.bytes += f.blocks.substr(static_cast<std::size_t>(from * b.bytes), b.bytes);
      m.weights.insert(m.weights.end(), f.weights.begin() + from * b.elements,
                       f.weights.begin() + (from + 1) * b.elements);
    }
  }
  m.w.dtype = f.dtype;
  m.w.rows = rows;
  m.w.cols = f.cols;
  m.w.data = m.bytes.data();
  return m;
}

// Per activation row i and weight row r, the sum of the magnitudes of the terms the kernels
// add, |s a dot| + |o a sum|: the variants add them in different orders, so they differ by
// float rounding relative to this, which is far larger than the result where terms cancel.
std::vector<double> term_magnitudes(const Matrix& w, const float* x, std::int64_t m) {
  const std::int64_t k = w.w.cols, rows = w.w.rows, groups = k / 16;
  GgufQuantizedActivations a;
  gguf_quantize_activations(x, m, k, gguf_code_bias(w.w.dtype), a, serial_for);
  GgufUnpackedRows u;
  u.resize(static_cast<int>(rows), k, gguf_code_bias(w.w.dtype));
  for (int r = 0; r < rows; ++r) gguf_unpack_row(w.w, r, u, r);
  std::vector<double> magnitude(static_cast<std::size_t>(m * rows));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (std::int64_t g = 0; g < groups; ++g) {
        std::int64_t dot = 0;
        for (std::int64_t j = 16 * g; j < 16 * g + 16; ++j)
          dot += (u.codes[static_cast<std::size_t>(r * k + j)] - u.bias) *
                 a.values[static_cast<std::size_t>(i * k + j)];
        const auto wg = static_cast<std::size_t>(r * groups + g);
        const auto ag = static_cast<std::size_t>(i * groups + g);
        sum += std::abs(double(u.scale[wg]) * a.scale[ag] * static_cast<double>(dot)) +
               std::abs(double(u.offset[wg]) * a.scaled_sum[ag]);
      }
      magnitude[static_cast<std::size_t>(i * rows + r)] = sum;
    }
  }
  return magnitude;
}

}  // namespace

class TestGgufMatmul : public QObject {
  Q_OBJECT
 private slots:
  void formats_data() {
    QTest::addColumn<QString>("file");
    const QDir dir(QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks"));
    int blocks = 0;
    for (const QString& f : dir.entryList({QStringLiteral("*.bin")})) {
      const Fixture fx = read_fixture(dir.filePath(f));
      if (!is_gguf_block(fx.dtype)) continue;  // F16, BF16: not block formats
      QTest::newRow(qPrintable(f)) << dir.filePath(f);
      ++blocks;
    }
    QCOMPARE(blocks, 19);
  }

  // A Q8_0 file packed to INT8 (`--cpu-format int8`, `tandem convert --method int8`) keeps
  // its weights exactly: each block's scale and integers are an INT8 group's, whatever the
  // block's largest integer and the scale's sign (the fixture has both kinds). A block holding
  // -128, whose opposite INT8 cannot store, is rounded as any weights are: to half its step.
  void q8_0BlocksStayExactInInt8() {
    Fixture f = read_fixture(QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q8_0.bin"));
    QCOMPARE(f.dtype, DType::Q8_0);
    f = repeat_blocks(f, 8);  // 256 columns: two pairs of groups
    WeightMatrix source;
    source.dtype = DType::Q8_0;
    source.data = f.blocks.data();
    source.rows = 1;
    source.cols = f.cols;
    std::vector<float> want(static_cast<std::size_t>(f.cols)), got(want);
    source.row_f32(0, want.data());
    unpack_row(pack_int8(source), 0, got.data());
    for (std::int64_t c = 0; c < f.cols; ++c)
      QCOMPARE(got[static_cast<std::size_t>(c)], want[static_cast<std::size_t>(c)]);

    f.blocks[2 * 34 + 2 + 5] = static_cast<char>(-128);  // block 2's sixth integer
    source.row_f32(0, want.data());
    unpack_row(pack_int8(source), 0, got.data());
    float max_abs = 0;
    for (int c = 64; c < 96; ++c) max_abs = std::max(max_abs, std::abs(want[c]));
    for (int c = 0; c < f.cols; ++c) {
      const float err = std::abs(got[c] - want[c]);
      if (c < 64 || c >= 96)
        QCOMPARE(got[c], want[c]);
      else
        QVERIFY2(err <= 0.5f * max_abs / 127 * 1.001f, qPrintable(QString::number(err)));
    }
  }

  void unpackDecodesToTheReference_data() { formats_data(); }
  void unpackDecodesToTheReference() {
    QFETCH(QString, file);
    const Fixture f = read_fixture(file);
    QVERIFY(gguf_matmul_supports(f.dtype));
    const Matrix m = make_matrix(f, 1);
    GgufUnpackedRows rows;
    rows.resize(1, f.cols, gguf_code_bias(f.dtype));
    gguf_unpack_row(m.w, 0, rows, 0);
    for (std::int64_t i = 0; i < f.cols; ++i) {
      const float s = rows.scale[static_cast<std::size_t>(i / 16)];
      const float o = rows.offset[static_cast<std::size_t>(i / 16)];
      const float got =
          s * static_cast<float>(rows.codes[static_cast<std::size_t>(i)] - rows.bias) + o;
      const float want = f.weights[static_cast<std::size_t>(i)];
      // Written as scale * (code - bias) + offset, the rounding may differ from the format's.
      const float tolerance = 2e-6f * std::max({1.0f, std::abs(want), std::abs(o)});
      QVERIFY2(std::abs(got - want) <= tolerance,
               qPrintable(QStringLiteral("weight %1: %2, reference %3").arg(i).arg(got).arg(want)));
    }
  }

  // The formats that gguf_scale_weights says scale per 32 weights unpack to 16-weight groups
  // whose scales and offsets are equal in pairs (the AVX-512 tiles keep one of each pair);
  // the others' random blocks have pairs that differ.
  void scaleWeightsMatchTheUnpackedPairs_data() { formats_data(); }
  void scaleWeightsMatchTheUnpackedPairs() {
    QFETCH(QString, file);
    const Fixture f = read_fixture(file);
    const Matrix m = make_matrix(f, 1);
    GgufUnpackedRows rows;
    rows.resize(1, f.cols, gguf_code_bias(f.dtype));
    gguf_unpack_row(m.w, 0, rows, 0);
    bool pairs = true;
    for (std::size_t g = 0; g + 1 < rows.scale.size(); g += 2) {
      pairs = pairs && rows.scale[g] == rows.scale[g + 1] && rows.offset[g] == rows.offset[g + 1];
    }
    const int weights = gguf_scale_weights(f.dtype);
    QVERIFY(weights == 16 || weights == 32);
    QCOMPARE(weights == 32, pairs);
  }

  // gguf_max_code bounds the codes of any block, random bytes included (the AVX2 tiles add
  // 16-bit sums of several steps by it); random blocks reach it where the codes are bit fields.
  void maxCodeBoundsEveryBlock_data() { formats_data(); }
  void maxCodeBoundsEveryBlock() {
    QFETCH(QString, file);
    const Fixture f = read_fixture(file);
    const DTypeBlock b = dtype_block(f.dtype);
    constexpr int kRows = 64;
    std::string bytes(static_cast<std::size_t>(kRows * b.bytes), '\0');
    std::mt19937 rng(11);
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    WeightMatrix random;
    random.dtype = f.dtype;
    random.rows = kRows;
    random.cols = b.elements;
    random.data = bytes.data();
    const Matrix fixture = make_matrix(f, 1);
    int random_max = 0, fixture_max = 0;
    GgufUnpackedRows rows;
    rows.resize(1, b.elements, gguf_code_bias(f.dtype));
    for (int r = 0; r < kRows; ++r) {
      gguf_unpack_row(random, r, rows, 0);
      random_max =
          std::max<int>(random_max, *std::max_element(rows.codes.begin(), rows.codes.end()));
    }
    rows.resize(1, f.cols, gguf_code_bias(f.dtype));
    gguf_unpack_row(fixture.w, 0, rows, 0);
    fixture_max = *std::max_element(rows.codes.begin(), rows.codes.end());
    QVERIFY2(random_max <= gguf_max_code(f.dtype), qPrintable(QString::number(random_max)));
    QVERIFY2(fixture_max <= gguf_max_code(f.dtype), qPrintable(QString::number(fixture_max)));
    const std::set<DType> reached = {DType::Q2_K, DType::Q3_K, DType::Q4_K,
                                     DType::Q5_K, DType::Q6_K, DType::Q4_0,
                                     DType::Q4_1, DType::Q5_0, DType::Q5_1};
    if (reached.count(f.dtype) == 1) QCOMPARE(random_max, gguf_max_code(f.dtype));
  }

  // The AVX2 unpackers, one for every block format, give the scalar ones' codes, scales and
  // offsets bit for bit.
  void simdUnpackMatchesScalar_data() { formats_data(); }
  void simdUnpackMatchesScalar() {
    QFETCH(QString, file);
    if (!variant_supported(CpuVariant::Avx2, detect_isa().usable)) QSKIP("no AVX2 on this CPU");
    const Fixture f = read_fixture(file);
    const Matrix m = make_matrix(f, 3);
    GgufUnpackedRows want, got;
    want.resize(3, f.cols, gguf_code_bias(f.dtype));
    got.resize(3, f.cols, gguf_code_bias(f.dtype));
    bool simd = false;
    for (int r = 0; r < 3; ++r) {
      gguf_unpack_row(m.w, r, want, r);
      simd = gguf_unpack_row_avx2(m.w, r, got, r);
      if (!simd) break;
    }
    // Every block format.
    QVERIFY(simd);
    if (!simd) return;
    QVERIFY(got.codes == want.codes);
    QVERIFY(got.scale == want.scale);
    QVERIFY(got.offset == want.offset);
  }

  // So do the AVX-512 unpackers of the IQ grid formats (IQ1_S takes the AVX2 one).
  void avx512UnpackMatchesScalar_data() { formats_data(); }
  void avx512UnpackMatchesScalar() {
    QFETCH(QString, file);
    if (!variant_supported(CpuVariant::Avx512, detect_isa().usable))
      QSKIP(
          "this CPU lacks AVX-512 (F, BW, VL, DQ, VNNI) or BMI2; the rows run on every CPU "
          "that has them");
    const Fixture f = read_fixture(file);
    const Matrix m = make_matrix(f, 3);
    GgufUnpackedRows want, got;
    want.resize(3, f.cols, gguf_code_bias(f.dtype));
    got.resize(3, f.cols, gguf_code_bias(f.dtype));
    // Stale values where the unpacker must write, as in a reused tile.
    std::fill(got.codes.begin(), got.codes.end(), std::uint8_t{0xA5});
    std::fill(got.scale.begin(), got.scale.end(), -1.0f);
    std::fill(got.offset.begin(), got.offset.end(), -1.0f);
    bool simd = false;
    for (int r = 0; r < 3; ++r) {
      gguf_unpack_row(m.w, r, want, r);
      simd = gguf_unpack_row_avx512(m.w, r, got, r);
      if (!simd) break;
    }
    const std::set<DType> covered = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,
                                     DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_M};
    QCOMPARE(simd, covered.count(f.dtype) == 1);
    if (!simd) return;
    QVERIFY(got.codes == want.codes);
    QVERIFY(got.scale == want.scale);
    QVERIFY(got.offset == want.offset);
  }

  // The AVX2 and AVX-512 variants' quantiser (one AVX2 row for both) gives the scalar one's
  // values, scales and sums bit for bit, halves rounded to even by both.
  void quantizersAgree_data() {
    QTest::addColumn<QString>("variant");
    QTest::newRow("avx2") << "avx2";
    QTest::newRow("avx512") << "avx512";
  }
  void quantizersAgree() {
    QFETCH(QString, variant);
    CpuVariant chosen{};
    QVERIFY(parse_variant(variant.toStdString(), chosen));
    if (!variant_supported(chosen, detect_isa().usable)) {
      QSKIP(chosen == CpuVariant::Avx2
                ? "this CPU lacks AVX2, FMA or F16C; the row runs on every CPU that has them"
                : "this CPU lacks AVX-512 (F, BW, VL, DQ, VNNI) or BMI2; the row runs on every "
                  "CPU that has them");
    }
    const std::int64_t m = 3, k = 128;
    std::vector<float> x(static_cast<std::size_t>(m * k));
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& v : x) v = normal(rng);
    // A block whose scale is 1: exact halves.
    const float halves[] = {127.0f, 0.5f, 1.5f, -0.5f, -2.5f, 3.5f, 126.5f, -126.5f};
    std::copy(std::begin(halves), std::end(halves), x.begin() + 32);
    std::fill(x.begin() + 64, x.begin() + 96, 0.0f);  // and a zero block
    // A block's largest magnitude in each of its 8-value quarters in turn, negative in one.
    for (int i = 0; i < 4; ++i)
      x[static_cast<std::size_t>(k + 32 * i + 8 * i + 3)] = i == 2 ? -50.0f : 50.0f;
    GgufQuantizedActivations want, got;
    setenv("TANDEM_CPU_VARIANT", "scalar", 1);
    gguf_quantize_activations(x.data(), m, k, 128, want, serial_for);
    setenv("TANDEM_CPU_VARIANT", variant.toUtf8().constData(), 1);
    gguf_quantize_activations(x.data(), m, k, 128, got, serial_for);
    unsetenv("TANDEM_CPU_VARIANT");
    QVERIFY(got.values == want.values);
    QVERIFY(got.scale == want.scale);
    QVERIFY(got.scaled_sum == want.scaled_sum);
    QVERIFY(got.group_bias == want.group_bias);
    QCOMPARE(int(want.values[33]), 0);   // 0.5 to even
    QCOMPARE(int(want.values[34]), 2);   // 1.5
    QCOMPARE(int(want.values[36]), -2);  // -2.5
    QCOMPARE(int(want.values[static_cast<std::size_t>(k + 32 * 2 + 16 + 3)]), -127);
  }

  // The scalar kernel against the exact product: each activation rounds by at most half its
  // block's step, so |y - exact| <= sum_i |w_i| * step_i / 2 (plus float rounding).
  void scalarIsWithinTheActivationBound_data() { formats_data(); }
  void scalarIsWithinTheActivationBound() {
    QFETCH(QString, file);
    const Fixture f = read_fixture(file);
    const std::int64_t rows = 7, m = 5, k = f.cols;
    const Matrix w = make_matrix(f, rows);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(m * k));
    for (float& v : x) v = normal(rng);
    x[3] = 0.0f;  // a zero among them, and a whole zero block in the last row
    std::fill(x.end() - 32, x.end(), 0.0f);
    std::vector<float> y(static_cast<std::size_t>(m * rows));
    setenv("TANDEM_CPU_VARIANT", "scalar", 1);
    matmul_xwt(x.data(), m, w.w, y.data(), rows, serial_for);
    unsetenv("TANDEM_CPU_VARIANT");
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t r = 0; r < rows; ++r) {
        double exact = 0.0, bound = 0.0, magnitude = 0.0;
        for (std::int64_t c = 0; c < k; ++c) {
          const float* block = x.data() + i * k + c / 32 * 32;
          float amax = 0.0f;
          for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(block[j]));
          const double wv = w.weights[static_cast<std::size_t>(r * k + c)];
          exact += wv * x[static_cast<std::size_t>(i * k + c)];
          bound += std::abs(wv) * amax / 127.0 / 2.0;
          magnitude += std::abs(wv * x[static_cast<std::size_t>(i * k + c)]);
        }
        const double got = y[static_cast<std::size_t>(i * rows + r)];
        QVERIFY2(std::abs(got - exact) <= bound * 1.001 + 1e-5 * magnitude,
                 qPrintable(QStringLiteral("row %1, token %2: %3, exact %4, bound %5")
                                .arg(r)
                                .arg(i)
                                .arg(got)
                                .arg(exact)
                                .arg(bound)));
      }
    }
  }

  // The products of up to gguf_direct_max_tokens tokens read the blocks of every format
  // directly on AVX2 and AVX-512 (none unpacks a row first), so variantsMatchScalar's rows of
  // that many tokens test each of those kernels; more tokens take the tiles.
  void blockDotCoversEveryFormat_data() { formats_data(); }
  void blockDotCoversEveryFormat() {
    QFETCH(QString, file);
    const Fixture f = read_fixture(file);
    const Matrix m = make_matrix(f, 2);
    GgufQuantizedActivations a;
    const std::int64_t most =
        std::max({kGgufDirectMaxTokens, kGgufLaneMaxTokens, kGgufQ8_0LaneMaxTokens}) + 1;
    const std::vector<float> x(static_cast<std::size_t>(most * f.cols), 1.0f);
    gguf_quantize_activations(x.data(), most, f.cols, gguf_code_bias(f.dtype), a, serial_for);
    std::vector<float> y(static_cast<std::size_t>(2 * most));
    const IsaFeatures& usable = detect_isa().usable;
    // AVX-512's products whose lanes hold a block, a sub-block or a group take more tokens
    // than the others, Q8_0's the most.
    const std::set<DType> lanes = {DType::Q4_0, DType::IQ4_NL, DType::Q2_K,  DType::Q3_K,
                                   DType::Q4_K, DType::Q5_K,   DType::IQ4_XS};
    QCOMPARE(gguf_direct_max_tokens(f.dtype, CpuVariant::Avx2), kGgufDirectMaxTokens);
    QCOMPARE(gguf_direct_max_tokens(f.dtype, CpuVariant::Avx512),
             f.dtype == DType::Q8_0      ? kGgufQ8_0LaneMaxTokens
             : lanes.count(f.dtype) == 1 ? kGgufLaneMaxTokens
                                         : kGgufDirectMaxTokens);
    QCOMPARE(gguf_direct_max_tokens(f.dtype, CpuVariant::Scalar), std::int64_t{0});
    for (std::int64_t tokens = 1; tokens <= most; ++tokens) {
      if (variant_supported(CpuVariant::Avx2, usable))
        QCOMPARE(gguf_block_dot_avx2(a, tokens, m.w, 0, 2, y.data(), 2),
                 tokens <= gguf_direct_max_tokens(f.dtype, CpuVariant::Avx2));
      if (variant_supported(CpuVariant::Avx512, usable))
        QCOMPARE(gguf_block_dot_avx512(a, tokens, m.w, 0, 2, y.data(), 2),
                 tokens <= gguf_direct_max_tokens(f.dtype, CpuVariant::Avx512));
    }
  }

  // AVX-512's lane products (Q4_K, Q5_K, Q8_0, Q4_0, IQ4_NL, Q2_K, Q3_K, IQ4_XS) read a copy
  // of the activations in their own order, made for all the quantised rows: a product of fewer
  // tokens than were quantised takes the first ones, and the copy follows each new
  // quantisation of the same shape. The 32-weight formats run 40 blocks wide, two whole groups
  // of 16 and a part.
  void laneProductsTakeTheirTokens_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("blocks");
    QTest::newRow("Q4_K") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q4_K.bin") << 0;
    QTest::newRow("Q5_K") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q5_K.bin") << 0;
    QTest::newRow("Q8_0") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q8_0.bin") << 40;
    QTest::newRow("Q4_0") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q4_0.bin") << 40;
    QTest::newRow("IQ4_NL") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/IQ4_NL.bin") << 40;
    QTest::newRow("Q2_K") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q2_K.bin") << 0;
    QTest::newRow("Q3_K") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q3_K.bin") << 0;
    QTest::newRow("IQ4_XS") << QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/IQ4_XS.bin") << 0;
  }
  void laneProductsTakeTheirTokens() {
    if (!variant_supported(CpuVariant::Avx512, detect_isa().usable)) QSKIP("no AVX-512 VNNI");
    QFETCH(QString, file);
    QFETCH(int, blocks);
    Fixture f = read_fixture(file);
    if (blocks > 0) f = repeat_blocks(f, blocks);
    const std::int64_t rows = 5, quantised = gguf_direct_max_tokens(f.dtype, CpuVariant::Avx512);
    const Matrix w = make_matrix(f, rows);
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int round = 0; round < 2; ++round) {
      std::vector<float> x(static_cast<std::size_t>(quantised * f.cols));
      for (float& v : x) v = normal(rng);
      GgufQuantizedActivations a;
      gguf_quantize_activations(x.data(), quantised, f.cols, gguf_code_bias(f.dtype), a,
                                serial_for);
      for (std::int64_t m : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, quantised}) {
        std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
        GgufUnpackedRows unpacked;
        unpacked.resize(static_cast<int>(rows), f.cols, a.bias);
        for (int r = 0; r < rows; ++r) gguf_unpack_row(w.w, r, unpacked, r);
        gguf_dot_rows_scalar(unpacked, a, m, want.data(), rows);
        QVERIFY(gguf_block_dot_avx512(a, m, w.w, 0, rows, got.data(), rows));
        for (std::size_t i = 0; i < want.size(); ++i)
          QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * std::max(1.0f, std::abs(want[i])),
                   qPrintable(QStringLiteral("round %1, %2 tokens, %3: %4, scalar %5")
                                  .arg(round)
                                  .arg(m)
                                  .arg(i)
                                  .arg(got[i])
                                  .arg(want[i])));
      }
    }
  }

  // The AVX-512 tiles keep their rearranged copy of the activations between calls: a second
  // product with new activations of the same shape must not reuse the first's.
  void tilesFollowNewActivations() {
    if (!variant_supported(CpuVariant::Avx512, detect_isa().usable)) QSKIP("no AVX-512 VNNI");
    const Fixture f = read_fixture(QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks/Q4_K.bin"));
    const std::int64_t rows = 16, m = 7;
    const Matrix w = make_matrix(f, rows);
    std::mt19937 rng(13);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
    for (int round = 0; round < 2; ++round) {
      std::vector<float> x(static_cast<std::size_t>(m * f.cols));
      for (float& v : x) v = normal(rng);
      setenv("TANDEM_CPU_VARIANT", "scalar", 1);
      matmul_xwt(x.data(), m, w.w, want.data(), rows, serial_for);
      setenv("TANDEM_CPU_VARIANT", "avx512", 1);
      GgufQuantizedActivations a;
      gguf_quantize_activations(x.data(), m, f.cols, gguf_code_bias(f.dtype), a, serial_for);
      gguf_matmul_rows(a, m, w.w, 0, rows, got.data(), rows, CpuVariant::Avx512);
      unsetenv("TANDEM_CPU_VARIANT");
      for (std::size_t i = 0; i < want.size(); ++i)
        QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * std::max(1.0f, std::abs(want[i])),
                 qPrintable(QStringLiteral("round %1, %2: %3, scalar %4")
                                .arg(round)
                                .arg(i)
                                .arg(got[i])
                                .arg(want[i])));
    }
  }

  // Every variant the CPU runs gives the scalar kernel's products, on several threads, with
  // row counts that leave partial steps of four rows and tiles of sixteen (and a single row),
  // and widths that end in half a 64-weight step. The 32-weight formats also run at widths of
  // 32 and 40 blocks (the fixture's blocks repeated), which AVX-512's Q8_0 takes in groups of
  // 16 blocks: whole groups only, and whole groups and a last partial one.
  void variantsMatchScalar_data() {
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("variant");
    QTest::addColumn<int>("tokens");
    QTest::addColumn<bool>("odd_blocks");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("blocks");
    const QDir dir(QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks"));
    const IsaFeatures& usable = detect_isa().usable;
    for (const QString& f : dir.entryList({QStringLiteral("*.bin")})) {
      if (!is_gguf_block(read_fixture(dir.filePath(f)).dtype)) continue;
      for (CpuVariant v : {CpuVariant::Avx2, CpuVariant::Avx512, CpuVariant::Amx}) {
        if (!variant_supported(v, usable)) continue;
        const QString name = QString::fromLatin1(variant_name(v).data());
        // Up to gguf_direct_max_tokens tokens take the row kernels, more the tiles, summed per
        // 16 or 32 weights (gguf_scale_weights): AVX-512's of 16 rows (12, 8, 4, 3 and 2
        // tokens at a time), AVX2's of 8 rows (6 tokens at a time, then the 1 to 5 left).
        static_assert(
            kGgufDirectMaxTokens == 5 && kGgufLaneMaxTokens == 8 && kGgufQ8_0LaneMaxTokens == 9,
            "the counts below straddle the direct limits");
        const std::int64_t direct = gguf_direct_max_tokens(read_fixture(dir.filePath(f)).dtype, v);
        for (int tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 30}) {
          const bool small_blocks = dtype_block(read_fixture(dir.filePath(f)).dtype).elements == 32;
          for (bool odd : {false, true}) {
            if (odd && !small_blocks) continue;
            for (int blocks : {0, 32, 40}) {
              if (blocks > 0 && !small_blocks) continue;
              for (int rows : {19, 1}) {
                if (rows == 1 && tokens > direct) continue;
                QTest::newRow(qPrintable(
                    QStringLiteral("%1 %2 %3 tokens%4%5, %6 rows")
                        .arg(f, name)
                        .arg(tokens)
                        .arg(blocks > 0 ? QStringLiteral(", %1 blocks").arg(blocks) : QString())
                        .arg(odd ? QStringLiteral(", odd blocks") : QString())
                        .arg(rows)))
                    << dir.filePath(f) << name << tokens << odd << rows << blocks;
              }
            }
          }
        }
      }
    }
  }
  void variantsMatchScalar() {
    QFETCH(QString, file);
    QFETCH(QString, variant);
    QFETCH(int, tokens);
    QFETCH(bool, odd_blocks);
    QFETCH(int, rows);
    QFETCH(int, blocks);
    Fixture f = read_fixture(file);
    if (blocks > 0) f = repeat_blocks(f, blocks);
    if (odd_blocks) {  // a last step of half the AVX-512 width: one block fewer
      const DTypeBlock b = dtype_block(f.dtype);
      f.cols -= 32;
      f.blocks.resize(f.blocks.size() - b.bytes);
      f.weights.resize(static_cast<std::size_t>(f.cols));
    }
    const std::int64_t m = tokens, k = f.cols;
    const Matrix w = make_matrix(f, rows);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(static_cast<std::size_t>(m * k));
    for (float& v : x) v = normal(rng);
    std::vector<float> want(static_cast<std::size_t>(m * rows)), got(want.size());
    setenv("TANDEM_CPU_VARIANT", "scalar", 1);
    matmul_xwt(x.data(), m, w.w, want.data(), rows, serial_for);
    setenv("TANDEM_CPU_VARIANT", variant.toLatin1().constData(), 1);
    // Two chunks, as two threads would take them.
    const ParallelFor halves = [](std::int64_t n,
                                  const std::function<void(std::int64_t, std::int64_t)>& body) {
      body(0, n / 2);
      body(n / 2, n);
    };
    matmul_xwt(x.data(), m, w.w, got.data(), rows, halves);
    unsetenv("TANDEM_CPU_VARIANT");
    const std::vector<double> magnitude = term_magnitudes(w, x.data(), m);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double tolerance = 1e-4 * std::max(1.0f, std::abs(want[i])) + 1e-6 * magnitude[i];
      QVERIFY2(std::abs(got[i] - want[i]) <= tolerance,
               qPrintable(QStringLiteral("%1: %2, scalar %3").arg(i).arg(got[i]).arg(want[i])));
    }
  }
};

QTEST_GUILESS_MAIN(TestGgufMatmul)
#include "tst_gguf_matmul.moc"
