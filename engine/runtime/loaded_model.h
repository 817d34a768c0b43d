// A model folder opened for inference: its spec, its memory-mapped checkpoint and the
// weights bound to their roles.
#pragma once

#include <memory>
#include <string>

#include "engine/model/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/packed_matmul.h"

namespace tandem::runtime {

// How the CPU computes with the weights: as stored (the fp32 reference path), or packed at
// load time into INT8 (one scale per row) or BF16 for the fast kernels.
enum class CpuFormat { Native, Int8, Bf16 };
std::string_view cpu_format_name(CpuFormat f);
bool parse_cpu_format(std::string_view name, CpuFormat& out);

struct LoadOptions {
  CpuFormat cpu_format = CpuFormat::Native;
  int threads = 0;  // for packing; 0: all hardware threads
};

class LoadedModel {
 public:
  // Throws model::ModelError with a sentence naming the file for anything wrong.
  static std::unique_ptr<LoadedModel> load(const std::string& folder, const LoadOptions& options = {});

  const std::string& folder() const { return folder_; }
  const model::ModelSpec& spec() const { return spec_; }
  const model::Checkpoint& checkpoint() const { return *checkpoint_; }
  const model::ModelWeights& weights() const { return weights_; }
  CpuFormat cpu_format() const { return cpu_format_; }
  kernels::CpuVariant cpu_variant() const { return variant_; }
  // Bytes of weights one token reads (attention, the active experts, the output head).
  std::uint64_t active_weight_bytes_per_token() const;
  std::uint64_t packed_bytes() const;

 private:
  std::string folder_;
  model::ModelSpec spec_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  model::ModelWeights weights_;
  CpuFormat cpu_format_ = CpuFormat::Native;
  kernels::CpuVariant variant_ = kernels::CpuVariant::Scalar;
  std::vector<std::unique_ptr<kernels::PackedMatrix>> packed_;
};

}  // namespace tandem::runtime
