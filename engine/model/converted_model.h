// Reading the packed matrices of a converted folder back: each is copied from the mapped
// file into 64-byte aligned memory (the kernels' aligned loads need it; safetensors data
// offsets are not aligned) exactly as written, without re-packing.
#pragma once

#include <string>
#include <unordered_map>

#include "engine/model/checkpoint.h"
#include "engine/model/manifest.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::model {

class ConvertedWeights {
 public:
  // Throws model::ModelError when the manifest says the conversion did not finish.
  ConvertedWeights(const model::Checkpoint& checkpoint, Manifest manifest);

  const Manifest& manifest() const { return manifest_; }
  // The packed form of a matrix bound from this folder's checkpoint; a ModelError with a
  // sentence when it has none or its stored size does not match its shape.
  kernels::PackedMatrix load(const kernels::WeightMatrix& matrix) const;
  // Pool `pool`'s slice of a routed expert's matrix in a folder converted for several
  // pools, which must be rows x cols. Its bytes are copied to `destination` (64-byte
  // aligned, with room for them), which the result views.
  kernels::PackedMatrix load_slice(const kernels::WeightMatrix& matrix, int pool, std::int64_t rows,
                                   std::int64_t cols, std::uint8_t* destination) const;

 private:
  // The name a bound matrix was stored under, without the packed suffix; empty if none.
  std::string stored_name(const kernels::WeightMatrix& matrix) const;
  // Loads packed tensor `name`, which must be rows x cols, into `destination` when given,
  // otherwise into memory of its own.
  kernels::PackedMatrix load_named(const std::string& name, std::int64_t rows, std::int64_t cols,
                                   std::uint8_t* destination) const;

  const model::Checkpoint& checkpoint_;
  Manifest manifest_;
  std::unordered_map<const void*, std::string> name_of_data_;
};

}  // namespace tandem::model
