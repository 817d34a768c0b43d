// The compute-peak probe: which instruction carries each packed kernel's products, how many
// multiply-adds one instruction does, and that the probe runs every instruction this CPU
// has (and refuses the others with a sentence). Its rates are reported by `tandem bench
// --kernels`, never asserted here.
#include <QtTest>

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/compute_peak.h"
#include "kernels/cpu/memory_bandwidth.h"

using namespace tandem::kernels;

namespace {

constexpr ProductInstruction kAll[] = {
    ProductInstruction::Fma256,          ProductInstruction::Fma512,
    ProductInstruction::Int8Dot256,      ProductInstruction::Int8Dot512,
    ProductInstruction::Bf16Dot512,      ProductInstruction::Int8Tile,
    ProductInstruction::Bf16Tile,        ProductInstruction::Int8Maddubs256,
    ProductInstruction::NibbleMaddubs256};

IsaFeatures avx512_features(bool bf16) {
  IsaFeatures f;
  f.avx = f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.avx512_vnni = f.bmi2 = true;
  f.avx512_bf16 = bf16;
  return f;
}

}  // namespace

class TestComputePeak : public QObject {
  Q_OBJECT
 private slots:
  // Register width over lane width, times the products a lane sums.
  void multiplyAddsPerInstruction() {
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Fma256), 256 / 32);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Fma512), 512 / 32);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Int8Dot256), 256 / 32 * 4);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Int8Dot512), 512 / 32 * 4);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Bf16Dot512), 512 / 32 * 2);
    // A tile product: 16 rows by 16 columns, each a sum over a 64-byte row of pairs or quads.
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Int8Tile), 16 * 16 * 64);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Bf16Tile), 16 * 16 * 32);
    // AVX2's sequences: one VPMADDUBSW of 32 byte pairs (INT8), or two (INT4 and MXFP4).
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::Int8Maddubs256), 256 / 8);
    QCOMPARE(multiply_adds_per_instruction(ProductInstruction::NibbleMaddubs256), 2 * 256 / 8);
  }

  void packedKernelsInstructions() {
    const IsaFeatures zen4 = avx512_features(true);
    const IsaFeatures skylake = avx512_features(false);
    IsaFeatures sapphire_rapids = avx512_features(true);
    sapphire_rapids.amx_tile = sapphire_rapids.amx_int8 = sapphire_rapids.amx_bf16 = true;
    // AMX: BF16 in tiles from kAmxMinTokens, INT8 and INT4 widened into them from
    // amx_widen_tokens, everything else through the AVX-512 kernels.
    QCOMPARE(packed_product_instruction(PackedFormat::Bf16, CpuVariant::Amx, sapphire_rapids,
                                        kAmxMinTokens),
             std::optional(ProductInstruction::Bf16Tile));
    QCOMPARE(packed_product_instruction(PackedFormat::Bf16, CpuVariant::Amx, sapphire_rapids,
                                        kAmxMinTokens - 1),
             std::optional(ProductInstruction::Bf16Dot512));
    for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Int4}) {
      QCOMPARE(packed_product_instruction(f, CpuVariant::Amx, sapphire_rapids, amx_widen_tokens(f)),
               std::optional(ProductInstruction::Bf16Tile));
      QCOMPARE(
          packed_product_instruction(f, CpuVariant::Amx, sapphire_rapids, amx_widen_tokens(f) - 1),
          std::optional(ProductInstruction::Int8Dot512));
    }
    QCOMPARE(packed_product_instruction(PackedFormat::Mxfp4, CpuVariant::Amx, sapphire_rapids, 512),
             std::optional(ProductInstruction::Int8Dot512));
    for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Int4, PackedFormat::Mxfp4}) {
      QCOMPARE(packed_product_instruction(f, CpuVariant::Avx512, zen4, 512),
               std::optional(ProductInstruction::Int8Dot512));
      QCOMPARE(packed_product_instruction(f, CpuVariant::Amx, zen4, 512), std::nullopt);
      QCOMPARE(packed_product_instruction(f, CpuVariant::Scalar, zen4, 512), std::nullopt);
      // AVX2 without AVX-VNNI (AVX-512 VNNI is not AVX-VNNI): VPMADDUBSW's sequences.
      QCOMPARE(packed_product_instruction(f, CpuVariant::Avx2, zen4, 512),
               std::optional(f == PackedFormat::Int8 ? ProductInstruction::Int8Maddubs256
                                                     : ProductInstruction::NibbleMaddubs256));
    }
    QCOMPARE(packed_product_instruction(PackedFormat::Bf16, CpuVariant::Avx512, zen4, 512),
             std::optional(ProductInstruction::Bf16Dot512));
    QCOMPARE(packed_product_instruction(PackedFormat::Bf16, CpuVariant::Avx512, skylake, 512),
             std::optional(ProductInstruction::Fma256));
    QCOMPARE(packed_product_instruction(PackedFormat::Bf16, CpuVariant::Avx2, zen4, 512),
             std::optional(ProductInstruction::Fma256));
    IsaFeatures alder_lake;
    alder_lake.avx = alder_lake.avx2 = alder_lake.fma = alder_lake.avx_vnni = true;
    for (PackedFormat f : {PackedFormat::Int8, PackedFormat::Int4, PackedFormat::Mxfp4}) {
      QCOMPARE(packed_product_instruction(f, CpuVariant::Avx2, alder_lake, 512),
               std::optional(ProductInstruction::Int8Dot256));
    }
    QCOMPARE(widest_fma(zen4), std::optional(ProductInstruction::Fma512));
    QCOMPARE(widest_fma(alder_lake), std::optional(ProductInstruction::Fma256));
    QCOMPARE(widest_fma(IsaFeatures{}), std::nullopt);
    // Attention: VDPBF16PS only for its kernels over a BF16 cache; FMAs otherwise.
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx512Bf16, CacheElements::Bf16, zen4),
             std::optional(ProductInstruction::Bf16Dot512));
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx512Bf16, CacheElements::F32, zen4),
             std::optional(ProductInstruction::Fma512));
    QCOMPARE(
        attention_product_instruction(AttentionVariant::Portable, CacheElements::Bf16, alder_lake),
        std::optional(ProductInstruction::Fma256));
    // Avx2 over a BF16 or 8-bit cache: ymm FMAs, also on a CPU with AVX-512 (--cpu-variant
    // avx2); the fp32 cache has no variants, and its clones use the widest FMA.
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx2, CacheElements::Bf16, zen4),
             std::optional(ProductInstruction::Fma256));
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx2, CacheElements::Int8, zen4),
             std::optional(ProductInstruction::Fma256));
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx2, CacheElements::F32, zen4),
             std::optional(ProductInstruction::Fma512));
    QCOMPARE(
        attention_product_instruction(AttentionVariant::Avx2, CacheElements::Bf16, IsaFeatures{}),
        std::nullopt);
    // AmxBf16 over a BF16 cache: a prompt's products in tiles.
    QCOMPARE(attention_product_instruction(AttentionVariant::AmxBf16, CacheElements::Bf16,
                                           sapphire_rapids),
             std::optional(ProductInstruction::Bf16Tile));
    QCOMPARE(attention_product_instruction(AttentionVariant::AmxBf16, CacheElements::Bf16, zen4),
             std::nullopt);
    QCOMPARE(attention_product_instruction(AttentionVariant::AmxBf16, CacheElements::F32,
                                           sapphire_rapids),
             std::optional(ProductInstruction::Fma512));
    // An 8-bit cache: VPDPBUSD zmm past Portable (AMX's prompts too), FMAs in Portable.
    QCOMPARE(attention_product_instruction(AttentionVariant::Avx512Bf16, CacheElements::Int8, zen4),
             std::optional(ProductInstruction::Int8Dot512));
    QCOMPARE(attention_product_instruction(AttentionVariant::AmxBf16, CacheElements::Int8,
                                           sapphire_rapids),
             std::optional(ProductInstruction::Int8Dot512));
    QCOMPARE(attention_product_instruction(AttentionVariant::Portable, CacheElements::Int8, zen4),
             std::optional(ProductInstruction::Fma512));
  }

  void usableFollowsFeatures() {
    const IsaFeatures zen4 = avx512_features(true);
    for (ProductInstruction i : kAll) {
      QCOMPARE(product_instruction_usable(i, zen4), i != ProductInstruction::Int8Dot256 &&
                                                        i != ProductInstruction::Int8Tile &&
                                                        i != ProductInstruction::Bf16Tile);
      QVERIFY(!product_instruction_usable(i, IsaFeatures{}));
    }
    IsaFeatures haswell;
    haswell.avx = haswell.avx2 = haswell.fma = true;
    for (ProductInstruction i : kAll) {
      QCOMPARE(product_instruction_usable(i, haswell),
               i == ProductInstruction::Fma256 || i == ProductInstruction::Int8Maddubs256 ||
                   i == ProductInstruction::NibbleMaddubs256);
    }
  }

  // Every instruction the CPU has runs and gives a rate; the others are refused.
  void measuresWhatTheCpuHas() {
    const IsaFeatures& usable = detect_isa().usable;
    for (ProductInstruction i : kAll) {
      const QByteArray name(product_instruction_name(i).data(),
                            static_cast<int>(product_instruction_name(i).size()));
      if (!product_instruction_usable(i, usable)) {
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument,
                                 measure_peak_multiply_adds(i, serial_for, 2, 1));
        continue;
      }
      const double rate = measure_peak_multiply_adds(i, serial_for, 2, 1);
      QVERIFY2(std::isfinite(rate) && rate > 0, name.constData());
    }
  }

  // The read-rate probe keeps its buffer and, at each measurement, hands every chunk of it
  // (512 KiB, the last one short) to the threads once a repeat, and gives a rate each time.
  void readRateProbeReadsItsWholeBufferEachTime() {
    constexpr std::int64_t kChunkBytes = std::int64_t{1} << 19;
    const ReadBandwidthProbe probe(2 * kChunkBytes + 64);
    std::vector<std::int64_t> seen;
    const ParallelFor counting = [&](std::int64_t n,
                                     const std::function<void(std::int64_t, std::int64_t)>& body) {
      for (std::int64_t i = 0; i < n; ++i) {
        seen.push_back(i);
        body(i, i + 1);
      }
    };
    for (int measure = 0; measure < 2; ++measure) {
      seen.clear();
      const double rate = probe.measure(counting, 3);
      QVERIFY(std::isfinite(rate) && rate > 0);
      QCOMPARE(seen, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2}));
    }
  }
};

QTEST_APPLESS_MAIN(TestComputePeak)
#include "tst_compute_peak.moc"
