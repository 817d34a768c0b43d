#include "engine/model/converted_model.h"

#include <cstring>

#include "engine/model/model_error.h"

namespace tandem::model {

ConvertedWeights::ConvertedWeights(const model::Checkpoint& checkpoint, Manifest manifest)
    : checkpoint_(checkpoint), manifest_(std::move(manifest)) {
  if (!manifest_.complete) {
    throw model::ModelError(
        checkpoint.folder() +
        ": the conversion into this folder did not finish; run tandem convert again with the "
        "same options to resume it.");
  }
  // Bound matrices know only their data pointer; map it back to the tensor's name.
  for (const auto& [name, ref] : checkpoint.tensors()) name_of_data_.emplace(ref.data(), name);
}

std::string ConvertedWeights::stored_name(const kernels::WeightMatrix& matrix) const {
  const auto found = name_of_data_.find(matrix.data);
  std::string name = found == name_of_data_.end() ? std::string() : found->second;
  const std::string suffix(model::kPackedTensorSuffix);
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    name.resize(name.size() - suffix.size());
  }
  return name;
}

kernels::PackedMatrix ConvertedWeights::load(const kernels::WeightMatrix& matrix) const {
  const std::string name = stored_name(matrix);
  if (name.empty() || manifest_.tensors.count(name) == 0) {
    throw model::ModelError(checkpoint_.folder() + ": the manifest has no packed form of " +
                            (name.empty() ? std::string("a matrix") : name) +
                            "; the folder is damaged, convert the model again.");
  }
  return load_named(name, matrix.rows, matrix.cols, nullptr);
}

kernels::PackedMatrix ConvertedWeights::load_slice(const kernels::WeightMatrix& matrix, int pool,
                                                   std::int64_t rows, std::int64_t cols,
                                                   std::uint8_t* destination) const {
  // The bound matrix stands in with pool 0's slice; the others sit beside it.
  std::string name = stored_name(matrix);
  const std::string first = model::pool_slice_name("", 0);
  if (name.size() <= first.size() ||
      name.compare(name.size() - first.size(), first.size(), first) != 0) {
    throw model::ModelError(checkpoint_.folder() + ": the manifest has no pool slices of " +
                            (name.empty() ? std::string("a matrix") : name) +
                            "; the folder is damaged, convert the model again.");
  }
  name.resize(name.size() - first.size());
  const std::string slice = model::pool_slice_name(name, pool);
  if (manifest_.tensors.count(slice) == 0) {
    throw model::ModelError(checkpoint_.folder() + ": the manifest has no packed form of " + slice +
                            "; the folder is damaged, convert the model again.");
  }
  return load_named(slice, rows, cols, destination);
}

kernels::PackedMatrix ConvertedWeights::load_named(const std::string& name, std::int64_t rows,
                                                   std::int64_t cols,
                                                   std::uint8_t* destination) const {
  const std::string suffix(model::kPackedTensorSuffix);
  const PackedTensor& t = manifest_.tensors.at(name);
  kernels::PackedMatrix p = kernels::packed_shape(t.rows, t.cols, t.format, t.group);
  p.rotation = t.rotation;
  const model::TensorRef* bytes = checkpoint_.find(name + suffix);
  const std::uint64_t want = static_cast<std::uint64_t>(p.blocks) * p.block_bytes();
  if (t.rows != rows || t.cols != cols || t.cols_padded != p.cols_padded || bytes == nullptr ||
      bytes->info->end - bytes->info->begin != want) {
    throw model::ModelError(
        checkpoint_.folder() + ": the packed tensor " + name +
        " does not match the model's shapes; the folder is damaged or was converted from another "
        "model, convert it again.");
  }
  p.bytes = destination != nullptr ? kernels::AlignedBytes::view(destination, want)
                                   : kernels::AlignedBytes::allocate(want);
  std::memcpy(p.bytes.data.get(), bytes->data(), want);
  const std::size_t scales = kernels::packed_scale_count(p);
  if (scales > 0) {
    const model::TensorRef* s = checkpoint_.find(name + std::string(model::kPackedScaleSuffix));
    if (s == nullptr || s->info->dtype != kernels::DType::F32 ||
        s->info->end - s->info->begin != scales * sizeof(float)) {
      throw model::ModelError(
          checkpoint_.folder() + ": the scales of " + name +
          " are missing or the wrong size; the folder is damaged, convert the model again.");
    }
    p.group_scale.resize(scales);
    std::memcpy(p.group_scale.data(), s->data(), scales * sizeof(float));
  }
  return p;
}

}  // namespace tandem::model
