#include "engine/model/gguf/writer.h"

#include <cerrno>
#include <cstring>

#include "engine/model/file_writing.h"
#include "engine/model/ggml_type.h"
#include "engine/model/model_error.h"

namespace tandem::model {
namespace {

// GGUF's little-endian encoding of metadata values, appended to `out`.
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}

  template <typename T>
  void raw(T value) {
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void string(const std::string& text) {
    raw<std::uint64_t>(text.size());
    out_ += text;
  }
  void value(const GgufValue& v) {
    switch (v.type()) {
      case GgufType::kUint8:
        return raw(static_cast<std::uint8_t>(v.as_int()));
      case GgufType::kInt8:
        return raw(static_cast<std::int8_t>(v.as_int()));
      case GgufType::kUint16:
        return raw(static_cast<std::uint16_t>(v.as_int()));
      case GgufType::kInt16:
        return raw(static_cast<std::int16_t>(v.as_int()));
      case GgufType::kUint32:
        return raw(static_cast<std::uint32_t>(v.as_int()));
      case GgufType::kInt32:
        return raw(static_cast<std::int32_t>(v.as_int()));
      case GgufType::kUint64:
        return raw(v.as_uint());
      case GgufType::kInt64:
        return raw(v.as_int());
      case GgufType::kFloat32:
        return raw(static_cast<float>(v.as_float()));
      case GgufType::kFloat64:
        return raw(v.as_float());
      case GgufType::kBool:
        return raw(static_cast<std::uint8_t>(v.as_bool() ? 1 : 0));
      case GgufType::kString:
        return string(v.as_string());
      case GgufType::kArray: {
        const GgufArray& a = v.as_array();
        raw(static_cast<std::uint32_t>(a.element_type));
        raw<std::uint64_t>(a.elements.size());
        for (const GgufValue& e : a.elements) value(e);
        return;
      }
    }
  }

 private:
  std::string& out_;
};

std::uint64_t aligned(std::uint64_t n) {
  return (n + GgufWriter::kAlignment - 1) / GgufWriter::kAlignment * GgufWriter::kAlignment;
}

}  // namespace

GgufWriter::GgufWriter(const std::string& path, const std::map<std::string, GgufValue>& metadata,
                       const std::vector<Declared>& tensors)
    : path_(path), temp_(path + ".tmp") {
  std::string head;
  Encoder e(head);
  head += "GGUF";
  e.raw<std::uint32_t>(3);
  e.raw<std::uint64_t>(tensors.size());
  std::map<std::string, GgufValue> values = metadata;
  values.erase("general.alignment");
  e.raw<std::uint64_t>(values.size() + 1);
  e.string("general.alignment");
  e.raw(static_cast<std::uint32_t>(GgufType::kUint32));
  e.raw(static_cast<std::uint32_t>(kAlignment));
  for (const auto& [key, value] : values) {
    e.string(key);
    e.raw(static_cast<std::uint32_t>(value.type()));
    e.value(value);
  }
  std::uint64_t offset = 0;
  for (const Declared& t : tensors) {
    std::uint64_t elements = 1;
    for (std::uint64_t d : t.dims) elements *= d;
    const auto layout = ggml_type_layout(t.ggml_type);
    if (!layout || elements % layout->elements_per_block != 0 ||
        elements / layout->elements_per_block * layout->bytes_per_block != t.bytes) {
      throw ModelError(path_ + ": tensor " + t.name + " is declared with " +
                       std::to_string(t.bytes) + " bytes, which its type and shape do not make.");
    }
    e.string(t.name);
    e.raw(static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) e.raw(d);
    e.raw(t.ggml_type);
    e.raw(offset);
    offset = aligned(offset + t.bytes);
    sizes_.push_back(t.bytes);
  }
  file_ = std::fopen(temp_.c_str(), "wb");
  if (file_ == nullptr) {
    throw ModelError(temp_ + ": cannot create the file (" + std::strerror(errno) +
                     "); check the folder is writable.");
  }
  put(head.data(), head.size());
  pad_to_alignment();
}

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(temp_.c_str());
}

void GgufWriter::put(const void* data, std::size_t bytes) {
  if (std::fwrite(data, 1, bytes, file_) != bytes) throw_write_failed(temp_, errno);
  position_ += bytes;
}

void GgufWriter::pad_to_alignment() {
  static constexpr char kZeros[kAlignment] = {};
  put(kZeros, static_cast<std::size_t>(aligned(position_) - position_));
}

void GgufWriter::write(const void* data, std::size_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    if (current_ == sizes_.size())
      throw ModelError(temp_ + ": more data than the declared tensors hold.");
    const std::size_t n = static_cast<std::size_t>(
        std::min<std::uint64_t>(bytes, sizes_[current_] - written_in_current_));
    put(at, n);
    at += n;
    bytes -= n;
    written_in_current_ += n;
    if (written_in_current_ == sizes_[current_]) {
      pad_to_alignment();
      ++current_;
      written_in_current_ = 0;
    }
  }
}

void GgufWriter::finish() {
  // A tensor of no bytes is complete without a write.
  while (current_ < sizes_.size() && sizes_[current_] == 0) ++current_;
  if (current_ != sizes_.size()) {
    throw ModelError(temp_ + ": " + std::to_string(current_) + " of " +
                     std::to_string(sizes_.size()) +
                     " tensors were written; the file is incomplete.");
  }
  put_in_place(file_, temp_, path_);
  finished_ = true;
}

}  // namespace tandem::model
