// Where widened products start: the rule that reads a crossover from measurements, the
// process-wide counts the kernels take it from, and the measurement itself (on AMX; its
// times are reported by `tandem bench`, never asserted here).
#include <QtTest>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/widen_crossover.h"

using namespace tandem::kernels;

Q_DECLARE_METATYPE(std::vector<CrossoverPoint>)
Q_DECLARE_METATYPE(std::optional<std::int64_t>)

namespace {

// Small weights of a given shape, the values spread so that no group is all zero.
PackedMatrix weights(std::int64_t rows, std::int64_t cols, PackedFormat format,
                     std::vector<float>& values) {
  values.resize(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(static_cast<int>(i * 37 % 101) - 50) / 128.0f;
  WeightMatrix m;
  m.dtype = DType::F32;
  m.data = values.data();
  m.rows = rows;
  m.cols = cols;
  switch (format) {
    case PackedFormat::Int8:
      return pack_int8(m);
    case PackedFormat::Int4:
      return pack_int4(m, kDefaultInt4Group);
    default:
      return pack_bf16(m);
  }
}

// Restores the default counts when a test ends.
struct DefaultCounts {
  ~DefaultCounts() {
    set_amx_widen_tokens(PackedFormat::Int8, kAmxWidenInt8Tokens);
    set_amx_widen_tokens(PackedFormat::Int4, kAmxWidenInt4Tokens);
  }
};

}  // namespace

class TestWidenCrossover : public QObject {
  Q_OBJECT
 private slots:
  void tilesFrom_data() {
    QTest::addColumn<std::vector<CrossoverPoint>>("points");
    QTest::addColumn<std::optional<std::int64_t>>("from");
    QTest::newRow("win everywhere")
        << std::vector<CrossoverPoint>{{8, true}, {32, true}, {64, true}}
        << std::optional<std::int64_t>(8);
    QTest::newRow("win from 32") << std::vector<CrossoverPoint>{{8, false}, {32, true}, {64, true}}
                                 << std::optional<std::int64_t>(32);
    QTest::newRow("only the most")
        << std::vector<CrossoverPoint>{{8, false}, {32, false}, {64, true}}
        << std::optional<std::int64_t>(64);
    QTest::newRow("lose at the most")
        << std::vector<CrossoverPoint>{{8, true}, {32, true}, {64, false}}
        << std::optional<std::int64_t>();
    // A loss below a win ends the run down from the most: 8 wins again, but 16 lost.
    QTest::newRow("a dip") << std::vector<CrossoverPoint>{{8, true},
                                                          {16, false},
                                                          {32, true},
                                                          {64, true}}
                           << std::optional<std::int64_t>(32);
    QTest::newRow("any order") << std::vector<CrossoverPoint>{{64, true}, {8, false}, {32, true}}
                               << std::optional<std::int64_t>(32);
    QTest::newRow("nothing") << std::vector<CrossoverPoint>{} << std::optional<std::int64_t>();
  }

  void tilesFrom() {
    QFETCH(std::vector<CrossoverPoint>, points);
    QFETCH(std::optional<std::int64_t>, from);
    QCOMPARE(tiles_from(points), from);
  }

  // Widening wins where it took at most kWidenWinShare of the time; never (0) where it did
  // not win at the most tokens.
  void widenFromSamples() {
    const std::vector<WidenSample> wins{{16, 2.0, 1.0}, {32, 1.0, 1.5}, {64, 1.0, 2.0}};
    QCOMPARE(widen_from(wins), std::int64_t{32});
    const std::vector<WidenSample> ties{{16, 1.0, 1.0}, {32, 1.0, 1.0}};
    QCOMPARE(widen_from(ties), std::int64_t{0});
    // 0.95 of the time is within the noise; 0.9 is a win.
    const std::vector<WidenSample> close{{32, 0.95, 1.0}, {48, 0.9, 1.0}, {64, 0.5, 1.0}};
    QCOMPARE(widen_from(close), std::int64_t{48});
    const std::vector<WidenSample> loses{{16, 1.0, 2.0}, {64, 3.0, 2.0}};
    QCOMPARE(widen_from(loses), std::int64_t{0});
  }

