// Reading the packed matrices of a converted folder back: each is copied from the mapped
// file into 64-byte aligned memory (the kernels' aligned loads need it; safetensors data
// offsets are not aligned) exactly as written, without re-packing.
#pragma once

#include <string>
#include <unordered_map>

#include "engine/convert/manifest.h"
#include "engine/model/checkpoint.h"
#include "kernels/cpu/packed_matmul.h"

namespace tandem::convert {

class ConvertedWeights {
 public:
  // Throws model::ModelError when the manifest says the conversion did not finish.
  ConvertedWeights(const model::Checkpoint& checkpoint, Manifest manifest);

  const Manifest& manifest() const { return manifest_; }
  // The packed form of a matrix bound from this folder's checkpoint; a ModelError with a
  // sentence when it has none or its stored size does not match its shape.
  kernels::PackedMatrix load(const kernels::WeightMatrix& matrix) const;

 private:
  const model::Checkpoint& checkpoint_;
  Manifest manifest_;
  std::unordered_map<const void*, std::string> name_of_data_;
};

}  // namespace tandem::convert
