// The GGUF reader: every value type, nested arrays, tensor infos and alignment from files
// built here byte by byte, and a clear error (never a crash) for each kind of broken file,
// including every possible truncation of a valid one.
#include <QTemporaryDir>
#include <QtTest>
#include <cstring>
#include <fstream>

#include "engine/model/gguf/file.h"
#include "engine/model/gguf/writer.h"
#include "engine/model/model_error.h"

#include "tests/support/gguf_bytes.h"

using namespace tandem::model;

namespace {

// A valid version-3 file with one value of every type, an array of arrays, two tensors
// and a 64-byte alignment.
std::string valid_file() {
  GgufBytes w;
  w.header(3, 2, 16);
  w.key("general.architecture", GgufType::kString).string("llama");
  w.key("general.alignment", GgufType::kUint32).raw<std::uint32_t>(64);
  w.key("u8", GgufType::kUint8).raw<std::uint8_t>(200);
  w.key("i8", GgufType::kInt8).raw<std::int8_t>(-100);
  w.key("u16", GgufType::kUint16).raw<std::uint16_t>(60000);
  w.key("i16", GgufType::kInt16).raw<std::int16_t>(-30000);
  w.key("u32", GgufType::kUint32).raw<std::uint32_t>(4000000000u);
  w.key("i32", GgufType::kInt32).raw<std::int32_t>(-2000000000);
  w.key("f32", GgufType::kFloat32).raw<float>(0.5f);
  w.key("bool", GgufType::kBool).raw<std::uint8_t>(1);
  w.key("u64", GgufType::kUint64).raw<std::uint64_t>(1ull << 40);
  w.key("i64", GgufType::kInt64).raw<std::int64_t>(-(1ll << 40));
  w.key("f64", GgufType::kFloat64).raw<double>(-2.25);
  w.key("strings", GgufType::kArray).raw(static_cast<std::uint32_t>(GgufType::kString));
  w.raw<std::uint64_t>(2).string("a b").string("");
  w.key("nested", GgufType::kArray).raw(static_cast<std::uint32_t>(GgufType::kArray));
  w.raw<std::uint64_t>(2);
  w.raw(static_cast<std::uint32_t>(GgufType::kInt32)).raw<std::uint64_t>(2);
  w.raw<std::int32_t>(7).raw<std::int32_t>(-7);
  w.raw(static_cast<std::uint32_t>(GgufType::kString)).raw<std::uint64_t>(1).string("deep");
  w.key("empty", GgufType::kArray).raw(static_cast<std::uint32_t>(GgufType::kFloat32));
  w.raw<std::uint64_t>(0);
  w.tensor("token_embd.weight", {64, 3}, 0, 0);          // F32: 768 bytes
  w.tensor("blk.0.ffn_down.weight", {256, 2}, 12, 768);  // Q4_K: 2 blocks of 144 bytes
  w.pad_to(64);
  w.bytes.append(768 + 288, '\x11');
  return w.bytes;
}

QString error_of(const std::string& path) {
  try {
    GgufFile file(path);
  } catch (const std::runtime_error& error) {
    return QString::fromStdString(error.what());
  }
  return QString();
}

// Whether two values have the same type and the same contents, arrays element by element.
bool same_value(const GgufValue& a, const GgufValue& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case GgufType::kString:
      return a.as_string() == b.as_string();
    case GgufType::kBool:
      return a.as_bool() == b.as_bool();
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return a.as_float() == b.as_float();
    case GgufType::kUint64:
      return a.as_uint() == b.as_uint();
    case GgufType::kArray: {
      const GgufArray& x = a.as_array();
      const GgufArray& y = b.as_array();
      if (x.element_type != y.element_type || x.elements.size() != y.elements.size()) return false;
      for (std::size_t i = 0; i < x.elements.size(); ++i) {
        if (!same_value(x.elements[i], y.elements[i])) return false;
      }
      return true;
    }
    default:
      return a.as_int() == b.as_int();
  }
}

}  // namespace

class TestGgufFile : public QObject {
  Q_OBJECT

  QTemporaryDir dir_;

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.filePath(QString::fromStdString(name)).toStdString();
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

