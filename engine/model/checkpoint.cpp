#include "engine/model/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/model/gguf/set.h"
#include "engine/model/model_error.h"

namespace tandem::model {
namespace fs = std::filesystem;

namespace {

bool is_pickle(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" || ext == ".pkl";
}

}  // namespace

Checkpoint::Checkpoint(const std::string& folder) : folder_(folder) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw ModelError(folder +
                     ": no such model folder; give the folder that holds config.json and the "
                     ".safetensors files.");
  }
  std::vector<fs::path> shards;
  const fs::path index_path = fs::path(folder) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      throw ModelError(index_path.string() + ": not valid JSON (" + e.what() +
                       "); download it again.");
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw ModelError(index_path.string() + ": has no weight_map; download it again.");
    }
    std::set<std::string> names;
    for (const auto& [tensor, file] : index["weight_map"].items()) {
      if (!file.is_string())
        throw ModelError(index_path.string() + ": the entry for " + tensor +
                         " is not a file name.");
      names.insert(file.get<std::string>());
    }
    for (const std::string& name : names) {
      const fs::path shard = fs::path(folder) / name;
      if (name.find('/') != std::string::npos || name.find("..") != std::string::npos) {
        throw ModelError(index_path.string() + ": names the shard " + name +
                         " outside the model folder; refusing it.");
      }
      if (!fs::exists(shard)) {
        throw ModelError(
            shard.string() +
            ": this shard is listed in model.safetensors.index.json but missing; "
            "the download is incomplete, so download the model again (finished files are kept).");
      }
      shards.push_back(shard);
    }
  } else {
    std::vector<fs::path> pickles;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (!entry.is_regular_file()) continue;
      if (entry.path().extension() == ".safetensors")
        shards.push_back(entry.path());
      else if (is_pickle(entry.path()))
        pickles.push_back(entry.path());
    }
    std::sort(shards.begin(), shards.end());
    if (shards.empty() && !pickles.empty()) {
      throw ModelError(
          pickles.front().string() +
          ": this is a PyTorch pickle checkpoint. Loading a pickle can run arbitrary code, so "
          "Tandem "
          "only reads .safetensors weights; download the safetensors version of this model (most "
          "repositories on Hugging Face have one).");
    }
    if (shards.empty()) {
      throw ModelError(
          folder +
          ": no .safetensors weights in this folder; download the model's safetensors files "
          "(or choose the folder that holds them).");
    }
  }

  for (const fs::path& shard : shards) add_safetensors(shard.string());
}

void Checkpoint::add_safetensors(const std::string& path) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  const SafetensorsFile* f = files_.back().get();
  for (const auto& [name, info] : f->tensors()) {
    const auto [it, inserted] = index_.emplace(name, TensorRef{&f->path(), &info, f->data(info)});
    if (!inserted) {
      throw ModelError(folder_ + ": tensor " + name + " appears in both " + it->second.file_path() +
                       " and " + f->path() + "; the folder mixes two checkpoints, keep only one.");
    }
  }
}

Checkpoint::~Checkpoint() = default;

std::string Checkpoint::describe(const std::string& name) const {
  const auto it = stored_names_.find(name);
  return it == stored_names_.end() ? name : it->second;
}

std::string Checkpoint::gguf_tensor(const std::string& name) const {
  const auto it = gguf_tensors_.find(name);
  return it == gguf_tensors_.end() ? std::string() : it->second;
}

const TensorRef* Checkpoint::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &it->second;
}

TensorRef Checkpoint::require(const std::string& name,
                              const std::vector<std::int64_t>& shape) const {
  const TensorRef* ref = find(name);
  if (ref == nullptr) {
    if (gguf_ != nullptr) {
      throw ModelError(folder_ + ": tensor " + describe(name) +
                       " is missing; the file is incomplete, or its metadata describes another "
                       "model than its tensors.");
    }
    throw ModelError(folder_ + ": tensor " + name +
                     " is missing from the checkpoint; the files are incomplete or "
                     "belong to a different model than config.json describes.");
  }
  if (ref->info->shape != shape) {
    if (gguf_ != nullptr) {
      throw ModelError(ref->file_path() + ": tensor " + describe(name) + " has shape " +
                       shape_string(ref->info->shape) + " but the file's metadata implies " +
                       shape_string(shape) + "; the file is damaged or was written wrongly.");
    }
    throw ModelError(ref->file_path() + ": tensor " + name + " has shape " +
                     shape_string(ref->info->shape) + " but config.json implies " +
                     shape_string(shape) + "; config.json and the weights do not belong together.");
  }
  return *ref;
}

