#include "engine/model/gguf/file.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "engine/model/ggml_type.h"

namespace tandem::model {

namespace {

constexpr std::uint32_t kMaxDims = 4;  // ggml tensors have at most four dimensions
// Arrays of arrays are legal but no real file nests deeply; the bound keeps a hostile
// file from exhausting the stack.
constexpr int kMaxArrayDepth = 16;

const char kRedownload[] = "The file is damaged or incomplete; download or convert it again.";

// Reads little-endian values from the mapping and turns every out-of-bounds read into
// an error that names the file, the part being read and the byte offset.
class GgufReader {
 public:
  GgufReader(std::span<const std::byte> bytes, const std::string& path)
      : bytes_(bytes), path_(path) {}

  std::uint64_t position() const { return position_; }
  std::uint64_t remaining() const { return bytes_.size() - position_; }

  [[noreturn]] void fail(const std::string& what, const char* advice = kRedownload) const {
    throw std::runtime_error(path_ + " is not a usable GGUF file: " + what + ". " + advice);
  }

  template <typename T>
  T read(const char* what) {
    if (remaining() < sizeof(T)) {
      fail("it ends inside " + std::string(what) + " at byte " + std::to_string(position_) +
           " (file size " + std::to_string(bytes_.size()) + " bytes)");
    }
    T value;
    std::memcpy(&value, bytes_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }

  std::string read_string(const std::string& what) {
    const std::uint64_t length = read<std::uint64_t>(what.c_str());
    if (length > remaining()) {
      fail(what + " at byte " + std::to_string(position_ - 8) + " claims " +
           std::to_string(length) + " bytes but only " + std::to_string(remaining()) +
           " remain in the file");
    }
    std::string text(reinterpret_cast<const char*>(bytes_.data() + position_), length);
    position_ += length;
    return text;
  }

  // Rejects a count of items that cannot fit in the rest of the file before anything is
  // allocated for them.
  void check_count(std::uint64_t count, std::uint64_t min_item_bytes, const std::string& what) {
    if (min_item_bytes > 0 && count > remaining() / min_item_bytes) {
      fail(what + " is " + std::to_string(count) + ", more than the " +
           std::to_string(remaining()) + " bytes left in the file can hold");
    }
  }

  GgufValue read_value(GgufType type, const std::string& key, int depth) {
    switch (type) {
      case GgufType::kUint8:
        return {type, std::uint64_t{read<std::uint8_t>(key.c_str())}};
      case GgufType::kInt8:
        return {type, std::int64_t{read<std::int8_t>(key.c_str())}};
      case GgufType::kUint16:
        return {type, std::uint64_t{read<std::uint16_t>(key.c_str())}};
      case GgufType::kInt16:
        return {type, std::int64_t{read<std::int16_t>(key.c_str())}};
      case GgufType::kUint32:
        return {type, std::uint64_t{read<std::uint32_t>(key.c_str())}};
      case GgufType::kInt32:
        return {type, std::int64_t{read<std::int32_t>(key.c_str())}};
      case GgufType::kUint64:
        return {type, read<std::uint64_t>(key.c_str())};
      case GgufType::kInt64:
        return {type, read<std::int64_t>(key.c_str())};
      case GgufType::kFloat32:
        return {type, double{read<float>(key.c_str())}};
      case GgufType::kFloat64:
        return {type, read<double>(key.c_str())};
      case GgufType::kBool: {
        const std::uint8_t byte = read<std::uint8_t>(key.c_str());
        if (byte > 1) fail("boolean " + key + " holds " + std::to_string(byte) + ", not 0 or 1");
        return {type, byte == 1};
      }
      case GgufType::kString:
        return {type, read_string("string " + key)};
      case GgufType::kArray: {
        if (depth >= kMaxArrayDepth) {
          fail("array " + key + " nests deeper than " + std::to_string(kMaxArrayDepth) + " levels");
        }
        GgufArray array;
        array.element_type = read_type(key);
        const std::uint64_t count = read<std::uint64_t>(("length of array " + key).c_str());
        check_count(count, min_value_bytes(array.element_type), "the length of array " + key);
        array.elements.reserve(count);
        for (std::uint64_t i = 0; i < count; ++i) {
          array.elements.push_back(read_value(array.element_type, key, depth + 1));
        }
        return {type, std::move(array)};
      }
    }
    fail("value " + key + " has unknown type " + std::to_string(static_cast<std::uint32_t>(type)));
  }

  GgufType read_type(const std::string& key) {
    const std::uint64_t at = position_;
    const std::uint32_t raw = read<std::uint32_t>(("type of " + key).c_str());
    if (raw > static_cast<std::uint32_t>(GgufType::kFloat64)) {
      fail("value " + key + " at byte " + std::to_string(at) + " has unknown type number " +
           std::to_string(raw));
    }
    return static_cast<GgufType>(raw);
  }

  static std::uint64_t min_value_bytes(GgufType type) {
    switch (type) {
      case GgufType::kUint8:
      case GgufType::kInt8:
      case GgufType::kBool:
        return 1;
      case GgufType::kUint16:
      case GgufType::kInt16:
        return 2;
      case GgufType::kUint32:
      case GgufType::kInt32:
      case GgufType::kFloat32:
        return 4;
      case GgufType::kUint64:
      case GgufType::kInt64:
      case GgufType::kFloat64:
      case GgufType::kString:
        return 8;
      case GgufType::kArray:
        return 12;
    }
    return 1;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& path_;
  std::uint64_t position_ = 0;
};

std::string describe(GgufType type) {
  return gguf_type_name(type);
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<std::uint64_t>(storage_) ||
         std::holds_alternative<std::int64_t>(storage_);
}

std::int64_t GgufValue::as_int() const {
  if (const auto* u = std::get_if<std::uint64_t>(&storage_)) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw std::runtime_error("GGUF value " + std::to_string(*u) + " is too large");
    }
    return static_cast<std::int64_t>(*u);
  }
  if (const auto* i = std::get_if<std::int64_t>(&storage_)) return *i;
  throw std::runtime_error("GGUF value has type " + describe(type_) + ", not an integer");
}

std::uint64_t GgufValue::as_uint() const {
  if (const auto* u = std::get_if<std::uint64_t>(&storage_)) return *u;
  const std::int64_t i = as_int();
  if (i < 0) throw std::runtime_error("GGUF value " + std::to_string(i) + " is negative");
  return static_cast<std::uint64_t>(i);
}

double GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&storage_)) return *d;
  if (is_integer()) return static_cast<double>(as_int());
  throw std::runtime_error("GGUF value has type " + describe(type_) + ", not a number");
}

