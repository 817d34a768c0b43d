// A GGUF model as it is stored: one file, or a split set (NAME-00001-of-00003.gguf, as
// llama.cpp's gguf-split writes and the Hub's large quantisations come), opened from any of
// its parts. The first part holds the model's metadata; every part holds some tensors, at
// offsets within its own data section. Every part must be present and agree with the others
// (split.no, split.count, split.tensors.count), and no tensor may appear twice.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/gguf/file.h"

namespace tandem::model {

// What a split part's file name says; nullopt for a name that is not one.
struct GgufSplitName {
  std::string prefix;  // the path up to "-00001-of-00003.gguf"
  int number = 0;      // 1-based, as in the name
  int count = 0;
  // The path of part `number` (1-based) of the set.
  std::string part_path(int number) const;
};
std::optional<GgufSplitName> parse_gguf_split_name(const std::string& path);

class GgufSet {
 public:
  struct Tensor {
    const GgufFile* file = nullptr;  // the part that holds it
    const GgufTensorInfo* info = nullptr;
  };

  // `path`: a single file or any part of a split set. Throws std::runtime_error with a
  // sentence naming the file and what to do (a missing part, parts of different sets, ...).
  explicit GgufSet(const std::string& path);

  // The first part: the model's metadata.
  const GgufFile& metadata_file() const { return *parts_.front(); }
  const GgufValue* find(const std::string& key) const { return metadata_file().find(key); }
  const std::string& path() const { return metadata_file().path(); }

  std::size_t part_count() const { return parts_.size(); }
  const GgufFile& part(std::size_t index) const { return *parts_[index]; }
  // Every tensor of the set by name.
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  std::span<const std::byte> tensor_data(const Tensor& tensor) const {
    return tensor.file->tensor_data(*tensor.info);
  }
  std::uint64_t file_bytes() const { return file_bytes_; }  // all parts together

 private:
  std::vector<std::unique_ptr<GgufFile>> parts_;
  std::map<std::string, Tensor> tensors_;
  std::uint64_t file_bytes_ = 0;
};

}  // namespace tandem::model
