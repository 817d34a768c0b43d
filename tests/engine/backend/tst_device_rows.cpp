// What the CUDA backend puts in GPU memory, checked on any machine: fp32 matrices as they are,
// every other format as the BF16 rounding of the weights it stands for, a range of rows as
// those rows, and routed experts packed in per-pool slices joined back whole.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/backend/cuda/device_rows.h"
#include "engine/model/loaded_model.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/packed/matmul.h"
#include "tests/support/random_values.h"

using namespace tandem;
using backend::DeviceRowType;
using backend::ExpertPart;

namespace {

std::string fixture(const char* name) {
  return std::string(TANDEM_TEST_DATA_DIR) + "/models/" + name;
}

float bf16_value(std::uint16_t v) {
  return kernels::bf16_to_f32(v);
}

// max |device - source| over max |source| for rows [r0, r1) of a rows x cols source.
double bf16_rows_error(const std::vector<std::uint16_t>& device, const std::vector<float>& source,
                       std::int64_t r0, std::int64_t cols) {
  double worst = 0.0, scale = 1e-30;
  for (std::size_t i = 0; i < device.size(); ++i) {
    const float want = source[static_cast<std::size_t>(r0 * cols) + i];
    worst = std::max(worst, static_cast<double>(std::abs(bf16_value(device[i]) - want)));
    scale = std::max(scale, static_cast<double>(std::abs(want)));
  }
  return worst / scale;
}

}  // namespace

class TestDeviceRows : public QObject {
  Q_OBJECT

 private slots:
  void fp32StaysExact() {
    const std::int64_t rows = 7, cols = 9;
    const std::vector<float> w = test::normal_values(rows * cols, 1);
    kernels::WeightMatrix m;
    m.dtype = kernels::DType::F32;
    m.data = w.data();
    m.rows = rows;
    m.cols = cols;
    QCOMPARE(backend::device_row_type(m), DeviceRowType::F32);
    QCOMPARE(backend::device_matrix_bytes(m), std::uint64_t(rows * cols * 4));
    std::vector<float> out(static_cast<std::size_t>(3 * cols));
    backend::device_rows(m, 2, 5, out.data());
    QCOMPARE(out, std::vector<float>(w.begin() + 2 * cols, w.begin() + 5 * cols));
  }

  void bf16IsKeptBitForBit() {
    const std::int64_t rows = 5, cols = 12;
    const std::vector<float> w = test::normal_values(rows * cols, 2);
    std::vector<std::uint16_t> stored(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) stored[i] = kernels::f32_to_bf16(w[i]);
    kernels::WeightMatrix m;
    m.dtype = kernels::DType::BF16;
    m.data = stored.data();
    m.rows = rows;
    m.cols = cols;
    QCOMPARE(backend::device_row_type(m), DeviceRowType::Bf16);
    QCOMPARE(backend::device_matrix_bytes(m), std::uint64_t(rows * cols * 2));
    std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
    backend::device_rows(m, 0, rows, out.data());
    QCOMPARE(out, stored);
  }

