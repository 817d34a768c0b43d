// A GGUF repository's quantisations from its file list, as unsloth, bartowski and the model
// makers lay them out: single files named after their quantisation, split sets in folders,
// "UD-" dynamic quantisations, BF16 sets, and the files that are not models.
#include <QtTest>

#include "engine/hub/gguf_quantizations.h"

using namespace tandem;
using hub::RepoFile;

class TestGgufQuantizations : public QObject {
  Q_OBJECT

 private slots:
  void labels_data() {
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("label");
    QTest::newRow("single") << "Qwen3-30B-A3B-Q4_K_M.gguf"
                            << "Q4_K_M";
    QTest::newRow("dynamic") << "Qwen3-30B-A3B-UD-Q4_K_XL.gguf"
                             << "UD-Q4_K_XL";
    QTest::newRow("i-quant") << "Qwen3-30B-A3B-IQ2_XXS.gguf"
                             << "IQ2_XXS";
    QTest::newRow("q8_0") << "DeepSeek-V3-0324-Q8_0.gguf"
                          << "Q8_0";
    QTest::newRow("dot separated") << "SmolLM2-135M-Instruct.Q4_1.gguf"
                                   << "Q4_1";
    QTest::newRow("lower case") << "model-q5_k_s.gguf"
                                << "q5_k_s";
    QTest::newRow("split in a folder")
        << "UD-Q2_K_XL/DeepSeek-R1-0528-UD-Q2_K_XL-00001-of-00006.gguf"
        << "UD-Q2_K_XL";
    QTest::newRow("split named by its folder only") << "Q4_K_M/model-00002-of-00003.gguf"
                                                    << "Q4_K_M";
    QTest::newRow("bf16 set") << "BF16/Kimi-K2-Instruct-BF16-00001-of-00045.gguf"
                              << "BF16";
    QTest::newRow("mxfp4") << "gpt-oss-20b-MXFP4.gguf"
                           << "MXFP4";
    QTest::newRow("no label") << "weights/model.gguf"
                              << "model";
  }
  void labels() {
    QFETCH(QString, path);
    QFETCH(QString, label);
    QCOMPARE(QString::fromStdString(hub::gguf_quantization_label(path.toStdString())), label);
  }

  void groupedSmallestFirst() {
    const std::vector<RepoFile> files = {
        {"README.md", 9000},
        {".gitattributes", 2000},
        {"Qwen3-30B-A3B-Q8_0.gguf", 32'500'000'000ull},
        {"Qwen3-30B-A3B-Q4_K_M.gguf", 18'600'000'000ull},
        {"Qwen3-30B-A3B-UD-Q4_K_XL.gguf", 17'700'000'000ull},
        {"mmproj-F16.gguf", 800'000'000ull},
        {"imatrix_unsloth.gguf", 4'000'000ull},
        // A split set, listed out of order.
        {"BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf", 11'000'000'000ull},
        {"BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf", 50'000'000'000ull},
    };
    const auto qs = hub::gguf_quantizations(files);
    QCOMPARE(qs.size(), std::size_t{4});  // not the projector, not the importance matrix
    QCOMPARE(qs[0].name, std::string("UD-Q4_K_XL"));
    QCOMPARE(qs[1].name, std::string("Q4_K_M"));
    QCOMPARE(qs[2].name, std::string("Q8_0"));
    QCOMPARE(qs[3].name, std::string("BF16"));
    QCOMPARE(qs[3].bytes, 61'000'000'000ull);
    QCOMPARE(qs[3].files,
             (std::vector<std::string>{"BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf",
                                       "BF16/Qwen3-30B-A3B-BF16-00002-of-00002.gguf"}));
    QCOMPARE(qs[3].first_file(), std::string("BF16/Qwen3-30B-A3B-BF16-00001-of-00002.gguf"));
    QCOMPARE(qs[1].files, std::vector<std::string>{"Qwen3-30B-A3B-Q4_K_M.gguf"});
  }

  void noGgufNoQuantizations() {
    QVERIFY(hub::gguf_quantizations({{"config.json", 900}, {"model.safetensors", 100}}).empty());
  }
};

QTEST_GUILESS_MAIN(TestGgufQuantizations)
#include "tst_gguf_quantizations.moc"
