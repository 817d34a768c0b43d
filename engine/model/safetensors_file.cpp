#include "engine/model/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/model/model_error.h"

namespace tandem::model {
namespace {

// A header larger than this is not a real checkpoint (real ones are a few MB at most).
constexpr std::uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

}  // namespace

std::int64_t TensorInfo::elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  const auto* base = reinterpret_cast<const std::uint8_t*>(file_.bytes().data());
  const std::uint64_t size = file_.size_bytes();
  const std::string redownload = " The file is damaged or incomplete; download it again.";
  if (size < 8)
    throw ModelError(path + ": the file is too short to be a safetensors file (" +
                     std::to_string(size) + " bytes)." + redownload);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > size - 8) {
    throw ModelError(path + ": the header claims " + std::to_string(header_len) +
                     " bytes but the file has only " + std::to_string(size) +
                     "; the file is truncated or not a safetensors file." + redownload);
  }
  if (header_len > kMaxHeaderBytes) {
    throw ModelError(
        path + ": the header is " + std::to_string(header_len) +
        " bytes, far larger than any real checkpoint's; this is not a safetensors file.");
  }
  const char* text = reinterpret_cast<const char*>(base + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    throw ModelError(path + ": the header is not valid JSON (" + std::string(e.what()) + ")." +
                     redownload);
  }
  if (!header.is_object())
    throw ModelError(path + ": the header is not a JSON object." + redownload);

  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it.value().is_object()) {
        for (auto m = it.value().begin(); m != it.value().end(); ++m) {
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    const std::string where = path + ": tensor " + it.key();
    const nlohmann::json& entry = it.value();
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
        !entry["shape"].is_array() || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2) {
      throw ModelError(
          where + " has an incomplete description (dtype, shape and data_offsets are required)." +
          redownload);
    }
    TensorInfo t;
    t.name = it.key();
    const std::string dtype = entry["dtype"].get<std::string>();
    if (!kernels::parse_safetensors_dtype(dtype, t.dtype)) {
      throw ModelError(
          where + " has dtype " + dtype +
          ", which Tandem does not read (supported: F32, F16, BF16, F8_E4M3, I32, I64, U8, I8); "
          "convert the checkpoint to BF16.");
    }
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
        throw ModelError(where + " has an invalid shape." + redownload);
      t.shape.push_back(d.get<std::int64_t>());
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      throw ModelError(where + " has invalid data offsets." + redownload);
    }
    const std::uint64_t b = off[0].get<std::uint64_t>();
    const std::uint64_t e = off[1].get<std::uint64_t>();
    if (b > e || e > data_size) {
      throw ModelError(where + " lies at bytes " + std::to_string(b) + "–" + std::to_string(e) +
                       ", outside the " + std::to_string(data_size) +
                       " bytes of data in the file; the file is truncated or corrupt." +
                       redownload);
    }
    const std::uint64_t expected = kernels::dtype_bytes(t.dtype, t.elements());
    if (e - b != expected) {
      throw ModelError(where + " has " + std::to_string(e - b) + " bytes but shape " +
                       shape_string(t.shape) + " of " + dtype + " needs " +
                       std::to_string(expected) + "." + redownload);
    }
    t.begin = data_start + b;
    t.end = data_start + e;
    tensors_.emplace(t.name, std::move(t));
  }

  std::vector<const TensorInfo*> order;
  order.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i]->begin < order[i - 1]->end) {
      throw ModelError(path + ": tensors " + order[i - 1]->name + " and " + order[i]->name +
                       " overlap in the file; it is corrupt." + redownload);
    }
  }
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace tandem::model