 private slots:
  void readsEveryValueType() {
    const GgufFile file(write("valid.gguf", valid_file()));
    QCOMPARE(file.version(), 3u);
    QCOMPARE(file.alignment_bytes(), 64u);
    QCOMPARE(file.metadata().size(), std::size_t(16));
    QCOMPARE(file.find("general.architecture")->as_string(), std::string("llama"));
    QCOMPARE(file.find("u8")->as_int(), 200);
    QCOMPARE(file.find("i8")->as_int(), -100);
    QCOMPARE(file.find("u16")->as_int(), 60000);
    QCOMPARE(file.find("i16")->as_int(), -30000);
    QCOMPARE(file.find("u32")->as_int(), 4000000000ll);
    QCOMPARE(file.find("i32")->as_int(), -2000000000ll);
    QCOMPARE(file.find("f32")->as_float(), 0.5);
    QCOMPARE(file.find("bool")->as_bool(), true);
    QCOMPARE(file.find("u64")->as_int(), 1ll << 40);
    QCOMPARE(file.find("i64")->as_int(), -(1ll << 40));
    QCOMPARE(file.find("f64")->as_float(), -2.25);
    QCOMPARE(file.find("f64")->type(), GgufType::kFloat64);
    QVERIFY(file.find("missing") == nullptr);
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, file.find("u8")->as_string());

    const GgufArray& strings = file.find("strings")->as_array();
    QCOMPARE(strings.element_type, GgufType::kString);
    QCOMPARE(strings.elements.size(), std::size_t(2));
    QCOMPARE(strings.elements[0].as_string(), std::string("a b"));
    QCOMPARE(strings.elements[1].as_string(), std::string());

