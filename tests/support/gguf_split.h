// Splits a GGUF file into a set of parts as llama.cpp's gguf-split writes one: the metadata
// in the first part, the split keys (split.no, split.count, split.tensors.count) in every
// part, the tensors shared out in order.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "engine/model/gguf/file.h"
#include "engine/model/gguf/writer.h"

namespace tandem::test {

// Writes PREFIX-0000N-of-0000M.gguf for N = 1..parts; returns their paths.
inline std::vector<std::string> split_gguf(const std::string& source, const std::string& prefix,
                                           int parts) {
  const model::GgufFile whole(source);
  const std::size_t count = whole.tensors().size();
  std::vector<std::string> paths;
  for (int part = 0; part < parts; ++part) {
    std::map<std::string, model::GgufValue> metadata;
    if (part == 0) metadata = whole.metadata();
    metadata["split.no"] = model::GgufValue(model::GgufType::kUint16, std::uint64_t(part));
    metadata["split.count"] = model::GgufValue(model::GgufType::kUint16, std::uint64_t(parts));
    metadata["split.tensors.count"] =
        model::GgufValue(model::GgufType::kInt32, std::int64_t(count));
    const std::size_t begin =
        count * static_cast<std::size_t>(part) / static_cast<std::size_t>(parts);
    const std::size_t end =
        count * static_cast<std::size_t>(part + 1) / static_cast<std::size_t>(parts);
    std::vector<model::GgufWriter::Declared> declared;
    for (std::size_t i = begin; i < end; ++i) {
      const model::GgufTensorInfo& t = whole.tensors()[i];
      declared.push_back({t.name, t.dims, t.ggml_type, t.size_bytes});
    }
    paths.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, part + 1, parts));
    model::GgufWriter writer(paths.back(), metadata, declared);
    for (std::size_t i = begin; i < end; ++i) {
      const auto data = whole.tensor_data(whole.tensors()[i]);
      writer.write(data.data(), data.size());
    }
    writer.finish();
  }
  return paths;
}

}  // namespace tandem::test
