// Every packed-weight kernel variant this CPU can run against the scalar reference, on
// shapes that are and are not multiples of the tiles, from one token to many; and the
// scalar reference against plain fp32 arithmetic within the quantisation error.
#include <QtTest>
#include <cstring>
#include <random>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/packed/matmul.h"
#include "kernels/cpu/packed/rotation.h"
#include "tests/support/random_values.h"

using namespace tandem::kernels;

namespace {

// ||got - x w^T|| / ||x w^T|| over every token and row, the exact product in double (x:
// tokens x cols, w: rows x cols, got: tokens x rows).
double error_against_exact(const std::vector<float>& got, const std::vector<float>& x,
                           const std::vector<float>& w, int tokens, int rows, int cols) {
  double err = 0, norm = 0;
  for (int t = 0; t < tokens; ++t) {
    for (int r = 0; r < rows; ++r) {
      double exact = 0;
      for (int c = 0; c < cols; ++c) exact += double(x[t * cols + c]) * w[r * cols + c];
      err += (got[t * rows + r] - exact) * (got[t * rows + r] - exact);
      norm += exact * exact;
    }
  }
  return std::sqrt(err / norm);
}

using tandem::test::normal_values;

// Random MXFP4 weights as a checkpoint stores them: FP4 codes two per byte and one
// power-of-two scale per row and 32 columns (exponents around 2^-3, as trained weights have).
struct Mxfp4Source {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  WeightMatrix matrix;
  Mxfp4Source(std::int64_t rows, std::int64_t cols, unsigned seed) {
    std::mt19937 rng(seed);
    codes.resize(static_cast<std::size_t>(rows * cols / 2));
    for (auto& b : codes) b = static_cast<std::uint8_t>(rng() & 0xff);
    const std::int64_t groups = (cols + 31) / 32;
    scales.resize(static_cast<std::size_t>(rows * groups));
    for (auto& s : scales) s = e8m0_to_f32(static_cast<std::uint8_t>(120 + rng() % 8));
    matrix.dtype = DType::F4E2M1;
    matrix.data = codes.data();
    matrix.rows = rows;
    matrix.cols = cols;
    matrix.block_scale = scales.data();
    matrix.block_rows = 1;
    matrix.block_cols = 32;
  }
};

// Row r of a packed matrix read one column at a time, straight from the layout
// (packed/matmul.h): the reference for unpack_row, which reads several columns a step.
std::vector<float> unpack_row_by_column(const PackedMatrix& m, std::int64_t r) {
  std::vector<float> out(static_cast<std::size_t>(m.cols));
  const std::uint8_t* block = m.block(r / kPackRows);
  const std::int64_t lane = r % kPackRows;
  for (std::int64_t c = 0; c < m.cols; ++c) {
    float& v = out[static_cast<std::size_t>(c)];
    switch (m.format) {
      case PackedFormat::Int8: {
        // Per pair of 32-column groups a 64-byte header (16 FP16 scales for each), then the
        // two groups' 8 steps each.
        const std::int64_t g = c / 32, pair = g / 2;
        const std::uint8_t* start = block + pair * (64 + 2 * 8 * 64);
        const auto* header = reinterpret_cast<const std::uint16_t*>(start) + (g % 2) * 16;
        const std::uint8_t* step = start + 64 + (g % 2) * 8 * 64 + (c % 32) / 4 * 64;
        v = static_cast<float>(step[lane * 4 + c % 4] - 128) * f16_to_f32(header[lane]);
        break;
      }
      case PackedFormat::Int4: {
        const std::int64_t g = c / m.group;
        const std::uint8_t* step = block + m.int4_step_offset(g) + (c % m.group) / 8 * 64;
        const std::uint8_t byte = step[lane * 4 + c % 4];
        const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
        const auto* header =
            reinterpret_cast<const std::uint16_t*>(block + m.int4_header_offset(g));
        v = static_cast<float>(nibble) * f16_to_f32(header[lane]) +
            f16_to_f32(header[kPackRows + lane]);
        break;
      }
      case PackedFormat::Mxfp4: {
        const std::uint8_t byte = block[(c / 8) * 64 + lane * 4 + c % 4];
        const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
        v = static_cast<float>(kMxfp4Biased[nibble] - kMxfp4Bias) *
            m.group_scale[static_cast<std::size_t>((c / m.group) * m.blocks * kPackRows + r)];
        break;
      }
      case PackedFormat::Bf16:
        v = bf16_to_f32(
            reinterpret_cast<const std::uint16_t*>(block)[(c / 2) * 32 + lane * 2 + c % 2]);
        break;
    }
  }
  return out;
}

// Per token and row (`stride` apart) of a widened product, the sum of its terms'
// magnitudes: |weight| as unpack_row gives it rounded to BF16 times |activation| (BF16).
std::vector<float> widened_abs_sums(const PackedMatrix& w, const PackedActivations& x,
                                    std::int64_t stride) {
  std::vector<float> sums(static_cast<std::size_t>(x.tokens * stride), 0.0f),
      row(static_cast<std::size_t>(w.cols_padded));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    unpack_row(w, r, row.data());
    for (std::int64_t t = 0; t < x.tokens; ++t) {
      double sum = 0;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        sum += std::abs(bf16_to_f32(f32_to_bf16(row[static_cast<std::size_t>(c)]))) *
               std::abs(bf16_to_f32(x.bf16[static_cast<std::size_t>(t * x.bf16_stride + c)]));
      }
      sums[static_cast<std::size_t>(t * stride + r)] = static_cast<float>(sum);
    }
  }
  return sums;
}

// [tokens x rows] in double: the packed weights (unpack_row) times the activations as
// quantised (each value times its group's scale).
std::vector<double> quantised_product(const PackedMatrix& w, const PackedActivations& a) {
  std::vector<double> y(static_cast<std::size_t>(a.tokens * w.rows));
  std::vector<float> row(static_cast<std::size_t>(w.cols));
  for (std::int64_t r = 0; r < w.rows; ++r) {
    unpack_row(w, r, row.data());
    for (std::int64_t t = 0; t < a.tokens; ++t) {
      double sum = 0;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        const auto at = static_cast<std::size_t>(t * a.groups() + c / a.group);
        sum += double(row[static_cast<std::size_t>(c)]) *
               a.q[static_cast<std::size_t>(t * a.cols_padded + c)] * a.scale[at];
      }
      y[static_cast<std::size_t>(t * w.rows + r)] = sum;
    }
  }
  return y;
}

PackedMatrix packAs(PackedFormat f, const WeightMatrix& source,
                    std::int64_t group = kDefaultInt4Group) {
  switch (f) {
    case PackedFormat::Mxfp4:
      return pack_mxfp4(source);
    case PackedFormat::Int8:
      return pack_int8(source);
    case PackedFormat::Int4:
      return pack_int4(source, group);
    case PackedFormat::Bf16:
      return pack_bf16(source);
  }
  return {};
}

// Not a PackedFormat: rotated INT8 (pack_int8_rotated), as the data rows name it.
constexpr int kInt8Rotated = 50;

QString formatName(PackedFormat f) {
  switch (f) {
    case PackedFormat::Int8:
      return QStringLiteral("int8");
    case PackedFormat::Int4:
      return QStringLiteral("int4");
    case PackedFormat::Bf16:
      return QStringLiteral("bf16");
    case PackedFormat::Mxfp4:
      return QStringLiteral("mxfp4");
  }
  return {};
}

// Not CpuVariants: the AMX kernels with the tile unit emulated in software, and the two
// kernels behind the AVX2 variant (VPMADDUBSW, and AVX-VNNI where the CPU has it); and the
// AMX kernels, real and emulated, taking every product and tail into tiles from one token on
// (below kAmxMinTokens too).
constexpr int kEmulatedAmx = 100;
constexpr int kAvx2Plain = 101;
constexpr int kAvxVnni = 102;
constexpr int kAmxFromOne = 103;
constexpr int kEmulatedAmxFromOne = 104;

QString variantLabel(int v) {
  if (v == kEmulatedAmx) return QStringLiteral("amx-emulated");
  if (v == kAmxFromOne) return QStringLiteral("amx-from-1");
  if (v == kEmulatedAmxFromOne) return QStringLiteral("amx-emulated-from-1");
  if (v == kAvx2Plain) return QStringLiteral("avx2-plain");
  if (v == kAvxVnni) return QStringLiteral("avx-vnni");
  return QString::fromUtf8(variant_name(static_cast<CpuVariant>(v)).data());
}

