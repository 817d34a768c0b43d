// GGUF split sets (NAME-00001-of-00003.gguf): opened from any part, the tensors of every
// part as one model with each tensor's bytes from its own part, and a sentence for every way
// a set can be incomplete or mixed (a missing part, a part of another download, a renamed
// part, a tensor twice, a tensor count that disagrees).
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>

#include "engine/model/gguf/set.h"
#include "engine/plan/gguf_shape.h"
#include "tests/support/gguf_bytes.h"

using namespace tandem::model;

namespace {

struct PartTensor {
  std::string name;
  std::uint64_t elements;
  char fill;
};

// One part: split keys (when count > 0), the model metadata in the first part, F32 tensors
// each filled with its own byte.
std::string part_bytes(int number, int count, std::int32_t total_tensors,
                       const std::vector<PartTensor>& tensors) {
  GgufBytes w;
  const bool first = number == 0;
  const std::uint64_t keys = (count > 0 ? 3 : 0) + (first ? 3 : 0);
  w.header(3, tensors.size(), keys);
  if (count > 0) {
    w.key("split.no", GgufType::kUint16).raw<std::uint16_t>(static_cast<std::uint16_t>(number));
    w.key("split.count", GgufType::kUint16).raw<std::uint16_t>(static_cast<std::uint16_t>(count));
    w.key("split.tensors.count", GgufType::kInt32).raw<std::int32_t>(total_tensors);
  }
  if (first) {
    w.key("general.architecture", GgufType::kString).string("qwen3moe");
    w.key("qwen3moe.block_count", GgufType::kUint32).raw<std::uint32_t>(1);
    w.key("qwen3moe.embedding_length", GgufType::kUint32).raw<std::uint32_t>(8);
  }
  std::uint64_t offset = 0;
  for (const PartTensor& t : tensors) {
    w.tensor(t.name, {8, t.elements / 8}, 0, offset);
    offset += t.elements * 4;
    offset += (32 - offset % 32) % 32;
  }
  w.pad_to(32);
  for (const PartTensor& t : tensors) {
    w.bytes.append(t.elements * 4, t.fill);
    w.pad_to(32);
  }
  return w.bytes;
}

const std::vector<std::vector<PartTensor>> kParts = {
    {{"token_embd.weight", 64, 'a'}, {"blk.0.attn_q.weight", 64, 'b'}},
    {{"blk.0.ffn_gate_exps.weight", 256, 'c'}},
    {{"blk.0.ffn_up_exps.weight", 256, 'd'}, {"output.weight", 64, 'e'}},
};

}  // namespace

class TestGgufSet : public QObject {
  Q_OBJECT

