// A read-only memory map of a whole file. Pages are read on first touch, so a model many
// times larger than RAM can be opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::model {

class MappedFile {
 public:
  // Throws ModelError naming the file when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace tandem::model