  // The counts the kernels decide by: INT8 and INT4 apart, 0 for never, nothing else set.
  void countsSetAndRead() {
    DefaultCounts restore;
    QCOMPARE(amx_widen_tokens(PackedFormat::Int8), kAmxWidenInt8Tokens);
    QCOMPARE(amx_widen_tokens(PackedFormat::Int4), kAmxWidenInt4Tokens);
    set_amx_widen_tokens(PackedFormat::Int8, 32);
    QCOMPARE(amx_widen_tokens(PackedFormat::Int8), std::int64_t{32});
    QCOMPARE(amx_widen_tokens(PackedFormat::Int4), kAmxWidenInt4Tokens);
    QVERIFY(widened_product(PackedFormat::Int8, 32, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Int8, 31, CpuVariant::Amx));
    QVERIFY(!widened_product(PackedFormat::Int8, 32, CpuVariant::Avx512));
    set_amx_widen_tokens(PackedFormat::Int4, 0);
    QVERIFY(!widened_product(PackedFormat::Int4, 4096, CpuVariant::Amx));
    QCOMPARE(amx_widen_tokens(PackedFormat::Bf16), std::int64_t{0});
    QCOMPARE(amx_widen_tokens(PackedFormat::Mxfp4), std::int64_t{0});
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, set_amx_widen_tokens(PackedFormat::Bf16, 16));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, set_amx_widen_tokens(PackedFormat::Int8, -1));
    // The activations a product is packed with follow the count.
    std::vector<float> values;
    const PackedMatrix w = weights(32, 64, PackedFormat::Int8, values);
    std::vector<float> x(static_cast<std::size_t>(40 * 64), 0.5f);
    PackedActivations a;
    pack_activations_for(w, x.data(), 40, a, CpuVariant::Amx);
    QCOMPARE(a.format, PackedFormat::Bf16);
    set_amx_widen_tokens(PackedFormat::Int8, 41);
    pack_activations_for(w, x.data(), 40, a, CpuVariant::Amx);
    QCOMPARE(a.format, PackedFormat::Int8);
  }

  // Chains that cannot be timed are refused before anything runs, on every CPU.
  void measureRefuses() {
    std::vector<float> v1, v2, v3;
    const PackedMatrix int8 = weights(32, 64, PackedFormat::Int8, v1);
    const PackedMatrix bf16 = weights(32, 64, PackedFormat::Bf16, v2);
    const PackedMatrix wider = weights(32, 128, PackedFormat::Int8, v3);
    const std::int64_t tokens[] = {16};
    const std::vector<ProductChain> bf16_chain{{&bf16}};
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                             measure_widening(bf16_chain, tokens, serial_for));
    const std::vector<ProductChain> unlike{{&int8}, {&wider}};
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, measure_widening(unlike, tokens, serial_for));
    const std::vector<ProductChain> none;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, measure_widening(none, tokens, serial_for));
  }

  // On AMX: a sample per count, in order, each with two times; elsewhere a sentence.
  void measureOnAmx() {
    std::vector<float> v[4];
    const PackedMatrix gate = weights(48, 256, PackedFormat::Int4, v[0]);
    const PackedMatrix down = weights(256, 48, PackedFormat::Int8, v[1]);
    const PackedMatrix gate2 = weights(48, 256, PackedFormat::Int4, v[2]);
    const PackedMatrix down2 = weights(256, 48, PackedFormat::Int8, v[3]);
    const std::vector<ProductChain> chains{{&gate, &down}, {&gate2, &down2}};
    const std::int64_t tokens[] = {8, 40, 64};
    if (!variant_supported(CpuVariant::Amx, detect_isa().usable)) {
      QVERIFY_THROWS_EXCEPTION(std::invalid_argument, measure_widening(chains, tokens, serial_for));
      QSKIP(
          "this CPU lacks AMX (AMX-TILE, AMX-INT8, AMX-BF16, granted by the kernel), whose "
          "tiles take widened products; the timing runs on every CPU that has it");
    }
    const std::vector<WidenSample> samples = measure_widening(chains, tokens, serial_for, 2);
    QCOMPARE(samples.size(), std::size_t{3});
    for (std::size_t i = 0; i < samples.size(); ++i) {
      QCOMPARE(samples[i].tokens, tokens[i]);
      QVERIFY(std::isfinite(samples[i].widened_seconds) && samples[i].widened_seconds > 0);
      QVERIFY(std::isfinite(samples[i].quantised_seconds) && samples[i].quantised_seconds > 0);
    }
  }
};

QTEST_APPLESS_MAIN(TestWidenCrossover)
#include "tst_widen_crossover.moc"