  std::string write(const QTemporaryDir& dir, const std::string& name, const std::string& bytes) {
    const std::string path = dir.filePath(QString::fromStdString(name)).toStdString();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  // The three parts of kParts as NAME-0000N-of-00003.gguf; returns the paths.
  std::vector<std::string> write_set(const QTemporaryDir& dir, const std::string& name = "m") {
    std::vector<std::string> paths;
    for (int i = 0; i < 3; ++i) {
      paths.push_back(write(dir, name + "-0000" + std::to_string(i + 1) + "-of-00003.gguf",
                            part_bytes(i, 3, 5, kParts[static_cast<std::size_t>(i)])));
    }
    return paths;
  }

  static QString error_of(const std::string& path) {
    try {
      GgufSet set(path);
    } catch (const std::runtime_error& e) {
      return QString::fromStdString(e.what());
    }
    return {};
  }

 private slots:
  void namesOfParts() {
    const auto n = parse_gguf_split_name("/models/Qwen3-Q4_K_M-00002-of-00004.gguf");
    QVERIFY(n.has_value());
    QCOMPARE(n->prefix, std::string("/models/Qwen3-Q4_K_M"));
    QCOMPARE(n->number, 2);
    QCOMPARE(n->count, 4);
    QCOMPARE(n->part_path(3), std::string("/models/Qwen3-Q4_K_M-00003-of-00004.gguf"));
    QVERIFY(!parse_gguf_split_name("/models/Qwen3-Q4_K_M.gguf").has_value());
    QVERIFY(!parse_gguf_split_name("m-0001-of-0003.gguf").has_value());  // five digits
    QVERIFY(!parse_gguf_split_name("m-00001-of-00003.gguf.part").has_value());
  }

  void openedFromAnyPart_data() {
    QTest::addColumn<int>("part");
    QTest::newRow("first") << 0;
    QTest::newRow("middle") << 1;
    QTest::newRow("last") << 2;
  }

  void openedFromAnyPart() {
    QFETCH(int, part);
    QTemporaryDir dir;
    const auto paths = write_set(dir);
    const GgufSet set(paths[static_cast<std::size_t>(part)]);
    QCOMPARE(set.part_count(), std::size_t(3));
    QCOMPARE(set.path(), paths[0]);  // the metadata's part
    QCOMPARE(set.find("general.architecture")->as_string(), std::string("qwen3moe"));
    QCOMPARE(set.tensors().size(), std::size_t(5));
    for (std::size_t p = 0; p < kParts.size(); ++p) {
      for (const PartTensor& t : kParts[p]) {
        const GgufSet::Tensor& found = set.tensors().at(t.name);
        QCOMPARE(found.file->path(), paths[p]);
        const auto bytes = set.tensor_data(found);
        QCOMPARE(bytes.size(), std::size_t(t.elements * 4));
        for (std::byte b : bytes) QCOMPARE(static_cast<char>(b), t.fill);
      }
    }
    std::uint64_t total = 0;
    for (const auto& p : paths) total += std::filesystem::file_size(p);
    QCOMPARE(set.file_bytes(), total);
  }

  // The planner counts every part's tensors: the same shape as one file holding them all.
  void plannerSizesTheWholeSet() {
    QTemporaryDir dir;
    const auto paths = write_set(dir);
    std::vector<PartTensor> all;
    for (const auto& p : kParts) all.insert(all.end(), p.begin(), p.end());
    const std::string single = write(dir, "single.gguf", part_bytes(0, 0, 0, all));
    const auto whole = tandem::plan::model_shape_from_gguf(GgufSet(single));
    const auto split = tandem::plan::model_shape_from_gguf(GgufSet(paths[1]));
    QCOMPARE(split.total_params(), whole.total_params());
    QCOMPARE(split.embedding_params, std::int64_t(64));
    QCOMPARE(split.output_params, std::int64_t(64));
    QCOMPARE(split.moe_layers, std::int64_t(1));
  }

  void oneFileWithoutSplitKeys() {
    QTemporaryDir dir;
    const GgufSet set(write(dir, "single.gguf", part_bytes(0, 0, 0, kParts[0])));
    QCOMPARE(set.part_count(), std::size_t(1));
    QCOMPARE(set.tensors().size(), std::size_t(2));
  }

  void missingPartsAreNamed() {
    QTemporaryDir dir;
    const auto paths = write_set(dir);
    std::filesystem::remove(paths[1]);
    const QString error = error_of(paths[2]);
    QVERIFY2(error.contains("set of 3 GGUF files, and 1 of them is missing") &&
                 error.contains(QString::fromStdString(paths[1])) &&
                 error.contains("download every part of the set"),
             qPrintable(error));
  }

  void partOfAnotherSetIsRefused() {
    QTemporaryDir dir;
    const auto paths = write_set(dir);
    // Part 2 replaced by a file whose metadata says it is part 3 of 4.
    write(dir, "m-00002-of-00003.gguf", part_bytes(2, 4, 5, kParts[1]));
    const QString error = error_of(paths[0]);
    QVERIFY2(error.contains("is named part 2 of 3, but its metadata says part 3 of 4"),
             qPrintable(error));
  }

  void renamedPartIsExplained() {
    QTemporaryDir dir;
    const std::string path = write(dir, "renamed.gguf", part_bytes(0, 3, 5, kParts[0]));
    const QString error = error_of(path);
    QVERIFY2(error.contains("is part 1 of a GGUF set of 3 files, but its name does not say so"),
             qPrintable(error));
  }

  void impossibleNameIsRefused() {
    QTemporaryDir dir;
    const std::string path = write(dir, "m-00004-of-00003.gguf", part_bytes(0, 3, 5, kParts[0]));
    QVERIFY(error_of(path).contains("the name says part 4 of 3"));
  }

  void tensorInTwoPartsIsRefused() {
    QTemporaryDir dir;
    const auto paths = write_set(dir);
    write(dir, "m-00003-of-00003.gguf",
          part_bytes(2, 3, 5, {{"blk.0.attn_q.weight", 64, 'x'}, {"output.weight", 64, 'e'}}));
    const QString error = error_of(paths[0]);
    QVERIFY2(error.contains("The tensor blk.0.attn_q.weight is in both m-00001-of-00003.gguf "
                            "and m-00003-of-00003.gguf"),
             qPrintable(error));
  }

  void tensorCountMustAgree() {
    QTemporaryDir dir;
    write_set(dir);
    const std::string first = write(dir, "m-00001-of-00003.gguf", part_bytes(0, 3, 6, kParts[0]));
    const QString error = error_of(first);
    QVERIFY2(error.contains("says the set holds 6 tensors, but its 3 parts hold 5"),
             qPrintable(error));
  }

  void splitKeysOfTheWrongTypeAreRefused() {
    QTemporaryDir dir;
    GgufBytes w;
    w.header(3, 0, 1);
    w.key("split.count", GgufType::kString).string("three");
    const QString error = error_of(write(dir, "odd.gguf", w.bytes));
    QVERIFY2(error.contains("split.count is a string, not a whole number"), qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestGgufSet)
#include "tst_gguf_set.moc"
