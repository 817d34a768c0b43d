// The weights of a Hugging Face model folder: one model.safetensors, or shards listed in
// model.safetensors.index.json. Pickle checkpoints are refused.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/safetensors_file.h"
#include "kernels/cpu/dense_matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::model {

// A folder written by `tandem convert` stores a packed matrix NAME as the byte tensor
// NAME + kPackedTensorSuffix (and its scales as NAME + kPackedScaleSuffix), not as NAME.
inline constexpr std::string_view kPackedTensorSuffix = ".tandem.packed";
inline constexpr std::string_view kPackedScaleSuffix = ".tandem.scale";
// A folder converted for several NUMA pools stores a routed expert's matrix NAME as one
// packed slice per pool (see model/expert_slicing.h), each under its own name.
inline std::string pool_slice_name(std::string_view matrix, int pool) {
  return std::string(matrix) + ".pool" + std::to_string(pool);
}

struct TensorRef {
  const std::string* path = nullptr;  // the file it is stored in (a derived tensor: its source's)
  const TensorInfo* info = nullptr;
  const void* bytes = nullptr;  // in the file's mapping, or (owned) the checkpoint's memory
  bool owned = false;
  const void* data() const { return bytes; }
  const std::string& file_path() const { return *path; }
};

class GgufSet;

class Checkpoint {
 public:
  // Throws ModelError with a sentence for a folder without safetensors, a pickle
  // checkpoint, a broken index, a missing shard, or a malformed file.
  explicit Checkpoint(const std::string& folder);
  // A GGUF model (one file or a split set) with its tensors under the names bind_weights
  // reads, each in its stored format; a routed experts tensor becomes one matrix per expert.
  // Defined with the names in engine/model/gguf/model.cpp. Throws ModelError naming the
  // file and tensor for a tensor whose type Tandem does not compute with.
  Checkpoint(std::unique_ptr<GgufSet> set, const ModelSpec& spec);
  ~Checkpoint();

  // Adds the tensors of one more safetensors file: a folder converted from a GGUF model keeps
  // its packed matrices in safetensors files beside the GGUF file of everything else. Throws
  // ModelError for a malformed file or a tensor already present.
  void add_safetensors(const std::string& path);

  const std::string& folder() const { return folder_; }
  const TensorRef* find(const std::string& name) const;
  // The tensor, which must exist and have `shape`; otherwise a ModelError naming the file
  // and the tensor.
  TensorRef require(const std::string& name, const std::vector<std::int64_t>& shape) const;
  // A 2-D weight as a matrix, with its fp8 scales (`<name>` + Fp8Scales::suffix) when stored so.
  // A matrix stored only packed (a converted folder) comes back with `data` pointing at the
  // packed bytes (of pool 0's slice when sliced) and dtype U8: the loader must attach its
  // PackedMatrix or slices before any use.
  kernels::WeightMatrix matrix(const std::string& name, std::int64_t rows, std::int64_t cols) const;
  // A 1-D or small tensor converted to fp32 (norm weights, biases, scales).
  std::vector<float> vector_f32(const std::string& name,
                                const std::vector<std::int64_t>& shape) const;

  // How FP8 weights are scaled (from the config); DeepSeek-V3's 128x128 blocks by default.
  void set_fp8_scales(const Fp8Scales& scales) { fp8_ = scales; }
  const Fp8Scales& fp8_scales() const { return fp8_; }

  // Tensors made at load time from stored ones, found by name like stored ones: gpt-oss
  // keeps each layer's experts fused in one tensor (gate and up rows interleaved), which
  // binding splits into one matrix per expert under the names the other families use. The
  // new tensor holds `bytes` of its own (derive, to be filled by the caller), or views the
  // stored tensor `source` from `offset` (derive_view). Either way `source` is consumed: the
  // converter packs the derived tensors and leaves it out.
  void* derive(const std::string& name, kernels::DType dtype, std::vector<std::int64_t> shape,
               const std::string& source);
  void derive_view(const std::string& name, kernels::DType dtype, std::vector<std::int64_t> shape,
                   const std::string& source, std::uint64_t offset);
  const std::vector<std::string>& derived_names() const { return derived_names_; }
  bool consumed(const std::string& stored) const { return consumed_.count(stored) != 0; }

  std::size_t tensor_count() const { return index_.size(); }
  // Every tensor by the name bind_weights asks for, derived ones included.
  const std::unordered_map<std::string, TensorRef>& tensors() const { return index_; }
  // For a GGUF model: the stored tensor a tensor's bytes are in ("blk.3.ffn_up_exps.weight"
  // for every expert's "model.layers.3.mlp.experts.E.up_proj.weight"); empty otherwise.
  std::string gguf_tensor(const std::string& name) const;
  // The safetensors files (none for a GGUF model).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The GGUF model this checkpoint reads; nullptr for safetensors.
  const GgufSet* gguf() const { return gguf_.get(); }

 private:
  std::string folder_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufSet> gguf_;
  // A GGUF tensor's name in the file for a name bind_weights asks for ("blk.3.attn_q.weight"
  // for "model.layers.3.self_attn.q_proj.weight"), for messages.
  std::unordered_map<std::string, std::string> stored_names_;
  std::unordered_map<std::string, std::string> gguf_tensors_;  // see gguf_tensor()
  std::vector<std::unique_ptr<TensorInfo>> gguf_infos_;
  std::string describe(const std::string& name) const;
  std::unordered_map<std::string, TensorRef> index_;
  Fp8Scales fp8_;
  // fp32 copies of fp8 block scales, kept for the matrices that use them.
  mutable std::unordered_map<std::string, std::vector<float>> scales_;
  struct Derived {
    TensorInfo info;
    kernels::AlignedBytes storage;  // empty for a view
  };
  std::vector<std::unique_ptr<Derived>> derived_;
  std::vector<std::string> derived_names_;
  std::unordered_set<std::string> consumed_;
};

}  // namespace tandem::model
