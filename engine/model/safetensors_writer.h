// Writes a .safetensors file tensor by tensor: the header is laid out first from the
// declared shapes, the data streamed after it. The file is written under a temporary name
// and renamed only when complete, so an interrupted write never looks finished.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"

namespace tandem::model {

class SafetensorsWriter {
 public:
  struct Declared {
    std::string name;
    kernels::DType dtype;
    std::vector<std::int64_t> shape;
  };

  // Declares every tensor up front (in file order), opens `path`.tmp and writes the header.
  // Throws ModelError with a sentence when the file cannot be written.
  SafetensorsWriter(const std::string& path, const std::vector<Declared>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // removes the temporary file unless finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends bytes of the current tensor; tensors are filled in declaration order.
  void write(const void* data, std::size_t bytes);
  // Checks every tensor got exactly its size, flushes, and renames into place.
  void finish();

 private:
  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;
  std::uint64_t expected_ = 0;
  std::uint64_t written_ = 0;
  bool finished_ = false;
};

}  // namespace tandem::model