    const GgufArray& nested = file.find("nested")->as_array();
    QCOMPARE(nested.element_type, GgufType::kArray);
    QCOMPARE(nested.elements[0].as_array().elements[1].as_int(), -7);
    QCOMPARE(nested.elements[1].as_array().elements[0].as_string(), std::string("deep"));
    QCOMPARE(file.find("empty")->as_array().elements.size(), std::size_t(0));
  }

  void readsTensorInfosAndData() {
    const GgufFile file(write("valid.gguf", valid_file()));
    QCOMPARE(file.tensors().size(), std::size_t(2));
    const GgufTensorInfo& embedding = file.tensors()[0];
    QCOMPARE(embedding.name, std::string("token_embd.weight"));
    QCOMPARE(embedding.dims, (std::vector<std::uint64_t>{64, 3}));
    QCOMPARE(embedding.ggml_type, 0u);
    QCOMPARE(embedding.size_bytes, 768u);
    const GgufTensorInfo& down = file.tensors()[1];
    QCOMPARE(down.ggml_type, 12u);
    QCOMPARE(down.offset_bytes, 768u);
    QCOMPARE(down.size_bytes, 288u);
    QCOMPARE(down.element_count(), 512u);
    QCOMPARE(file.data_offset_bytes() % 64, 0u);
    const auto data = file.tensor_data(down);
    QCOMPARE(data.size(), std::size_t(288));
    QCOMPARE(static_cast<int>(data[0]), 0x11);
    QCOMPARE(static_cast<int>(data[287]), 0x11);
  }

  void readsVersion2() {
    GgufBytes w;
    w.header(2, 0, 1).key("general.name", GgufType::kString).string("tiny");
    const GgufFile file(write("v2.gguf", w.bytes));
    QCOMPARE(file.version(), 2u);
    QCOMPARE(file.alignment_bytes(), 32u);  // the default without general.alignment
    QCOMPARE(file.find("general.name")->as_string(), std::string("tiny"));
  }

  // Each broken file must fail with a sentence that names the file and the problem.
  void rejectsBrokenFiles_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("expected");
    auto add = [](const char* name, const std::string& bytes, const char* expected) {
      QTest::newRow(name) << QByteArray(bytes.data(), qsizetype(bytes.size())) << QString(expected);
    };
    add("empty file", "", "does not start with the bytes \"GGUF\"");
    add("bad magic", "GGML" + valid_file().substr(4), "does not start with the bytes \"GGUF\"");
    {
      GgufBytes w;
      w.header(1, 0, 0);
      add("version 1", w.bytes, "GGUF version 1 is not supported");
    }
    {
      GgufBytes w;
      w.header(4, 0, 0);
      add("version 4", w.bytes, "GGUF version 4 is not supported");
    }
    {
      GgufBytes w;
      w.header(0x03000000u, 0, 0);
      add("big-endian", w.bytes, "big-endian");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1ull << 40);
      add("huge metadata count", w.bytes, "the metadata count is 1099511627776");
    }
    {
      GgufBytes w;
      w.header(3, 1ull << 50, 0);
      add("huge tensor count", w.bytes, "the tensor count is");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).raw<std::uint64_t>(1ull << 62).bytes += "key and some more bytes";
      add("key longer than file", w.bytes, "claims 4611686018427387904 bytes");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).key("s", GgufType::kString).raw<std::uint64_t>(~0ull);
      add("string longer than file", w.bytes, "string s at byte");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1)
          .key("a", GgufType::kArray)
          .raw(static_cast<std::uint32_t>(GgufType::kUint64));
      w.raw<std::uint64_t>(1ull << 60);
      add("array longer than file", w.bytes, "the length of array a is 1152921504606846976");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).key("t", static_cast<GgufType>(13)).raw<std::uint32_t>(0);
      add("unknown value type", w.bytes, "has unknown type number 13");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).key("b", GgufType::kBool).raw<std::uint8_t>(2);
      add("bool that is not 0 or 1", w.bytes, "boolean b holds 2");
    }
    {
      GgufBytes w;
      w.header(3, 0, 2).key("k", GgufType::kUint8).raw<std::uint8_t>(1);
      w.key("k", GgufType::kUint8).raw<std::uint8_t>(2);
      add("duplicate key", w.bytes, "metadata key k appears twice");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).key("general.alignment", GgufType::kUint32).raw<std::uint32_t>(48);
      add("alignment not a power of two", w.bytes, "general.alignment is 48");
    }
    {
      GgufBytes w;
      w.header(3, 0, 1).key("deep", GgufType::kArray);
      for (int i = 0; i < 20; ++i) {
        w.raw(static_cast<std::uint32_t>(GgufType::kArray)).raw<std::uint64_t>(1);
      }
      w.raw(static_cast<std::uint32_t>(GgufType::kUint8)).raw<std::uint64_t>(0);
      add("arrays nested too deep", w.bytes, "nests deeper than 16 levels");
    }
    {
      GgufBytes w;
      w.header(3, 1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0);
      add("five dimensions", w.bytes, "tensor t has 5 dimensions");
    }
    {
      GgufBytes w;
      w.header(3, 1, 0).tensor("t", {4}, 0, 8);
      w.pad_to(32);
      w.bytes.append(64, '\0');
      add("misaligned tensor", w.bytes, "tensor t starts at offset 8");
    }
    {
      GgufBytes w;
      w.header(3, 1, 0).tensor("t", {100}, 8, 0);
      w.pad_to(32);
      w.bytes.append(200, '\0');
      add("partial quantization block", w.bytes, "not a whole number of Q8_0 blocks");
    }
    {
      GgufBytes w;
      w.header(3, 1, 0).tensor("t", {1024}, 0, 0);
      w.pad_to(32);
      w.bytes.append(100, '\0');
      add("tensor beyond the end", w.bytes, "tensor t (4096 bytes at data offset 0) reaches past");
    }
    {
      GgufBytes w;
      w.header(3, 1, 0).tensor("t", {1ull << 32, 1ull << 32}, 0, 0);
      add("element count overflow", w.bytes, "more elements than 64 bits can count");
    }
    {
      GgufBytes w;
      w.header(3, 2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32);
      w.pad_to(32);
      w.bytes.append(64, '\0');
      add("duplicate tensor", w.bytes, "tensor t appears twice");
    }
  }

  void rejectsBrokenFiles() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, expected);
    const std::string path = write("broken.gguf", bytes.toStdString());
    const QString error = error_of(path);
    QVERIFY2(error.contains(expected), qPrintable(error));
    QVERIFY2(error.startsWith(QString::fromStdString(path)), qPrintable(error));
  }

  // A file cut at any byte before its tensor data ends is reported, never read past.
  void rejectsEveryTruncation() {
    const std::string bytes = valid_file();
    for (std::size_t length = 0; length < bytes.size(); ++length) {
      const QString error = error_of(write("cut.gguf", bytes.substr(0, length)));
      QVERIFY2(!error.isEmpty(), qPrintable(QString("no error at length %1").arg(length)));
      QVERIFY2(error.contains("GGUF"), qPrintable(error));
    }
  }

  // The writer's file reads back with every value, tensor and byte of the one it copies, each
  // tensor at a multiple of its alignment; a value too large for int64 survives too.
  void writerRoundTrips() {
    const GgufFile source(write("source.gguf", valid_file()));
    std::map<std::string, GgufValue> metadata = source.metadata();
    metadata["huge"] = GgufValue(GgufType::kUint64, std::uint64_t{1} << 63);
    std::vector<GgufWriter::Declared> declared;
    for (const GgufTensorInfo& t : source.tensors())
      declared.push_back({t.name, t.dims, t.ggml_type, t.size_bytes});
    const std::string path = dir_.filePath("written.gguf").toStdString();
    {
      GgufWriter writer(path, metadata, declared);
      for (const GgufTensorInfo& t : source.tensors()) {
        const auto data = source.tensor_data(t);
        writer.write(data.data(), 100);  // in pieces
        writer.write(data.data() + 100, data.size() - 100);
      }
      QVERIFY(!QFileInfo::exists(QString::fromStdString(path)));  // only when finished
      writer.finish();
    }
    const GgufFile copy(path);
    QCOMPARE(copy.version(), 3u);
    QCOMPARE(copy.alignment_bytes(), GgufWriter::kAlignment);
    QCOMPARE(copy.metadata().size(), metadata.size());
    for (const auto& [key, value] : metadata) {
      QVERIFY2(copy.find(key) != nullptr, key.c_str());
      if (key == "general.alignment") continue;  // the writer's own
      QVERIFY2(same_value(*copy.find(key), value), key.c_str());
    }
    QCOMPARE(copy.tensors().size(), source.tensors().size());
    for (std::size_t i = 0; i < copy.tensors().size(); ++i) {
      const GgufTensorInfo& a = copy.tensors()[i];
      const GgufTensorInfo& b = source.tensors()[i];
      QCOMPARE(a.name, b.name);
      QVERIFY(a.dims == b.dims);
      QCOMPARE(a.ggml_type, b.ggml_type);
      QCOMPARE((copy.data_offset_bytes() + a.offset_bytes) % GgufWriter::kAlignment, 0u);
      const auto x = copy.tensor_data(a);
      const auto y = source.tensor_data(b);
      QVERIFY(x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin()));
    }
  }

  // A tensor declared with the wrong size, or a file finished before all its tensors are
  // written: a sentence, and nothing at the path.
  void writerRefusesWhatItCannotWrite() {
    const std::string path = dir_.filePath("refused.gguf").toStdString();
    QVERIFY_THROWS_EXCEPTION(ModelError,
                             GgufWriter(path, {}, {{"t", {64, 3}, 0, 767}}));  // F32: 768
    {
      GgufWriter writer(path, {}, {{"t", {64, 3}, 0, 768}});
      const std::string half(384, '\0');
      writer.write(half.data(), half.size());
      QVERIFY_THROWS_EXCEPTION(ModelError, writer.finish());
      QVERIFY_THROWS_EXCEPTION(ModelError, writer.write(std::string(1000, '\0').data(), 1000));
    }
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path)));
    QVERIFY(!QFileInfo::exists(QString::fromStdString(path + ".tmp")));
  }

  void rejectsMissingFile() {
    const QString error = error_of(dir_.filePath("absent.gguf").toStdString());
    QVERIFY2(error.contains("Could not open") && error.contains("absent.gguf"), qPrintable(error));
  }
};

QTEST_GUILESS_MAIN(TestGgufFile)
#include "tst_gguf_file.moc"
