// GGUF (versions 2 and 3): the header, every metadata value and the tensor table of a
// memory-mapped file. Nothing beyond the tensor table is read; tensor data stays on disk
// until a caller touches the span that tensor_data() returns.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/model/mapped_file.h"

namespace tandem::model {

// Value type numbers as GGUF stores them.
enum class GgufType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* gguf_type_name(GgufType type);

class GgufValue;

struct GgufArray {
  GgufType element_type = GgufType::kUint8;
  std::vector<GgufValue> elements;
};

class GgufValue {
 public:
  using Storage = std::variant<std::uint64_t, std::int64_t, double, bool, std::string, GgufArray>;

  GgufValue() = default;
  GgufValue(GgufType type, Storage storage) : type_(type), storage_(std::move(storage)) {}

  GgufType type() const { return type_; }
  bool is_integer() const;
  bool is_float() const { return type_ == GgufType::kFloat32 || type_ == GgufType::kFloat64; }

  // The accessors throw std::runtime_error when the value has another type; callers that
  // know the key add it to the message. Integers convert between widths when the value
  // fits, so a uint32 count and an int64 count read the same.
  std::int64_t as_int() const;
  std::uint64_t as_uint() const;  // an integer >= 0, the whole uint64 range
  double as_float() const;        // also accepts integers
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;

 private:
  GgufType type_ = GgufType::kUint8;
  Storage storage_ = std::uint64_t{0};
};

struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // innermost first, as ggml orders them
  std::uint32_t ggml_type = 0;
  std::uint64_t offset_bytes = 0;  // from the start of the data section
  std::uint64_t size_bytes = 0;    // 0 when the ggml type is unknown to this build
  std::uint64_t element_count() const;
};

class GgufFile {
 public:
  // Throws std::runtime_error naming the file and what is wrong with it.
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment_bytes() const { return alignment_bytes_; }
  std::uint64_t data_offset_bytes() const { return data_offset_bytes_; }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // nullptr when the key is absent.
  const GgufValue* find(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The bytes of one tensor, inside the mapping; empty when the size is unknown.
  std::span<const std::byte> tensor_data(const GgufTensorInfo& tensor) const;

 private:
  MappedFile file_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_bytes_ = 32;
  std::uint64_t data_offset_bytes_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace tandem::model