  // FP8 with DeepSeek's block scales, a slice that starts inside a block: each weight is the
  // fp8 value times its block's scale, rounded to BF16.
  void fp8BlocksAreScaled() {
    const std::int64_t rows = 20, cols = 40, first = 3;
    std::vector<std::uint8_t> fp8(static_cast<std::size_t>((rows + first) * cols));
    for (std::size_t i = 0; i < fp8.size(); ++i)
      fp8[i] = static_cast<std::uint8_t>((i * 37 + 11) % 0x70 + 0x08 + (i % 2 ? 0x80 : 0));
    const std::vector<float> scales = {0.5f, 2.0f, -1.5f, 0.25f, 3.0f, 1.0f};  // 3 x 2 blocks
    kernels::WeightMatrix m;
    m.dtype = kernels::DType::F8E4M3;
    m.data = fp8.data() + first * cols;
    m.rows = rows;
    m.cols = cols;
    m.block_scale = scales.data();
    m.block_rows = 8;
    m.block_cols = 32;
    m.first_row = first;
    QCOMPARE(backend::device_row_type(m), DeviceRowType::Bf16);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
    backend::device_rows(m, 0, rows, out.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const float v =
            kernels::f8e4m3_to_f32(fp8[static_cast<std::size_t>((r + first) * cols + c)]);
        const float s = scales[static_cast<std::size_t>(((r + first) / 8) * 2 + c / 32)];
        QCOMPARE(out[static_cast<std::size_t>(r * cols + c)], kernels::f32_to_bf16(v * s));
      }
    }
  }

  // Tandem's packed formats: the BF16 rounding of what the CPU kernels multiply with, which is
  // within the format's own error of the weights it was packed from.
  void packedFormatsUnpack_data() {
    QTest::addColumn<QString>("format");
    QTest::addColumn<double>("bound");
    QTest::newRow("int8") << "int8" << 1.0 / 127 + 1.0 / 128;
    // INT4's scale may clip a group's extreme by up to 40% to fit the rest better.
    QTest::newRow("int4") << "int4" << 0.45;
    QTest::newRow("bf16") << "bf16" << 1.0 / 128;
  }
  void packedFormatsUnpack() {
    QFETCH(QString, format);
    QFETCH(double, bound);
    const std::int64_t rows = 37, cols = 72;
    const std::vector<float> w = test::normal_values(rows * cols, 3);
    kernels::WeightMatrix source;
    source.dtype = kernels::DType::F32;
    source.data = w.data();
    source.rows = rows;
    source.cols = cols;
    const kernels::PackedMatrix packed = format == "int8"   ? kernels::pack_int8(source)
                                         : format == "int4" ? kernels::pack_int4(source, 32)
                                                            : kernels::pack_bf16(source);
    kernels::WeightMatrix m;
    m.dtype = kernels::DType::U8;  // as a converted folder's matrix: the packed bytes
    m.data = packed.bytes.data.get();
    m.rows = rows;
    m.cols = cols;
    m.packed = &packed;
    QCOMPARE(backend::device_row_type(m), DeviceRowType::Bf16);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(10 * cols));
    backend::device_rows(m, 20, 30, out.data());
    std::vector<float> unpacked(static_cast<std::size_t>(cols));
    for (std::int64_t r = 20; r < 30; ++r) {
      kernels::unpack_row(packed, r, unpacked.data());
      for (std::int64_t c = 0; c < cols; ++c)
        QCOMPARE(out[static_cast<std::size_t>((r - 20) * cols + c)],
                 kernels::f32_to_bf16(unpacked[static_cast<std::size_t>(c)]));
    }
    const double error = bf16_rows_error(out, w, 20, cols);
    QVERIFY2(error <= bound, qPrintable(QString::number(error)));
  }

  // DeepSeek-V3's fixture packed as INT8 for two pools: each expert is two slices of the
  // inner dimension. Joined, gate and up rows are whole rows and down rows whole columns, as
  // in the BF16 checkpoint they were packed from.
  void slicedExpertsAreJoined() {
    const auto native = model::LoadedModel::load(fixture("deepseek-v3"));
    model::LoadOptions load;
    load.cpu_format = model::CpuFormat::Int8;
    load.pools = 2;
    const auto sliced = model::LoadedModel::load(fixture("deepseek-v3"), load);
    const std::size_t layer = 2;  // the fixture's first layers are dense
    const model::FeedForwardWeights& a = native->weights().layers[layer].experts.experts[1];
    const model::FeedForwardWeights& b = sliced->weights().layers[layer].experts.experts[1];
    QVERIFY2(b.slices.size() == 2, "the fixture was expected to be split for two pools");
    const backend::ExpertShape sa = backend::expert_shape(a), sb = backend::expert_shape(b);
    QCOMPARE(sb.inner, sa.inner);
    QCOMPARE(sb.hidden, sa.hidden);
    QCOMPARE(backend::device_expert_bytes(b), backend::device_expert_bytes(a));
    for (ExpertPart part : {ExpertPart::Gate, ExpertPart::Up, ExpertPart::Down}) {
      const std::int64_t rows = backend::expert_part_rows(sa, part);
      const std::int64_t cols = backend::expert_part_cols(sa, part);
      std::vector<std::uint16_t> want(static_cast<std::size_t>(rows * cols)), got(want.size());
      backend::expert_rows_bf16(a, part, 0, rows, want.data());
      backend::expert_rows_bf16(b, part, 0, rows, got.data());
      std::vector<float> reference(want.size());
      for (std::size_t i = 0; i < want.size(); ++i) reference[i] = bf16_value(want[i]);
      const double error = bf16_rows_error(got, reference, 0, cols);
      QVERIFY2(error <= 1.0 / 127 + 1.0 / 128,
               qPrintable(QStringLiteral("part %1: %2").arg(int(part)).arg(error)));
      // A range of rows is those rows.
      std::vector<std::uint16_t> some(static_cast<std::size_t>(3 * cols));
      backend::expert_rows_bf16(b, part, rows - 3, rows, some.data());
      QVERIFY(std::equal(some.begin(), some.end(), got.end() - 3 * cols));
    }
  }
};

QTEST_GUILESS_MAIN(TestDeviceRows)
#include "tst_device_rows.moc"
