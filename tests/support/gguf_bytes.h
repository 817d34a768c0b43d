// Builds GGUF files byte by byte for tests (the reader's and the planner's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/gguf/file.h"

namespace tandem::model {

// Writes GGUF bytes in the order the format lays them out.
class GgufBytes {
 public:
  template <typename T>
  GgufBytes& raw(T value) {
    const auto* p = reinterpret_cast<const char*>(&value);
    bytes.append(p, sizeof(T));
    return *this;
  }
  GgufBytes& string(const std::string& text) {
    raw<std::uint64_t>(text.size());
    bytes += text;
    return *this;
  }
  GgufBytes& header(std::uint32_t version, std::uint64_t tensors, std::uint64_t metadata) {
    bytes += "GGUF";
    return raw(version).raw(tensors).raw(metadata);
  }
  GgufBytes& key(const std::string& name, GgufType type) {
    return string(name).raw(static_cast<std::uint32_t>(type));
  }
  GgufBytes& tensor(const std::string& name, std::vector<std::uint64_t> dims, std::uint32_t type,
                    std::uint64_t offset) {
    string(name).raw<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) raw(d);
    return raw(type).raw(offset);
  }
  GgufBytes& pad_to(std::size_t alignment) {
    while (bytes.size() % alignment != 0) bytes += '\0';
    return *this;
  }

  std::string bytes;
};

}  // namespace tandem::model
