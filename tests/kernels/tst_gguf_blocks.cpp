// The scalar reference of GGUF's block formats against gguf-py's dequantisation of the same
// random blocks (tests/data/gguf-blocks, from tests/tools/make_gguf_block_fixture.py), for
// every format it knows; a type it does not know is refused, not guessed.
#include <QDir>
#include <QtTest>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kernels/cpu/gguf/blocks.h"

using namespace tandem::kernels;

class TestGgufBlocks : public QObject {
  Q_OBJECT
 private slots:
  void matchesGgufPy_data() {
    QTest::addColumn<QString>("file");
    const QDir dir(QStringLiteral(TANDEM_TEST_DATA_DIR "/gguf-blocks"));
    const QStringList files = dir.entryList({QStringLiteral("*.bin")});
    QCOMPARE(files.size(), 21);
    for (const QString& f : files) QTest::newRow(qPrintable(f)) << dir.filePath(f);
  }

  void matchesGgufPy() {
    QFETCH(QString, file);
    std::ifstream in(file.toStdString(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    QVERIFY(bytes.size() > 12);
    std::uint32_t type = 0, blocks = 0, per_block = 0;
    std::memcpy(&type, bytes.data(), 4);
    std::memcpy(&blocks, bytes.data() + 4, 4);
    std::memcpy(&per_block, bytes.data() + 8, 4);
    QVERIFY(gguf_block_type_known(type));
    const std::size_t weights = std::size_t(blocks) * per_block;
    QVERIFY(bytes.size() > 12 + weights * 4);
    const char* data = bytes.data() + 12;
    std::vector<float> want(weights), got(weights, std::nanf(""));
    std::memcpy(want.data(), bytes.data() + bytes.size() - weights * 4, weights * 4);
    QVERIFY(dequantize_gguf_row(type, data, static_cast<std::int64_t>(weights), got.data()));
    for (std::size_t i = 0; i < weights; ++i) {
      // Rounding order may differ by an ulp (a fused multiply-add here).
      const float tolerance = 1e-6f * std::max(1.0f, std::abs(want[i]));
      QVERIFY2(
          std::abs(got[i] - want[i]) <= tolerance,
          qPrintable(QStringLiteral("weight %1: %2, gguf-py %3").arg(i).arg(got[i]).arg(want[i])));
    }
  }

  void unknownTypesAreRefused() {
    float out[256] = {};
    const std::uint8_t block[256] = {};
    for (std::uint32_t type : {9u, 15u, 34u, 35u, 39u, 99u}) {  // Q8_1, Q8_K, TQ1_0, TQ2_0 ...
      QVERIFY(!gguf_block_type_known(type));
      QVERIFY(!dequantize_gguf_row(type, block, 256, out));
    }
    QCOMPARE(out[0], 0.0f);  // nothing written
  }
};

QTEST_GUILESS_MAIN(TestGgufBlocks)
#include "tst_gguf_blocks.moc"