kernels::WeightMatrix Checkpoint::matrix(const std::string& name, std::int64_t rows,
                                         std::int64_t cols) const {
  if (find(name) == nullptr) {
    const TensorRef* packed = find(name + std::string(kPackedTensorSuffix));
    if (packed == nullptr)
      packed = find(pool_slice_name(name, 0) + std::string(kPackedTensorSuffix));
    if (packed != nullptr) {
      kernels::WeightMatrix m;
      m.dtype = kernels::DType::U8;
      m.data = packed->data();
      m.rows = rows;
      m.cols = cols;
      return m;
    }
  }
  const TensorRef ref = require(name, {rows, cols});
  const kernels::DType t = ref.info->dtype;
  if (t == kernels::DType::F4E2M1) {
    // MXFP4 (derived from gpt-oss's blocks): one E8M0 exponent per row and 32 columns.
    const std::string scale_name = name + "_scales";
    const TensorRef scale = require(scale_name, {rows, (cols + 31) / 32});
    auto [it, inserted] = scales_.try_emplace(scale_name);
    if (inserted) {
      const auto* e = static_cast<const std::uint8_t*>(scale.data());
      it->second.resize(static_cast<std::size_t>(rows * ((cols + 31) / 32)));
      for (std::size_t i = 0; i < it->second.size(); ++i)
        it->second[i] = kernels::e8m0_to_f32(e[i]);
    }
    kernels::WeightMatrix m;
    m.dtype = t;
    m.data = ref.data();
    m.rows = rows;
    m.cols = cols;
    m.block_scale = it->second.data();
    m.block_rows = 1;
    m.block_cols = 32;
    return m;
  }
  if (t != kernels::DType::F32 && t != kernels::DType::F16 && t != kernels::DType::BF16 &&
      t != kernels::DType::F8E4M3 && !kernels::is_gguf_block(t)) {
    throw ModelError(
        ref.file_path() + ": tensor " + name + " is stored as " +
        std::string(kernels::dtype_name(t)) +
        ", which is not a weight type Tandem computes with (F32, F16, BF16, F8_E4M3).");
  }
  kernels::WeightMatrix m;
  m.dtype = t;
  m.data = ref.data();
  m.rows = rows;
  m.cols = cols;
  if (t == kernels::DType::F8E4M3) {
    const std::string scale_name = name + fp8_.suffix;
    const TensorRef* scale = find(scale_name);
    if (scale == nullptr) {
      throw ModelError(ref.file_path() + ": tensor " + name + " is FP8 but its scales (" +
                       scale_name +
                       ") are missing; the checkpoint is incomplete, or its config.json does not "
                       "describe how it was quantized.");
    }
    const auto& s = scale->info->shape;
    m.block_rows = fp8_.block_rows;
    m.block_cols = fp8_.block_cols > 0 ? fp8_.block_cols : cols;
    const std::vector<std::int64_t> expected = {(rows + m.block_rows - 1) / m.block_rows,
                                                (cols + m.block_cols - 1) / m.block_cols};
    if (s != expected) {
      throw ModelError(scale->file_path() + ": tensor " + scale_name + " has shape " +
                       shape_string(s) + ", but " + name + " " + shape_string({rows, cols}) +
                       " in blocks of " + std::to_string(m.block_rows) + "x" +
                       std::to_string(m.block_cols) + " needs " + shape_string(expected) + ".");
    }
    auto [it, inserted] = scales_.try_emplace(scale_name);
    if (inserted) it->second = vector_f32(scale_name, s);
    m.block_scale = it->second.data();
  }
  return m;
}

void* Checkpoint::derive(const std::string& name, kernels::DType dtype,
                         std::vector<std::int64_t> shape, const std::string& source) {
  const TensorRef* from = find(source);
  if (from == nullptr) throw ModelError(folder_ + ": tensor " + source + " is missing.");
  auto d = std::make_unique<Derived>();
  d->info.name = name;
  d->info.dtype = dtype;
  d->info.shape = std::move(shape);
  d->info.end = kernels::dtype_bytes(dtype, d->info.elements());
  d->storage = kernels::AlignedBytes::allocate(static_cast<std::size_t>(d->info.end));
  void* bytes = d->storage.data.get();
  consumed_.insert(source);
  const auto [it, inserted] = index_.emplace(name, TensorRef{from->path, &d->info, bytes, true});
  if (!inserted) throw ModelError(folder_ + ": tensor " + name + " is both stored and derived.");
  derived_names_.push_back(name);
  derived_.push_back(std::move(d));
  return bytes;
}

void Checkpoint::derive_view(const std::string& name, kernels::DType dtype,
                             std::vector<std::int64_t> shape, const std::string& source,
                             std::uint64_t offset) {
  const TensorRef* from = find(source);
  if (from == nullptr) throw ModelError(folder_ + ": tensor " + source + " is missing.");
  auto d = std::make_unique<Derived>();
  d->info.name = name;
  d->info.dtype = dtype;
  d->info.shape = std::move(shape);
  d->info.end = kernels::dtype_bytes(dtype, d->info.elements());
  if (offset + d->info.end > from->info->end - from->info->begin)
    throw ModelError(folder_ + ": tensor " + source + " is shorter than its shape says.");
  const void* bytes = static_cast<const char*>(from->data()) + offset;
  consumed_.insert(source);
  const auto [it, inserted] = index_.emplace(name, TensorRef{from->path, &d->info, bytes});
  if (!inserted) throw ModelError(folder_ + ": tensor " + name + " is both stored and derived.");
  derived_names_.push_back(name);
  derived_.push_back(std::move(d));
}

std::vector<float> Checkpoint::vector_f32(const std::string& name,
                                          const std::vector<std::int64_t>& shape) const {
  const TensorRef ref = require(name, shape);
  std::vector<float> out(static_cast<std::size_t>(ref.info->elements()));
  kernels::convert_to_f32(ref.info->dtype, ref.data(), out.data(), out.size());
  return out;
}

}  // namespace tandem::model