bool GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&storage_)) return *b;
  throw std::runtime_error("GGUF value has type " + describe(type_) + ", not bool");
}

const std::string& GgufValue::as_string() const {
  if (const auto* s = std::get_if<std::string>(&storage_)) return *s;
  throw std::runtime_error("GGUF value has type " + describe(type_) + ", not string");
}

const GgufArray& GgufValue::as_array() const {
  if (const auto* a = std::get_if<GgufArray>(&storage_)) return *a;
  throw std::runtime_error("GGUF value has type " + describe(type_) + ", not array");
}

std::uint64_t GgufTensorInfo::element_count() const {
  std::uint64_t count = 1;
  for (std::uint64_t d : dims) count *= d;
  return count;
}

GgufFile::GgufFile(const std::string& path) : file_(path) {
  GgufReader reader(file_.bytes(), file_.path());
  if (file_.size_bytes() < 4 || std::memcmp(file_.bytes().data(), "GGUF", 4) != 0) {
    reader.fail("it does not start with the bytes \"GGUF\"",
                "Give the path of a .gguf model file (a safetensors model is a folder).");
  }
  reader.read<std::uint32_t>("the magic");
  version_ = reader.read<std::uint32_t>("the version");
  if (version_ != 2 && version_ != 3) {
    const char* advice =
        version_ == 1 ? "Version 1 files predate August 2023; convert the model again with a "
                        "current llama.cpp."
        : (version_ >> 24) != 0
            ? "The number looks byte-swapped: the file is big-endian, which Tandem does not "
              "read; use the little-endian file."
            : "Tandem reads versions 2 and 3; check for a newer Tandem.";
    reader.fail("GGUF version " + std::to_string(version_) + " is not supported", advice);
  }
  const std::uint64_t tensor_count = reader.read<std::uint64_t>("the tensor count");
  const std::uint64_t metadata_count = reader.read<std::uint64_t>("the metadata count");
  // A metadata entry takes at least a key length, a type and one byte; a tensor entry at
  // least a name length, a dimension count, a type and an offset.
  reader.check_count(metadata_count, 13, "the metadata count");
  reader.check_count(tensor_count, 24, "the tensor count");

  for (std::uint64_t i = 0; i < metadata_count; ++i) {
    std::string key = reader.read_string("key of metadata entry " + std::to_string(i));
    const GgufType type = reader.read_type(key);
    GgufValue value = reader.read_value(type, key, 0);
    if (metadata_.count(key) != 0) reader.fail("metadata key " + key + " appears twice");
    metadata_.emplace(std::move(key), std::move(value));
  }

  if (const GgufValue* alignment = find("general.alignment")) {
    if (!alignment->is_integer()) {
      reader.fail("general.alignment has type " + describe(alignment->type()) + ", not an integer");
    }
    const std::int64_t value = alignment->as_int();
    if (value <= 0 || (value & (value - 1)) != 0) {
      reader.fail("general.alignment is " + std::to_string(value) + ", not a power of two");
    }
    alignment_bytes_ = static_cast<std::uint64_t>(value);
  }

  std::unordered_set<std::string> names;
  tensors_.reserve(tensor_count);
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo tensor;
    tensor.name = reader.read_string("name of tensor " + std::to_string(i));
    if (!names.insert(tensor.name).second) reader.fail("tensor " + tensor.name + " appears twice");
    const std::uint32_t dim_count = reader.read<std::uint32_t>("a tensor dimension count");
    if (dim_count == 0 || dim_count > kMaxDims) {
      reader.fail("tensor " + tensor.name + " has " + std::to_string(dim_count) +
                  " dimensions; ggml allows 1 to 4");
    }
    std::uint64_t elements = 1;
    for (std::uint32_t d = 0; d < dim_count; ++d) {
      const std::uint64_t dim = reader.read<std::uint64_t>("a tensor dimension");
      if (dim != 0 && elements > std::numeric_limits<std::uint64_t>::max() / dim) {
        reader.fail("tensor " + tensor.name + " has more elements than 64 bits can count");
      }
      elements *= dim;
      tensor.dims.push_back(dim);
    }
    tensor.ggml_type = reader.read<std::uint32_t>("a tensor type");
    tensor.offset_bytes = reader.read<std::uint64_t>("a tensor offset");
    if (tensor.offset_bytes % alignment_bytes_ != 0) {
      reader.fail("tensor " + tensor.name + " starts at offset " +
                  std::to_string(tensor.offset_bytes) + ", not a multiple of the alignment " +
                  std::to_string(alignment_bytes_));
    }
    if (const auto layout = ggml_type_layout(tensor.ggml_type)) {
      if (elements % layout->elements_per_block != 0) {
        reader.fail("tensor " + tensor.name + " has " + std::to_string(elements) +
                    " elements, not a whole number of " + std::string(layout->name) + " blocks");
      }
      tensor.size_bytes = elements / layout->elements_per_block * layout->bytes_per_block;
    }
    tensors_.push_back(std::move(tensor));
  }

  const std::uint64_t end_of_tables = reader.position();
  data_offset_bytes_ = (end_of_tables + alignment_bytes_ - 1) / alignment_bytes_ * alignment_bytes_;
  const std::uint64_t file_size = file_.size_bytes();
  if (!tensors_.empty() && data_offset_bytes_ > file_size) {
    reader.fail("the tensor data should start at byte " + std::to_string(data_offset_bytes_) +
                " but the file has only " + std::to_string(file_size) + " bytes");
  }
  for (const GgufTensorInfo& tensor : tensors_) {
    const std::uint64_t room = file_size - std::min(file_size, data_offset_bytes_);
    if (tensor.offset_bytes > room || tensor.size_bytes > room - tensor.offset_bytes) {
      reader.fail("tensor " + tensor.name + " (" + std::to_string(tensor.size_bytes) +
                  " bytes at data offset " + std::to_string(tensor.offset_bytes) +
                  ") reaches past the end of the file");
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

std::span<const std::byte> GgufFile::tensor_data(const GgufTensorInfo& tensor) const {
  return file_.bytes().subspan(data_offset_bytes_ + tensor.offset_bytes, tensor.size_bytes);
}

}  // namespace tandem::model
