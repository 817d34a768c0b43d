// Writes a GGUF file (version 3) tensor by tensor: the metadata and the tensor table are laid
// out first from the declared tensors, their data streamed after it, each tensor at the next
// multiple of the alignment. The file is written under a temporary name and renamed only
// when complete, so an interrupted write never looks finished.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/model/gguf/file.h"

namespace tandem::model {

class GgufWriter {
 public:
  struct Declared {
    std::string name;
    std::vector<std::uint64_t> dims;  // innermost first, as ggml orders them
    std::uint32_t ggml_type = 0;
    std::uint64_t bytes = 0;  // must be what the type and dims make
  };

  // Declares every tensor up front (in file order), opens `path`.tmp and writes the metadata
  // (any general.alignment in it is replaced by the writer's own) and the tensor table.
  // Throws ModelError with a sentence when the file cannot be written, or when a declared
  // tensor's size is not what its type and dims make.
  GgufWriter(const std::string& path, const std::map<std::string, GgufValue>& metadata,
             const std::vector<Declared>& tensors);
  ~GgufWriter();  // removes the temporary file unless finish() succeeded
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Appends bytes of the current tensor; tensors are filled in declaration order, each with
  // exactly its size (in as many pieces as the caller likes).
  void write(const void* data, std::size_t bytes);
  // Checks every tensor got exactly its size, flushes, and renames into place.
  void finish();

  static constexpr std::uint64_t kAlignment = 32;

 private:
  void put(const void* data, std::size_t bytes);
  void pad_to_alignment();

  std::string path_;
  std::string temp_;
  std::FILE* file_ = nullptr;
  std::vector<std::uint64_t> sizes_;
  std::size_t current_ = 0;  // the tensor being written
  std::uint64_t written_in_current_ = 0;
  std::uint64_t position_ = 0;  // bytes written to the file
  bool finished_ = false;
};

}  // namespace tandem::model
