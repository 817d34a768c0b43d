// One .safetensors file: an 8-byte little-endian header length, a JSON header describing
// each tensor (dtype, shape, byte range), then the tensor bytes. Memory-mapped; every
// range is validated before any tensor is handed out.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/mapped_file.h"
#include "kernels/cpu/dtype.h"

namespace tandem::model {

struct TensorInfo {
  std::string name;
  kernels::DType dtype = kernels::DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // absolute byte offsets in the file
  std::uint64_t end = 0;
  std::int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Throws ModelError for anything malformed: header length beyond the file, invalid JSON,
  // unsupported dtype, offsets out of range, overlapping tensors, size not matching shape.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  const void* data(const TensorInfo& t) const { return file_.bytes().data() + t.begin; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_string(const std::vector<std::int64_t>& shape);  // "[96, 64]"

}  // namespace tandem::model