// The emulated tile unit runs wherever the AVX-512 kernels it leaves the tails to run with
// BF16: every AMX CPU, and AVX-512 ones without AMX.
bool emulatedTilesRun() {
  const IsaFeatures& usable = detect_isa().usable;
  return variant_supported(CpuVariant::Avx512, usable) && usable.avx512_bf16;
}
constexpr const char* kNoEmulatedTiles =
    "this CPU lacks AVX-512 (F, BW, VL, DQ, VNNI) or AVX512_BF16, which the emulated AMX "
    "kernels need for their tails; it runs on every CPU that has them";

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
    QTest::addColumn<int>("group");
    const IsaFeatures& usable = detect_isa().usable;
    for (int v : {int(CpuVariant::Avx2), int(CpuVariant::Avx512), int(CpuVariant::Amx),
                  kEmulatedAmx, kAvx2Plain, kAvxVnni, kAmxFromOne, kEmulatedAmxFromOne}) {
      // A variant the CPU lacks cannot run here; the scalar one always runs. The emulated
      // tile unit needs the AVX-512 kernels for its tails.
      const CpuVariant needs = v == kEmulatedAmx || v == kEmulatedAmxFromOne ? CpuVariant::Avx512
                               : v == kAmxFromOne                            ? CpuVariant::Amx
                               : v == kAvx2Plain || v == kAvxVnni            ? CpuVariant::Avx2
                                                                  : static_cast<CpuVariant>(v);
      if (!variant_supported(needs, usable)) continue;
      if (needs == CpuVariant::Avx512 && !usable.avx512_bf16) continue;
      if (v == kAvxVnni && !usable.avx_vnni) continue;
      const bool from_one = v == kAmxFromOne || v == kEmulatedAmxFromOne;
      const bool tiles = v == int(CpuVariant::Amx) || v == kEmulatedAmx || from_one;
      // The tile kernels: products below kAmxMinTokens (AVX-512), partial tiles (products of
      // fewer than 16, tails), whole tiles one or two at once, and tails on AVX-512. From one
      // token on: partial tiles of several heights, alone and after whole tiles.
      const std::vector<int> token_counts =
          from_one ? std::vector<int>{1, 2, 7, 11, 18, 29}
          : tiles  ? std::vector<int>{1, int(kAmxMinTokens) - 1, 15, 16, 17, 32, 33, 47, 50}
                   : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 17};
      // Shapes: one block, odd blocks, columns that leave a part of a 64-byte tile (30, 257,
      // 200) or fill whole tiles (384).
      const std::vector<std::pair<int, int>> shapes =
          tiles
              ? std::vector<std::pair<int, int>>{{16, 64},
                                                 {37, 30},
                                                 {64, 257},
                                                 {48, 384},
                                                 {21, 200}}
              : std::vector<std::pair<int, int>>{{16, 64}, {37, 30}, {64, 257}, {5, 3}, {48, 384}};
      for (PackedFormat f :
           {PackedFormat::Int8, PackedFormat::Int4, PackedFormat::Bf16, PackedFormat::Mxfp4}) {
        if (v == kAvxVnni && f == PackedFormat::Bf16) continue;  // INT8 and INT4 only
        if (f == PackedFormat::Int8) {
          // Rotated INT8: whole 64-column tiles (64, 384), tiles and a 32-column tail (96,
          // 160), and a width no block of 32 divides (30: packed as plain INT8).
          for (int tokens : token_counts) {
            for (auto [rows, cols] : std::vector<std::pair<int, int>>{
                     {16, 64}, {37, 96}, {48, 384}, {21, 160}, {5, 30}}) {
              const QString name = QStringLiteral("%1 int8-rotated t%2 %3x%4")
                                       .arg(variantLabel(v))
                                       .arg(tokens)
                                       .arg(rows)
                                       .arg(cols);
              QTest::newRow(qPrintable(name)) << v << kInt8Rotated << tokens << rows << cols << 0;
            }
          }
        }
        for (int tokens : token_counts) {
          for (auto [rows, cols] : shapes) {
            if (f == PackedFormat::Mxfp4 && cols % 2 != 0) ++cols;  // whole bytes per row
            // INT4: weight groups that divide k, that leave a short last group, and one group
            // in all. INT8's groups are kInt8WeightGroup (its shapes leave an odd number of
            // groups, a short last one, and one group in all).
            for (int group : f == PackedFormat::Int4   ? std::vector<int>{32, 64, 128}
                             : f == PackedFormat::Int8 ? std::vector<int>{int(kInt8WeightGroup)}
                                                       : std::vector<int>{0}) {
              const QString name = QStringLiteral("%1 %2 t%3 %4x%5 g%6")
                                       .arg(variantLabel(v), formatName(f))
                                       .arg(tokens)
                                       .arg(rows)
                                       .arg(cols)
                                       .arg(group);
              QTest::newRow(qPrintable(name)) << v << int(f) << tokens << rows << cols << group;
            }
          }
        }
      }
    }
  }

  // unpack_row (which widens matrices for an accelerator, row by row) reads every format as
  // the layout says, bit for bit, also in a last partial step or group of columns.
  void unpackRowReadsTheLayout() {
    for (const PackedFormat f :
         {PackedFormat::Int8, PackedFormat::Int4, PackedFormat::Mxfp4, PackedFormat::Bf16}) {
      for (const std::int64_t cols : {37, 64, 100, 160}) {
        for (const std::int64_t group : {16, 32}) {
          if (f != PackedFormat::Int4 && group != 16) continue;
          if (f == PackedFormat::Mxfp4 && cols % 32 != 0) continue;  // whole MXFP4 groups
          const std::int64_t rows = 21;                              // a partial block of rows too
          const auto values = normal_values(static_cast<std::size_t>(rows * cols), 31);
          WeightMatrix source;
          source.data = values.data();
          source.rows = rows;
          source.cols = cols;
          Mxfp4Source mx(rows, cols, 32);
          const PackedMatrix m = packAs(f, f == PackedFormat::Mxfp4 ? mx.matrix : source, group);
          std::vector<float> got(static_cast<std::size_t>(cols));
          for (std::int64_t r = 0; r < rows; ++r) {
            unpack_row(m, r, got.data());
            const std::vector<float> want = unpack_row_by_column(m, r);
            for (std::int64_t c = 0; c < cols; ++c) {
              if (std::memcmp(&got[c], &want[c], sizeof(float)) != 0) {
                QFAIL(qPrintable(QStringLiteral("format %1, %2 columns, group %3: row %4 column "
                                                "%5 is %6, the layout says %7")
                                     .arg(int(f))
                                     .arg(cols)
                                     .arg(group)
                                     .arg(r)
                                     .arg(c)
                                     .arg(got[c])
                                     .arg(want[c])));
              }
            }
          }
        }
      }
    }
  }

  // The rotation: blocks the largest power of two that divides the width, from 32 on; a unit
  // vector at column c goes to its block's Hadamard row (+-1 / sqrt(block) in every column of
  // c's block, nothing elsewhere) with c's sign; unrotate turns any row back; dot products keep.
  void rotationIsTheSignedHadamardTransform() {
    QCOMPARE(rotation_block(2048), std::int64_t{2048});
    QCOMPARE(rotation_block(768), std::int64_t{256});
    QCOMPARE(rotation_block(576), std::int64_t{64});
    QCOMPARE(rotation_block(2880), std::int64_t{64});
    QCOMPARE(rotation_block(48), std::int64_t{0});
    QCOMPARE(rotation_block(30), std::int64_t{0});
    int turned = 0;
    for (int c = 0; c < 1024; ++c) turned += rotation_sign(c) ? 1 : 0;
    QVERIFY2(turned > 400 && turned < 624, qPrintable(QString::number(turned)));
    for (const int c : {0, 5, 33, 63}) {
      std::vector<float> v(64, 0.0f);
      v[static_cast<std::size_t>(c)] = 1.0f;
      rotate_scalar(v.data(), 64, 32);
      const float sign = rotation_sign(c) ? -1.0f : 1.0f;
      for (int j = 0; j < 64; ++j) {
        const bool same_block = j / 32 == c / 32;
        const float hadamard = __builtin_popcount((j % 32) & (c % 32)) % 2 == 0 ? 1.0f : -1.0f;
        const float want = same_block ? sign * hadamard / std::sqrt(32.0f) : 0.0f;
        QVERIFY2(std::abs(v[static_cast<std::size_t>(j)] - want) <= 1e-6f,
                 qPrintable(QStringLiteral("unit %1, column %2: %3, want %4")
                                .arg(c)
                                .arg(j)
                                .arg(v[static_cast<std::size_t>(j)])
                                .arg(want)));
      }
    }
    for (auto [n, block] : std::vector<std::pair<int, int>>{{16, 16}, {768, 256}, {576, 64}}) {
      const auto x = normal_values(static_cast<std::size_t>(n), 71);
      const auto y = normal_values(static_cast<std::size_t>(n), 72);
      std::vector<float> rx(x), ry(y);
      rotate(rx.data(), n, block);
      rotate(ry.data(), n, block);
      double dot = 0, rdot = 0, norm = 0;
      for (int i = 0; i < n; ++i) {
        dot += double(x[i]) * y[i];
        rdot += double(rx[i]) * ry[i];
        norm += double(x[i]) * x[i];
      }
      QVERIFY2(std::abs(dot - rdot) <= 1e-5 * norm,
               qPrintable(QStringLiteral("%1 vs %2").arg(rdot).arg(dot)));
      unrotate(rx.data(), n, block);
      for (int i = 0; i < n; ++i) QVERIFY(std::abs(rx[i] - x[i]) <= 1e-5f);
    }
    std::vector<float> v(48, 1.0f);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, rotate(v.data(), 48, 32));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, rotate(v.data(), 48, 8));
  }

  // Every variant of the rotation gives the scalar reference's bits.
  void rotationVariantsMatchScalar_data() {
    QTest::addColumn<QString>("variant");
    QTest::newRow("avx2") << QStringLiteral("avx2");
    QTest::newRow("avx512") << QStringLiteral("avx512");
  }

  void rotationVariantsMatchScalar() {
    QFETCH(QString, variant);
    const IsaFeatures& usable = detect_isa().usable;
    void (*rotate_variant)(float*, std::int64_t, std::int64_t) = nullptr;
    if (variant == QLatin1String("avx2")) {
      if (!usable.avx2) QSKIP("this CPU lacks AVX2, which rotate_avx2 needs");
      rotate_variant = rotate_avx2;
    } else {
      if (!usable.avx512f) QSKIP("this CPU lacks AVX512F, which rotate_avx512 needs");
      rotate_variant = rotate_avx512;
    }
    for (auto [n, block] : std::vector<std::pair<int, int>>{
             {16, 16}, {64, 32}, {768, 256}, {2048, 2048}, {576, 64}, {4096, 1024}}) {
      const auto x = normal_values(static_cast<std::size_t>(n), 73);
      std::vector<float> want(x), got(x);
      rotate_scalar(want.data(), n, block);
      rotate_variant(got.data(), n, block);
      QVERIFY2(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0,
               qPrintable(QStringLiteral("%1 columns in blocks of %2").arg(n).arg(block)));
    }
  }

  // Rotated INT8 keeps the product: against fp32 arithmetic, with an outlier channel in the
  // activations (one scale a token and block takes it without losing the rest), as close as INT8
  // with scales per 32 columns; its rows turn back to the weights; gathered rows multiply as
  // packed ones; activations packed otherwise are refused.
  // Widths of one rotation block (512) and of three (96 in blocks of 32, where the outlier's
  // block keeps its own scale).
  void rotatedInt8KeepsTheProduct_data() {
    QTest::addColumn<int>("cols");
    QTest::newRow("512 columns") << 512;
    QTest::newRow("96 columns") << 96;
  }

  void rotatedInt8KeepsTheProduct() {
    QFETCH(int, cols);
    const int rows = 48, tokens = 9;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 81);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    auto x = normal_values(static_cast<std::size_t>(tokens * cols), 82);
    for (int t = 0; t < tokens; ++t) x[static_cast<std::size_t>(t * cols + 7)] *= 60.0f;
    const PackedMatrix rotated = pack_int8_rotated(source);
    const PackedMatrix plain = pack_int8(source);
    QCOMPARE(rotated.rotation, rotation_block(cols));
    QCOMPARE(packed_matrix_bytes(rotated), packed_matrix_bytes(plain));
    PackedActivations ra, pa;
    pack_activations_for(rotated, x.data(), tokens, ra);
    pack_activations_for(plain, x.data(), tokens, pa);
    std::vector<float> ry(static_cast<std::size_t>(tokens * rows)), py(ry);
    packed_matmul_scalar(rotated, ra, ry.data(), rows, 0, rotated.blocks);
    packed_matmul_scalar(plain, pa, py.data(), rows, 0, plain.blocks);
    const double rotated_error = error_against_exact(ry, x, values, tokens, rows, cols);
    const double plain_error = error_against_exact(py, x, values, tokens, rows, cols);
    QVERIFY2(
        rotated_error < 0.01 && rotated_error < 2.0 * plain_error,
        qPrintable(QStringLiteral("rotated %1, plain %2").arg(rotated_error).arg(plain_error)));
    // One scale a token without the rotation: the outlier takes the resolution.
    PackedActivations whole;
    pack_activations(x.data(), tokens, cols, PackedFormat::Int8, whole, kWholeRow);
    const std::vector<double> unrotated = quantised_product(plain, whole);
    const double unrotated_error = error_against_exact(
        std::vector<float>(unrotated.begin(), unrotated.end()), x, values, tokens, rows, cols);
    QVERIFY2(rotated_error < 0.5 * unrotated_error,
             qPrintable(QStringLiteral("rotated %1, unrotated with a scale a token %2")
                            .arg(rotated_error)
                            .arg(unrotated_error)));
    qInfo("relative error: rotated %.5f, INT8 %.5f, unrotated with a scale a token %.5f",
          rotated_error, plain_error, unrotated_error);
    std::vector<float> row(static_cast<std::size_t>(cols));
    double err = 0, norm = 0;
    for (int r = 0; r < rows; ++r) {
      unpack_row(rotated, r, row.data());
      for (int c = 0; c < cols; ++c) {
        const double d =
            row[static_cast<std::size_t>(c)] - values[static_cast<std::size_t>(r * cols + c)];
        err += d * d;
        norm += double(values[static_cast<std::size_t>(r * cols + c)]) *
                values[static_cast<std::size_t>(r * cols + c)];
      }
    }
    QVERIFY2(std::sqrt(err / norm) < 0.01, qPrintable(QString::number(std::sqrt(err / norm))));
    const std::vector<std::int64_t> picked = {8, 2, 2, 5};
    PackedActivations gathered;
    gather_activations(ra, picked.data(), 4, gathered);
    std::vector<float> gy(static_cast<std::size_t>(4 * rows));
    packed_matmul_scalar(rotated, gathered, gy.data(), rows, 0, rotated.blocks);
    for (int i = 0; i < 4; ++i)
      for (int r = 0; r < rows; ++r)
        QCOMPARE(gy[static_cast<std::size_t>(i * rows + r)],
                 ry[static_cast<std::size_t>(picked[static_cast<std::size_t>(i)] * rows + r)]);
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument,
        packed_matmul(rotated, pa, ry.data(), rows, 0, rotated.blocks, CpuVariant::Scalar));
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument,
        packed_matmul(plain, ra, ry.data(), rows, 0, plain.blocks, CpuVariant::Scalar));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             pack_widened_activations(rotated, x.data(), tokens, whole));
    QVERIFY(!widened_product(rotated, 512, CpuVariant::Amx));
  }

  void variantsMatchScalar() {
    QFETCH(int, variant);
    QFETCH(int, format);
    QFETCH(int, tokens);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, group);
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 11);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const bool rotated = format == kInt8Rotated;
    const PackedFormat f = rotated ? PackedFormat::Int8 : static_cast<PackedFormat>(format);
    const Mxfp4Source fp4(rows, cols, 13);
    const PackedMatrix w = rotated
                               ? pack_int8_rotated(source)
                               : packAs(f, f == PackedFormat::Mxfp4 ? fp4.matrix : source, group);
    QCOMPARE(w.rotation, rotated ? rotation_block(cols) : 0);
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 12);
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    // y has a wider stride than rows, and sentinels there must stay untouched.
    const std::int64_t stride = rows + 3;
    std::vector<float> want(static_cast<std::size_t>(tokens * stride), -7.0f);
    std::vector<float> got(want);
    packed_matmul_scalar(w, a, want.data(), stride, 0, w.blocks);
    if (variant == kEmulatedAmx) {
      packed_matmul_amx_emulated(w, a, got.data(), stride, 0, w.blocks);
    } else if (variant == kEmulatedAmxFromOne) {
      packed_matmul_amx_emulated(w, a, got.data(), stride, 0, w.blocks, 1);
    } else if (variant == kAmxFromOne) {
      packed_matmul_amx(w, a, got.data(), stride, 0, w.blocks, 1);
    } else if (variant == kAvx2Plain) {
      packed_matmul_avx2_plain(w, a, got.data(), stride, 0, w.blocks);
    } else if (variant == kAvxVnni) {
      packed_matmul_avx_vnni(w, a, got.data(), stride, 0, w.blocks);
    } else {
      packed_matmul(w, a, got.data(), stride, 0, w.blocks, static_cast<CpuVariant>(variant));
    }
    // The AVX2 kernels take rotated INT8 by groups (its scales repeated in each), rounding at
    // each group's end where the others round once a row.
    const bool by_groups =
        rotated && w.rotation > 0 &&
        (variant == int(CpuVariant::Avx2) || variant == kAvx2Plain || variant == kAvxVnni);
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (f != PackedFormat::Bf16 && !by_groups) {
        QCOMPARE(got[i], want[i]);  // the same integer sums, scaled in the same order
      } else {
        QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * (1.0f + std::abs(want[i])),
                 qPrintable(QStringLiteral("%1 vs %2 at %3").arg(got[i]).arg(want[i]).arg(i)));
      }
    }
  }

  // The tile kernels over a block range that starts and ends inside the matrix, as the
  // parallel jobs call them: rows outside the range stay untouched.
  void tilesOnABlockRange() {
    if (!emulatedTilesRun()) QSKIP(kNoEmulatedTiles);
    const int rows = 90, cols = 320, tokens = 35;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 51);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    // The 3 tokens after the whole tiles on AVX-512, then in a partial tile.
    for (std::int64_t min_tokens : {kAmxMinTokens, std::int64_t{1}}) {
      for (int format : {int(PackedFormat::Int8), int(PackedFormat::Int4), int(PackedFormat::Bf16),
                         kInt8Rotated}) {
        const PackedFormat f =
            format == kInt8Rotated ? PackedFormat::Int8 : static_cast<PackedFormat>(format);
        const PackedMatrix w =
            format == kInt8Rotated ? pack_int8_rotated(source) : packAs(f, source, 64);
        const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 52);
        PackedActivations a;
        pack_activations_for(w, x.data(), tokens, a);
        std::vector<float> want(static_cast<std::size_t>(tokens * rows), -7.0f), got(want);
        packed_matmul_scalar(w, a, want.data(), rows, 1, 4);
        packed_matmul_amx_emulated(w, a, got.data(), rows, 1, 4, min_tokens);
        for (std::size_t i = 0; i < want.size(); ++i) {
          QVERIFY2(std::abs(got[i] - want[i]) <= 1e-4f * (1.0f + std::abs(want[i])),
                   qPrintable(QStringLiteral("%1 from %2: %3 vs %4 at %5")
                                  .arg(formatName(f))
                                  .arg(min_tokens)
                                  .arg(got[i])
                                  .arg(want[i])
                                  .arg(i)));
        }
      }
    }
  }

  // A partial tile is configured for its tokens alone: its activation loads read as many rows
  // as there are tokens left, not a whole tile's 16 (past the activations' end). It runs
  // after the whole tiles, so the last load of activation tile 4 is its own. INT8 and INT4
  // go into tiles widened (BF16 activations), rotated INT8 into integer tiles.
  void partialTilesReadOnlyTheirTokens() {
    if (!emulatedTilesRun()) QSKIP(kNoEmulatedTiles);
    const int rows = 32, cols = 128;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 61);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    for (int format : {int(PackedFormat::Int8), int(PackedFormat::Int4), int(PackedFormat::Bf16),
                       kInt8Rotated}) {
      const PackedFormat f =
          format == kInt8Rotated ? PackedFormat::Int8 : static_cast<PackedFormat>(format);
      const PackedMatrix w =
          format == kInt8Rotated ? pack_int8_rotated(source) : packAs(f, source, 32);
      for (int tokens : {1, 5, 15, 16 + 5, 32 + 15}) {
        const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 62);
        PackedActivations a;
        if (f == PackedFormat::Bf16 || w.rotation > 0)
          pack_activations_for(w, x.data(), tokens, a);
        else
          pack_widened_activations(w, x.data(), tokens, a);
        std::vector<float> y(static_cast<std::size_t>(tokens * rows));
        amx::EmulatedTiles::State& state = amx::EmulatedTiles::state();
        std::fill(std::begin(state.rows_loaded), std::end(state.rows_loaded), 0);
        packed_matmul_amx_emulated(w, a, y.data(), rows, 0, w.blocks, 1);
        QCOMPARE(state.rows_loaded[4], tokens % amx::kTileRows);
        // Tile 5 holds the second of two whole tiles of 16 tokens.
        QCOMPARE(state.rows_loaded[5], tokens >= 2 * amx::kTileRows ? amx::kTileRows : 0);
      }
    }
  }

  // Widened products (INT8 and INT4 weights widened to BF16, BF16 activations): the tile
  // kernels, real where the CPU has AMX and emulated wherever the emulation runs, against the
  // scalar reference (the same rounded weights and activations, summed in fp32 in another
  // order), from one token on: partial tiles alone, after one or two whole tiles, shapes
  // whose columns leave part of a tile, odd blocks, INT4's groups of 32, 64 and 128, rows
  // of 1000 columns, 4100 rows (many widened runs), rows of 512 columns (padded to 544 apart),
  // rows of 9000 columns (runs of two blocks), and token panels: 50 tokens (one panel, a whole tile
  // and a partial one), 100 and 1100.
  void widenedTilesMatchScalar_data() {
    QTest::addColumn<bool>("hardware");
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("cols");
    QTest::addColumn<int>("group");
    const IsaFeatures& usable = detect_isa().usable;
    for (bool hardware : {false, true}) {
      if (hardware && !variant_supported(CpuVariant::Amx, usable)) continue;
      if (!hardware && !emulatedTilesRun()) continue;
      for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Int4}) {
        for (int tokens : {1, 5, 15, 16, 17, 32, 33, 50, 100, 1100}) {
          for (auto [rows, cols] : std::vector<std::pair<int, int>>{{16, 64},
                                                                    {37, 40},
                                                                    {64, 264},
                                                                    {48, 384},
                                                                    {21, 200},
                                                                    {40, 1000},
                                                                    {4100, 72},
                                                                    {24, 512},
                                                                    {40, 9000}}) {
            if (tokens > 512 && rows * cols > 40000) continue;  // the emulation is slow
            if (cols > 1000 && tokens != 17 && tokens != 50) continue;
            if (tokens == 100 && rows * cols > 40000) continue;
            for (int group : f == PackedFormat::Int4 ? std::vector<int>{32, 64, 128}
                                                     : std::vector<int>{int(kInt8WeightGroup)}) {
              const QString name = QStringLiteral("%1 %2 t%3 %4x%5 g%6")
                                       .arg(hardware ? "amx" : "amx-emulated", formatName(f))
                                       .arg(tokens)
                                       .arg(rows)
                                       .arg(cols)
                                       .arg(group);
              QTest::newRow(qPrintable(name))
                  << hardware << int(f) << tokens << rows << cols << group;
            }
          }
        }
      }
    }
    if (!variant_supported(CpuVariant::Amx, usable) && !emulatedTilesRun()) QSKIP(kNoEmulatedTiles);
  }

  void widenedTilesMatchScalar() {
    QFETCH(bool, hardware);
    QFETCH(int, format);
    QFETCH(int, tokens);
    QFETCH(int, rows);
    QFETCH(int, cols);
    QFETCH(int, group);
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 71);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = packAs(static_cast<PackedFormat>(format), source, group);
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 72);
    PackedActivations a;
    pack_widened_activations(w, x.data(), tokens, a);
    QCOMPARE(a.format, PackedFormat::Bf16);
    QCOMPARE(a.cols_padded, w.cols_padded);
    QCOMPARE(a.bf16_stride, widened_row_stride(w.cols_padded));
    const std::int64_t stride = rows + 3;  // sentinels between the rows stay untouched
    std::vector<float> want(static_cast<std::size_t>(tokens * stride), -7.0f), got(want);
    packed_matmul_scalar(w, a, want.data(), stride, 0, w.blocks);
    if (hardware)
      packed_matmul(w, a, got.data(), stride, 0, w.blocks, CpuVariant::Amx);
    else
      packed_matmul_amx_emulated(w, a, got.data(), stride, 0, w.blocks);
    // The tiles sum in another order than the reference: besides a relative 1e-4, the two may
    // differ by a few roundings of the terms' magnitudes (AMX on rows of 9000 columns, whose
    // sums cancel to a thousandth of their terms: 1.4e-4 apart at 0.14).
    // (The magnitudes are summed only once a value needs them.)
    std::vector<float> magnitude;
    const auto close = [&](float v, std::size_t i) {
      const float d = std::abs(v - want[i]), relative = 1e-4f * (1.0f + std::abs(want[i]));
      if (d <= relative) return true;
      if (magnitude.empty()) magnitude = widened_abs_sums(w, a, stride);
      return d <= relative + 1e-6f * magnitude[i];
    };
    for (std::size_t i = 0; i < want.size(); ++i) {
      QVERIFY2(close(got[i], i),
               qPrintable(QStringLiteral("%1 vs %2 at %3").arg(got[i]).arg(want[i]).arg(i)));
    }
    // A block range inside the matrix leaves the rows outside it alone.
    if (w.blocks >= 3) {
      std::vector<float> part(want.size(), -7.0f);
      if (hardware)
        packed_matmul(w, a, part.data(), stride, 1, w.blocks - 1, CpuVariant::Amx);
      else
        packed_matmul_amx_emulated(w, a, part.data(), stride, 1, w.blocks - 1);
      for (std::int64_t t = 0; t < tokens; ++t) {
        for (std::int64_t r = 0; r < stride; ++r) {
          const bool inside = r >= kPackRows && r < (w.blocks - 1) * kPackRows && r < rows;
          const float v = part[static_cast<std::size_t>(t * stride + r)];
          if (inside)
            QVERIFY(close(v, static_cast<std::size_t>(t * stride + r)));
          else
            QCOMPARE(v, -7.0f);
        }
      }
    }
  }

  // The widened reference takes each weight as unpack_row gives it, rounded to BF16, and
  // the activations rounded to BF16: against the product of those values in double, only
  // the fp32 sums' rounding is left. A wrong column order, scale, offset or group shows.
  void widenedScalarMultipliesTheStoredWeights() {
    const int tokens = 3, rows = 21, cols = 200;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 81);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Int4}) {
      const PackedMatrix w = packAs(f, source, 64);
      const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 82);
      PackedActivations a;
      pack_widened_activations(w, x.data(), tokens, a);
      std::vector<float> got(static_cast<std::size_t>(tokens * rows));
      packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
      std::vector<float> row(static_cast<std::size_t>(cols));
      for (int r = 0; r < rows; ++r) {
        unpack_row(w, r, row.data());
        for (int t = 0; t < tokens; ++t) {
          double want = 0, size = 0, largest = 0;
          for (int c = 0; c < cols; ++c) {
            const double wv = bf16_to_f32(f32_to_bf16(row[static_cast<std::size_t>(c)]));
            const double xv = bf16_to_f32(f32_to_bf16(x[static_cast<std::size_t>(t * cols + c)]));
            want += wv * xv;
            size += std::abs(wv * xv);
            largest = std::max(largest, std::abs(wv * xv));
          }
          const float g = got[static_cast<std::size_t>(t * rows + r)];
          // fp32 sums of 200 terms: well within 4e-5 of the terms' size. INT4's reference
          // fuses nibble * scale + offset where unpack_row may round twice, which can move a
          // weight by one BF16 step (2^-8 of it): a few such terms at most.
          const double bound =
              4e-5 * size + (f == PackedFormat::Int4 ? 4.0 * largest / 256.0 : 0.0);
          QVERIFY2(std::abs(g - want) <= bound,
                   qPrintable(QStringLiteral("%1 row %2 token %3: %4 vs %5")
                                  .arg(formatName(f))
                                  .arg(r)
                                  .arg(t)
                                  .arg(g)
                                  .arg(want)));
        }
      }
    }
  }

  // Who takes widened products: the AMX variant alone, INT8 and INT4 alone, from
  // amx_widen_tokens on (64 for both); any other variant given widened activations
  // refuses them.
  void widenedProductsAreAmxOnly() {
    const auto values = normal_values(64 * 64, 91);
    WeightMatrix source;
    source.data = values.data();
    source.rows = 64;
    source.cols = 64;
    const PackedMatrix i8 = packAs(PackedFormat::Int8, source, 32);
    const PackedMatrix bf = packAs(PackedFormat::Bf16, source, 0);
    const PackedMatrix i4 = packAs(PackedFormat::Int4, source, 32);
    QVERIFY(widened_product(PackedFormat::Int8, kAmxWidenInt8Tokens, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Int8, kAmxWidenInt8Tokens - 1, CpuVariant::Amx));
    QVERIFY(widened_product(PackedFormat::Int4, kAmxWidenInt4Tokens, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Int4, kAmxWidenInt4Tokens - 1, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Int8, 512, CpuVariant::Avx512));
    QVERIFY(!widened_product(PackedFormat::Bf16, 512, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Mxfp4, 512, CpuVariant::Amx));
    const int tokens = int(kAmxWidenInt8Tokens);
    const auto x = normal_values(static_cast<std::size_t>(64 * tokens), 92);
    PackedActivations a;
    pack_activations_for(i8, x.data(), tokens, a, CpuVariant::Amx);
    QCOMPARE(a.format, PackedFormat::Bf16);
    pack_activations_for(i8, x.data(), tokens - 1, a, CpuVariant::Amx);
    QCOMPARE(a.format, PackedFormat::Int8);
    pack_activations_for(i4, x.data(), int(kAmxWidenInt4Tokens), a, CpuVariant::Amx);
    QCOMPARE(a.format, PackedFormat::Bf16);
    pack_activations_for(i8, x.data(), tokens, a, CpuVariant::Avx512);
    QCOMPARE(a.format, PackedFormat::Int8);
    pack_widened_activations(i8, x.data(), tokens, a);
    std::vector<float> y(static_cast<std::size_t>(tokens * 64));
    for (CpuVariant v : {CpuVariant::Scalar, CpuVariant::Avx2, CpuVariant::Avx512})
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                               packed_matmul(i8, a, y.data(), 64, 0, i8.blocks, v));
  }

  void scalarIsCloseToFloat_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<double>("tolerance");
    QTest::newRow("int8") << int(PackedFormat::Int8) << 0.03;
    // 4 bits: a uniform quantiser with max/7 steps on Gaussian weights leaves ~10% error.
    QTest::newRow("int4") << int(PackedFormat::Int4) << 0.15;
    QTest::newRow("bf16") << int(PackedFormat::Bf16) << 0.01;
  }

  // Quantisation error: relative to the size of the result's typical magnitude.
  void scalarIsCloseToFloat() {
    QFETCH(int, format);
    QFETCH(double, tolerance);
    const int tokens = 4, rows = 48, cols = 256;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 21);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedFormat f = static_cast<PackedFormat>(format);
    const PackedMatrix w = packAs(f, source);
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 22);
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    std::vector<float> got(static_cast<std::size_t>(tokens * rows));
    packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
    const double error = error_against_exact(got, x, values, tokens, rows, cols);
    QVERIFY2(error < tolerance, qPrintable(QString::number(error)));
  }

  // The scalar INT4 reference against the dequantised weights it stores, read here from the
  // documented layout (per block and group a 64-byte header of 16 FP16 scales and 16 FP16
  // offsets, then the group's nibbles): the only error left is the activations' INT8
  // rounding, so a broken nibble order, header or offset shows.
  void int4MatchesItsDequantisedWeights() {
    const int tokens = 3, rows = 21, cols = 200, group = 32;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 41);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int4(source, group);
    QCOMPARE(w.cols_padded, 200);
    QCOMPARE(w.groups(), 7);  // six of 32 and one of 8
    QCOMPARE(w.block_bytes(), std::size_t(7 * 64 + 16 * 200 / 2));
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 42);
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    std::vector<float> got(static_cast<std::size_t>(tokens * rows));
    packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
    const std::int64_t group_bytes = 64 + group / 8 * 64;
    std::vector<float> unpacked(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      unpack_row(w, r, unpacked.data());
      for (int t = 0; t < tokens; ++t) {
        double want = 0, magnitude = 0;
        for (int c = 0; c < cols; ++c) {
          const std::uint8_t* at = w.block(r / 16) + (c / group) * group_bytes;
          const auto* header = reinterpret_cast<const std::uint16_t*>(at);
          const double scale = f16_to_f32(header[r % 16]);
          const double offset = f16_to_f32(header[16 + r % 16]);
          const std::uint8_t byte = at[64 + (c % group) / 8 * 64 + (r % 16) * 4 + c % 4];
          const int nibble = (c % 8) < 4 ? byte & 0x0F : byte >> 4;
          const double weight = nibble * scale + offset;
          QCOMPARE(double(unpacked[static_cast<std::size_t>(c)]), weight);
          // Within half a step, or clipped to an end of the grid.
          const double v = values[r * cols + c];
          const double lo = offset, hi = offset + 15 * scale;
          QVERIFY(scale > 0);
          QVERIFY(v < lo   ? nibble == 0
                  : v > hi ? nibble == 15
                           : std::abs(weight - v) <= 0.5 * scale * (1 + 1e-5));
          want += weight * a.q[static_cast<std::size_t>(t * a.cols_padded + c)] *
                  a.scale[static_cast<std::size_t>(t * a.groups() + c / group)];
          magnitude += std::abs(weight * x[t * cols + c]);
        }
        QVERIFY2(std::abs(got[t * rows + r] - want) <= 1e-4 * (1 + magnitude),
                 qPrintable(QStringLiteral("%1 vs %2").arg(got[t * rows + r]).arg(want)));
      }
    }
  }

  // Weights already on a 4-bit grid with FP16 step and minimum per 32 columns (as GGUF's
  // Q4_1 and Q4_0 blocks dequantise) come back exactly, whether a group uses all 16 levels,
  // fewer, or sits wholly on one side of zero; a group of 64 spanning two such blocks does
  // not, but stays within half its own step.
  void int4KeepsWeightsOnAFourBitGrid() {
    const int rows = 19, cols = 256;
    std::mt19937 rng(7);
    std::vector<float> values(static_cast<std::size_t>(rows * cols));
    for (int r = 0; r < rows; ++r) {
      for (int g = 0; g < cols / 32; ++g) {
        const float step = f16_to_f32(f32_to_f16(0.001f + 0.01f * (rng() % 100) / 100.0f));
        const int kind = (r + g) % 3;  // Q4_1-like, Q4_0-like (symmetric), one-sided
        const float lowest = kind == 0   ? f16_to_f32(f32_to_f16(-0.05f * (rng() % 10) / 9.0f))
                             : kind == 1 ? -8 * step
                                         : f16_to_f32(f32_to_f16(0.02f));
        const int levels = kind == 2 ? 11 : 16;  // one-sided: levels 0..10 only
        for (int c = 0; c < 32; ++c) {
          // Every group holds its lowest and highest level, as a quantiser's blocks do.
          const int q = c == 0 ? 0 : c == 1 ? levels - 1 : static_cast<int>(rng() % levels);
          values[static_cast<std::size_t>(r * cols + g * 32 + c)] = q * step + lowest;
        }
      }
    }
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    std::vector<float> row(static_cast<std::size_t>(cols));
    const PackedMatrix exact = pack_int4(source, 32);
    for (int r = 0; r < rows; ++r) {
      unpack_row(exact, r, row.data());
      for (int c = 0; c < cols; ++c)
        QCOMPARE(row[static_cast<std::size_t>(c)], values[static_cast<std::size_t>(r * cols + c)]);
    }
    const PackedMatrix wider = pack_int4(source, 64);
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      unpack_row(wider, r, row.data());
      for (int c = 0; c < cols; ++c) {
        worst = std::max(worst, double(std::abs(row[static_cast<std::size_t>(c)] -
                                                values[static_cast<std::size_t>(r * cols + c)])));
      }
    }
    QVERIFY(worst > 0);
    // The widest pair of groups spans about 0.22: half a step is 0.0073, an end clipped by
    // the fit 0.011.
    QVERIFY2(worst < 0.015, qPrintable(QString::number(worst)));
  }

  // Q4_K's sub-blocks of 32: step d * sc and minimum dmin * m (FP16 times 6-bit integers, so
  // not FP16 numbers), levels that need not reach 0 or 15. INT4 holds them to the rounding of
  // its FP16 scale and offset: within a fiftieth of a step (an offset many steps from zero
  // would lose more; a quantiser's blocks lie around zero).
  void int4HoldsQ4KGrids() {
    const int rows = 16, cols = 512;
    std::mt19937 rng(9);
    std::vector<float> values(static_cast<std::size_t>(rows * cols)), steps(values.size());
    for (int r = 0; r < rows; ++r) {
      const float d = f16_to_f32(f32_to_f16(0.0003f + 0.0001f * (rng() % 10)));
      const float dmin = f16_to_f32(f32_to_f16(0.0004f + 0.0001f * (rng() % 10)));
      for (int g = 0; g < cols / 32; ++g) {
        const float step = d * static_cast<float>(1 + rng() % 63);
        // Weights around zero, as a quantiser's blocks are: the minimum near half the span.
        const float minimum = dmin * static_cast<float>(std::clamp(
                                         std::lround(step * (6 + rng() % 4) / dmin), 0L, 63L));
        const int first = static_cast<int>(rng() % 4), last = 15 - static_cast<int>(rng() % 4);
        for (int c = 0; c < 32; ++c) {
          const int q = c == 0   ? first
                        : c == 1 ? last
                                 : first + static_cast<int>(rng() % (last - first + 1));
          values[static_cast<std::size_t>(r * cols + g * 32 + c)] = step * q - minimum;
          steps[static_cast<std::size_t>(r * cols + g * 32 + c)] = step;
        }
      }
    }
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int4(source, 32);
    std::vector<float> row(static_cast<std::size_t>(cols));
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      unpack_row(w, r, row.data());
      for (int c = 0; c < cols; ++c) {
        const std::size_t at = static_cast<std::size_t>(r * cols + c);
        worst = std::max(
            worst, double(std::abs(row[static_cast<std::size_t>(c)] - values[at]) / steps[at]));
      }
    }
    QVERIFY2(worst < 0.02, qPrintable(QString::number(worst)));
  }

  // Weights past FP16's range cannot have their grid stored: refused, not made infinite.
  void int4RefusesWeightsBeyondF16() {
    std::vector<float> values(64, 1.0f);
    values[5] = 70000.0f;
    WeightMatrix source;
    source.data = values.data();
    source.rows = 1;
    source.cols = 64;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, pack_int4(source, 32));
    values[5] = 65504.0f;
    const PackedMatrix w = pack_int4(source, 32);
    std::vector<float> row(64);
    unpack_row(w, 0, row.data());
    // The step (65503 / 15) is rounded to FP16, so the top of the grid is near, not on.
    QVERIFY2(std::abs(row[5] - 65504.0f) < 65504.0f * 1e-3f, qPrintable(QString::number(row[5])));
    QCOMPARE(row[6], 1.0f);
  }

  // FP16 rounding: every half survives the trip through fp32; ties go to even; past 65504
  // to infinity from 65520 on; below 2^-14 to subnormals.
  void f16RoundsToNearestEven() {
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      const auto half = static_cast<std::uint16_t>(h);
      const float f = f16_to_f32(half);
      if (std::isnan(f)) {
        QVERIFY(std::isnan(f16_to_f32(f32_to_f16(f))));
      } else {
        QCOMPARE(f32_to_f16(f), half);
      }
    }
    QCOMPARE(f32_to_f16(1.0f + 1.0f / 2048), std::uint16_t(0x3c00));  // tie: to even (down)
    QCOMPARE(f32_to_f16(1.0f + 3.0f / 2048), std::uint16_t(0x3c02));  // tie: to even (up)
    QCOMPARE(f32_to_f16(65519.0f), std::uint16_t(0x7bff));
    QCOMPARE(f32_to_f16(65520.0f), std::uint16_t(0x7c00));
    QCOMPARE(f32_to_f16(-1e9f), std::uint16_t(0xfc00));
    QCOMPARE(f32_to_f16(std::ldexp(1.0f, -24)), std::uint16_t(0x0001));
    QCOMPARE(f32_to_f16(std::ldexp(1.0f, -26)), std::uint16_t(0x0000));  // below half a step
    QCOMPARE(f32_to_f16(std::ldexp(3.0f, -26)), std::uint16_t(0x0001));
    QCOMPARE(f32_to_f16(std::ldexp(1023.5f, -24)), std::uint16_t(0x0400));  // to the normals
    QCOMPARE(f32_to_f16(-0.0f), std::uint16_t(0x8000));
  }

  // MXFP4 keeps every weight: the packed rows are the checkpoint's values, the stored
  // matrix converts to the same, and the scalar product differs from the fp32 one by the
  // activations' INT8 rounding alone.
  void mxfp4KeepsTheCheckpointsWeights() {
    const int tokens = 3, rows = 21, cols = 200;
    const Mxfp4Source fp4(rows, cols, 61);
    const PackedMatrix w = pack_mxfp4(fp4.matrix);
    QCOMPARE(w.groups(), 7);  // six of 32 and one of 8
    std::vector<float> dequantised(static_cast<std::size_t>(rows * cols));
    std::vector<float> packed_row(static_cast<std::size_t>(cols)),
        stored_row(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) {
        const std::uint8_t byte = fp4.codes[static_cast<std::size_t>((r * cols + c) / 2)];
        const int code = c % 2 == 0 ? byte & 0x0F : byte >> 4;
        dequantised[static_cast<std::size_t>(r * cols + c)] =
            kFp4E2M1Values[code] * fp4.scales[static_cast<std::size_t>(r * 7 + c / 32)];
      }
      unpack_row(w, r, packed_row.data());
      fp4.matrix.row_f32(r, stored_row.data());
      for (int c = 0; c < cols; ++c) {
        QCOMPARE(packed_row[static_cast<std::size_t>(c)],
                 dequantised[static_cast<std::size_t>(r * cols + c)]);
        QCOMPARE(stored_row[static_cast<std::size_t>(c)],
                 dequantised[static_cast<std::size_t>(r * cols + c)]);
      }
    }
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 62);
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    std::vector<float> got(static_cast<std::size_t>(tokens * rows));
    packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        double want = 0, magnitude = 0;
        for (int c = 0; c < cols; ++c) {
          const double weight = dequantised[static_cast<std::size_t>(r * cols + c)];
          want += weight * a.q[static_cast<std::size_t>(t * a.cols_padded + c)] *
                  a.scale[static_cast<std::size_t>(t * a.groups() + c / kMxfp4Group)];
          magnitude += std::abs(weight * x[t * cols + c]);
        }
        QVERIFY2(std::abs(got[t * rows + r] - want) <= 1e-5 * (1 + magnitude),
                 qPrintable(QStringLiteral("%1 vs %2").arg(got[t * rows + r]).arg(want)));
      }
    }
    // Weights stored otherwise are refused, not quantised.
    const std::vector<float> values(64, 1.0f);
    WeightMatrix plain;
    plain.data = values.data();
    plain.rows = 2;
    plain.cols = 32;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, pack_mxfp4(plain));
  }

  void int4RejectsGroupsThatAreNotMultiplesOf8() {
    const std::vector<float> values(64, 1.0f);
    WeightMatrix source;
    source.data = values.data();
    source.rows = 2;
    source.cols = 32;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, pack_int4(source, 12));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, pack_int4(source, 0));
  }

  // Each activation group has its own scale (its largest magnitude over 127), its values
  // rounded to the nearest step, and the sum of its quantised values; the padding past the
  // columns stays 0.
  void activationGroupsHaveTheirOwnScales() {
    const int tokens = 2, cols = 150, group = 64;  // groups of 64, 64 and 24 (+2 padding)
    auto x = normal_values(static_cast<std::size_t>(tokens * cols), 71);
    x[70] = 40.0f;  // an outlier in token 0's second group
    PackedActivations a;
    pack_activations(x.data(), tokens, cols, PackedFormat::Int8, a, group);
    QCOMPARE(a.cols_padded, 152);
    QCOMPARE(a.groups(), 3);
    QCOMPARE(a.scale.size(), std::size_t(6));
    for (int t = 0; t < tokens; ++t) {
      for (int g = 0; g < 3; ++g) {
        float max_abs = 0;
        std::int32_t sum = 0;
        for (int c = g * group; c < std::min(cols, (g + 1) * group); ++c) {
          max_abs = std::max(max_abs, std::abs(x[static_cast<std::size_t>(t * cols + c)]));
          sum += a.q[static_cast<std::size_t>(t * a.cols_padded + c)];
        }
        QCOMPARE(a.scale[static_cast<std::size_t>(t * 3 + g)], max_abs / 127.0f);
        QCOMPARE(a.group_sum[static_cast<std::size_t>(t * 3 + g)], sum);
        // INT8's sums of stored bytes (w + 128) start from minus 128 times it.
        QCOMPARE(a.start[static_cast<std::size_t>(t * 3 + g)], -128 * sum);
        // Each value the nearest integer to it over the scale (sixteen at a time where the
        // group has them, the rest one by one: the last group, 22 columns, has both).
        const double inv = 1.0 / (max_abs / 127.0f);
        for (int c = g * group; c < std::min(cols, (g + 1) * group); ++c) {
          const double exact = x[static_cast<std::size_t>(t * cols + c)] * inv;
          const int q = a.q[static_cast<std::size_t>(t * a.cols_padded + c)];
          QVERIFY2(std::abs(q - exact) <= 0.5 + 1e-4,
                   qPrintable(QStringLiteral("column %1: %2 for %3").arg(c).arg(q).arg(exact)));
        }
      }
      QCOMPARE(a.q[static_cast<std::size_t>(t * a.cols_padded + 150)], std::int8_t(0));
      QCOMPARE(a.q[static_cast<std::size_t>(t * a.cols_padded + 151)], std::int8_t(0));
    }
    QCOMPARE(a.q[70], std::int8_t(127));
    // Groups that are not a multiple of 4 columns (8 for INT4), and INT4 activations packed
    // for another group than the weights', are refused.
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             pack_activations(x.data(), tokens, cols, PackedFormat::Int8, a, 6));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             pack_activations(x.data(), tokens, cols, PackedFormat::Int4, a, 12));
    WeightMatrix source;
    const auto values = normal_values(static_cast<std::size_t>(16 * cols), 72);
    source.data = values.data();
    source.rows = 16;
    source.cols = cols;
    const PackedMatrix w4 = pack_int4(source, 32);
    pack_activations(x.data(), tokens, cols, PackedFormat::Int4, a, 64);
    std::vector<float> y(static_cast<std::size_t>(tokens * 16));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             packed_matmul(w4, a, y.data(), 16, 0, 1, CpuVariant::Scalar));
  }

  // What the groups are for: one large activation (an outlier channel, as real models have)
  // no longer coarsens the quantisation of all the others. With one scale per token the
  // error of the product grows with the outlier; with groups it stays near the plain INT8
  // error.
  void int8GroupsKeepSmallActivationsPrecise() {
    const int tokens = 8, rows = 32, cols = 1024;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 81);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int8(source);
    auto x = normal_values(static_cast<std::size_t>(tokens * cols), 82);
    for (int t = 0; t < tokens; ++t) x[static_cast<std::size_t>(t * cols + 5)] = 60.0f;
    // The packed weights times the activations as quantised (the kernels take groups of 32
    // only; the product is the same to within float rounding, int8SumsTakeTheOffsetOut).
    auto relative_error = [&](std::int64_t group) {
      PackedActivations a;
      pack_activations(x.data(), tokens, cols, PackedFormat::Int8, a, group);
      const std::vector<double> y = quantised_product(w, a);
      return error_against_exact(std::vector<float>(y.begin(), y.end()), x, values, tokens, rows,
                                 cols);
    };
    const double whole_row = relative_error(kWholeRow);
    const double grouped = relative_error(kInt8ActivationGroup);
    QVERIFY2(grouped < 0.02 && grouped * 3 < whole_row,
             qPrintable(QStringLiteral("groups %1, whole row %2").arg(grouped).arg(whole_row)));
  }

  // INT8 sums the stored bytes (w + 128) and takes the offset, 128 times the group's
  // activation sum, out of each group's integer sum before scaling. Activations far from zero
  // (all positive here, as after a gated product's activation) make that offset much larger
  // than the result; the result must still be the product of the packed weights and the
  // quantised activations to within float rounding, far below INT8's own error (about 1e-3
  // here); variantsMatchScalar holds every variant to this to the bit. Activation groups too
  // wide for 32-bit sums (oneDNN's whole rows) are refused.
  void int8SumsTakeTheOffsetOut() {
    const int tokens = 5, rows = 40, cols = 1000;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 91);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int8(source);
    auto x = normal_values(static_cast<std::size_t>(tokens * cols), 92);
    for (float& v : x) v = 4.0f + 0.5f * v;
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    const std::vector<double> exact = quantised_product(w, a);
    double norm = 0;
    for (double v : exact) norm = std::max(norm, std::abs(v));
    std::vector<float> got(exact.size());
    packed_matmul_scalar(w, a, got.data(), rows, 0, w.blocks);
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - exact[i]) / norm);
    QVERIFY2(worst < 2e-6, qPrintable(QString::number(worst)));
    std::vector<float> wide(66400, 1.0f);
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument,
        pack_activations(wide.data(), 1, 66400, PackedFormat::Int8, a, kWholeRow));
    // The kernels take INT8 weights with activations in the weights' groups only.
    PackedActivations whole;
    pack_activations(x.data(), tokens, cols, PackedFormat::Int8, whole, kWholeRow);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, check_activations(w, whole));
  }

  // INT8 keeps an FP16 scale per row and 32 columns: a group's largest magnitude over 127,
  // rounded up to FP16. A large weight coarsens only its own group (one scale per row made
  // every weight of the row as coarse); weights already on such a grid (GGUF's Q8_0 blocks: an
  // FP16 scale and integers up to 127 per 32) are kept exactly; padding rows and columns are
  // zero; weights past what FP16 scales hold are refused.
  void int8KeepsAScalePerGroup() {
    const int rows = 21, cols = 200;  // a partial block; 7 groups, the last of 8 columns
    auto values = normal_values(static_cast<std::size_t>(rows * cols), 93);
    for (float& v : values) v *= 0.02f;
    values[3 * cols + 40] = 5.0f;  // an outlier in row 3, group 1
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int8(source);
    QCOMPARE(w.group, kInt8WeightGroup);
    QCOMPARE(w.groups(), 7);
    QCOMPARE(w.block_bytes(), std::size_t((200 / 4 + 4) * 64));  // 50 steps, 4 headers
    QCOMPARE(packed_matrix_bytes(w), std::uint64_t(2 * (200 / 4 + 4) * 64));
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (int r = 0; r < rows; ++r) {
      unpack_row(w, r, row.data());
      for (int g = 0; g < 7; ++g) {
        float max_abs = 0;
        for (int c = g * 32; c < std::min(cols, g * 32 + 32); ++c)
          max_abs = std::max(max_abs, std::abs(values[static_cast<std::size_t>(r * cols + c)]));
        const float step = f16_to_f32(f32_to_f16(max_abs / 127.0f)) >= max_abs / 127.0f
                               ? f16_to_f32(f32_to_f16(max_abs / 127.0f))
                               : max_abs / 127.0f * (1 + 1.0f / 1024);
        for (int c = g * 32; c < std::min(cols, g * 32 + 32); ++c) {
          const float err = std::abs(row[static_cast<std::size_t>(c)] -
                                     values[static_cast<std::size_t>(r * cols + c)]);
          QVERIFY2(err <= 0.5f * step * (1 + 1e-3f),
                   qPrintable(QStringLiteral("row %1 column %2: error %3, step %4")
                                  .arg(r)
                                  .arg(c)
                                  .arg(err)
                                  .arg(step)));
        }
      }
    }
    // Row 3's other groups keep their own fine steps: its group 0 is as exact as row 4's.
    unpack_row(w, 3, row.data());
    double err0 = 0;
    for (int c = 0; c < 32; ++c)
      err0 = std::max(err0, double(std::abs(row[c] - values[3 * cols + c])));
    QVERIFY2(err0 < 0.02 * 4 / 127.0, qPrintable(QString::number(err0)));
    // Padding rows 21..31 read as zero.
    unpack_row(w, 31, row.data());
    for (float v : row) QCOMPARE(v, 0.0f);

    // Q8_0-like blocks: an FP16 scale d and integers with one of them at +-127 per 32 columns.
    std::mt19937 rng(94);
    std::vector<float> q8(static_cast<std::size_t>(16 * 96));
    for (int r = 0; r < 16; ++r) {
      for (int g = 0; g < 3; ++g) {
        const float d = f16_to_f32(f32_to_f16(1e-4f * static_cast<float>(1 + rng() % 300)));
        for (int c = 0; c < 32; ++c) {
          const int q = c == 7 ? (r % 2 ? 127 : -127) : static_cast<int>(rng() % 255) - 127;
          q8[static_cast<std::size_t>(r * 96 + g * 32 + c)] = static_cast<float>(q) * d;
        }
      }
    }
    WeightMatrix blocks;
    blocks.data = q8.data();
    blocks.rows = 16;
    blocks.cols = 96;
    const PackedMatrix kept = pack_int8(blocks);
    for (int r = 0; r < 16; ++r) {
      unpack_row(kept, r, row.data());
      for (int c = 0; c < 96; ++c) QCOMPARE(row[c], q8[static_cast<std::size_t>(r * 96 + c)]);
    }

    std::vector<float> huge(static_cast<std::size_t>(cols), 1.0f);
    huge[9] = 127.0f * 65504.0f * 1.01f;
    WeightMatrix beyond;
    beyond.data = huge.data();
    beyond.rows = 1;
    beyond.cols = cols;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, pack_int8(beyond));
  }

  void allBlocksInParallelChunks() {
    const int rows = 100, cols = 64, tokens = 2;
    const auto values = normal_values(static_cast<std::size_t>(rows * cols), 31);
    WeightMatrix source;
    source.data = values.data();
    source.rows = rows;
    source.cols = cols;
    const PackedMatrix w = pack_int8(source);
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 32);
    PackedActivations a;
    pack_activations_for(w, x.data(), tokens, a);
    std::vector<float> want(static_cast<std::size_t>(tokens * rows)), got(want.size());
    packed_matmul_scalar(w, a, want.data(), rows, 0, w.blocks);
    const ParallelFor oneAtATime = [](std::int64_t n,
                                      const std::function<void(std::int64_t, std::int64_t)>& body) {
      for (std::int64_t i = n - 1; i >= 0; --i) body(i, i + 1);
    };
    packed_matmul_all(w, a, got.data(), rows, CpuVariant::Scalar, oneAtATime);
    QCOMPARE(got, want);
  }

  // Activations packed with the tokens spread over threads (here in uneven pieces, last
  // first) are the ones packed on one thread, to the bit, in every format.
  void activationsPackedInParallelAreTheSame_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("tokens");
    for (PackedFormat f :
         {PackedFormat::Int8, PackedFormat::Int4, PackedFormat::Mxfp4, PackedFormat::Bf16})
      for (int tokens : {1, 31, 32, 33, 100})
        QTest::newRow(qPrintable(QStringLiteral("format %1, %2 tokens").arg(int(f)).arg(tokens)))
            << int(f) << tokens;
  }

  void activationsPackedInParallelAreTheSame() {
    QFETCH(int, format);
    QFETCH(int, tokens);
    const int cols = 200;
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 33);
    const auto f = static_cast<PackedFormat>(format);
    PackedActivations serial, parallel;
    pack_activations(x.data(), tokens, cols, f, serial, 64);
    int calls = 0;
    const ParallelFor uneven = [&](std::int64_t n,
                                   const std::function<void(std::int64_t, std::int64_t)>& body) {
      ++calls;
      const std::int64_t cut = n / 3 + 1;
      if (cut < n) body(cut, n);
      body(0, std::min(cut, n));
    };
    pack_activations(x.data(), tokens, cols, f, parallel, 64, uneven);
    QCOMPARE(calls, tokens >= kParallelPackTokens ? 1 : 0);
    QCOMPARE(parallel.cols_padded, serial.cols_padded);
    QCOMPARE(parallel.group, serial.group);
    QCOMPARE(parallel.q, serial.q);
    QCOMPARE(parallel.scale, serial.scale);
    QCOMPARE(parallel.group_sum, serial.group_sum);
    QCOMPARE(parallel.scaled_sum, serial.scaled_sum);
    QCOMPARE(parallel.start, serial.start);
    QCOMPARE(parallel.bf16, serial.bf16);
  }

  // Widened activations lie widened_row_stride apart: rows of 512 columns (1 KiB) 544 apart,
  // the padding zero, and rows of 200 columns as they are; gathered rows keep the stride.
  void widenedActivationRowsArePadded() {
    QCOMPARE(widened_row_stride(200), 200);
    QCOMPARE(widened_row_stride(512), 544);
    QCOMPARE(widened_row_stride(2048), 2080);
    const int tokens = 5;
    for (int cols : {200, 512}) {
      const PackedMatrix w = packed_shape(16, cols, PackedFormat::Int8);
      const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 43);
      PackedActivations all;
      pack_widened_activations(w, x.data(), tokens, all);
      const std::int64_t stride = widened_row_stride(w.cols_padded);
      QCOMPARE(all.bf16_stride, stride);
      QCOMPARE(all.bf16.size(), static_cast<std::size_t>(tokens * stride));
      for (int t = 0; t < tokens; ++t) {
        for (std::int64_t c = 0; c < stride; ++c) {
          const std::uint16_t want =
              c < cols ? f32_to_bf16(x[static_cast<std::size_t>(t * cols + c)]) : 0;
          QCOMPARE(all.bf16[static_cast<std::size_t>(t * stride + c)], want);
        }
      }
      const std::vector<std::int64_t> rows = {4, 0, 4};
      std::vector<float> picked;
      for (std::int64_t r : rows)
        picked.insert(picked.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
      PackedActivations gathered, want;
      pack_widened_activations(w, picked.data(), 3, want);
      gather_activations(all, rows.data(), 3, gathered);
      QCOMPARE(gathered.bf16_stride, stride);
      QCOMPARE(gathered.bf16, want.bf16);
      // Rows whose stride is not set are refused, widened or for BF16 weights.
      PackedActivations unset = all;
      unset.bf16_stride = 0;
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, check_activations(w, unset));
      const PackedMatrix bf16 = packed_shape(16, cols, PackedFormat::Bf16);
      pack_activations_for(bf16, x.data(), tokens, unset);
      check_activations(bf16, unset);
      unset.bf16_stride = 0;
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, check_activations(bf16, unset));
    }
  }

  // Rows gathered from a whole prompt's packed activations (repeated, out of order, and a
  // reused output that held more rows) are the rows packed from their values, to the bit.
  void gatheredActivationsAreThoseOfTheRows_data() {
    QTest::addColumn<int>("format");
    QTest::addColumn<int>("group");
    QTest::newRow("int8, groups of 32") << int(PackedFormat::Int8) << 32;
    QTest::newRow("int8, whole rows") << int(PackedFormat::Int8) << int(kWholeRow);
    QTest::newRow("int4") << int(PackedFormat::Int4) << 64;
    QTest::newRow("mxfp4") << int(PackedFormat::Mxfp4) << 32;
    QTest::newRow("bf16") << int(PackedFormat::Bf16) << 0;
  }

  void gatheredActivationsAreThoseOfTheRows() {
    QFETCH(int, format);
    QFETCH(int, group);
    const auto f = static_cast<PackedFormat>(format);
    const int tokens = 9, cols = 200;
    const auto x = normal_values(static_cast<std::size_t>(tokens * cols), 41);
    PackedActivations all, gathered, want;
    pack_activations(x.data(), tokens, cols, f, all, group);
    pack_activations(x.data(), tokens, cols, f, gathered, group);  // more rows than below
    const std::vector<std::int64_t> rows = {7, 0, 3, 3, 8};
    std::vector<float> picked;
    for (std::int64_t r : rows)
      picked.insert(picked.end(), x.begin() + r * cols, x.begin() + (r + 1) * cols);
    pack_activations(picked.data(), static_cast<std::int64_t>(rows.size()), cols, f, want, group);
    gather_activations(all, rows.data(), static_cast<std::int64_t>(rows.size()), gathered);
    QCOMPARE(gathered.format, want.format);
    QCOMPARE(gathered.tokens, want.tokens);
    QCOMPARE(gathered.cols_padded, want.cols_padded);
    QCOMPARE(gathered.group, want.group);
    QCOMPARE(gathered.q, want.q);
    QCOMPARE(gathered.scale, want.scale);
    QCOMPARE(gathered.group_sum, want.group_sum);
    QCOMPARE(gathered.scaled_sum, want.scaled_sum);
    QCOMPARE(gathered.start, want.start);
    QCOMPARE(gathered.bf16, want.bf16);
    // INT4's products read the scaled sums; activations without them are refused.
    QCOMPARE(gathered.scaled_sum.size(),
             f == PackedFormat::Int4 ? rows.size() * static_cast<std::size_t>(want.groups()) : 0);
    if (f == PackedFormat::Int4) {
      for (std::size_t i = 0; i < want.scaled_sum.size(); ++i)
        QCOMPARE(want.scaled_sum[i], want.scale[i] * static_cast<float>(want.group_sum[i]));
      const auto values = normal_values(static_cast<std::size_t>(16 * cols), 5);
      WeightMatrix source;
      source.data = values.data();
      source.rows = 16;
      source.cols = cols;
      const PackedMatrix w = pack_int4(source, group);
      std::vector<float> y(rows.size() * 16);
      packed_matmul(w, gathered, y.data(), 16, 0, w.blocks, CpuVariant::Scalar);
      gathered.scaled_sum.clear();
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, packed_matmul(w, gathered, y.data(), 16, 0,
                                                                    w.blocks, CpuVariant::Scalar));
    }
    const std::int64_t outside[] = {tokens};
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, gather_activations(all, outside, 1, gathered));
  }
};

QTEST_GUILESS_MAIN(TestPackedMatmul)
#include "tst_packed_matmul.moc"
