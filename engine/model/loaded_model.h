// A model folder opened for inference: its spec, its memory-mapped checkpoint and the
// weights bound to their roles.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/hw/binding.h"
#include "engine/model/checkpoint.h"
#include "engine/model/expert_slicing.h"
#include "engine/model/manifest.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::model {

// How the CPU computes with the weights: as stored (the fp32 reference path), or packed at
// load time into INT8 (a scale per row and 32 columns), INT4 (a scale and an offset per row and
// group) or BF16 for
// the fast kernels. A folder written by `tandem convert` carries its packed weights.
// Mxfp4: routed experts stored as MXFP4 (gpt-oss) stay so, exactly; the rest as for Int4.
// Int4Down8: as Int4, but the routed experts' down projections too in INT8 (about 6.2 bits a
// routed weight instead of 5; packed_format_for).
// Int8Rotated: as Int8, every matrix rotated, with one scale per row and rotation block, its
// activations one per token and block (kernels::pack_int8_rotated): the same size, faster
// prompts, AMX in integer tiles.
enum class CpuFormat { Native, Int8, Int4, Bf16, Mxfp4, Int4Down8, Int8Rotated };
// Every CPU format, in the order a sentence lists them.
inline constexpr CpuFormat kCpuFormats[] = {
    CpuFormat::Native,    CpuFormat::Int8, CpuFormat::Int8Rotated, CpuFormat::Int4,
    CpuFormat::Int4Down8, CpuFormat::Bf16, CpuFormat::Mxfp4};
std::string_view cpu_format_name(CpuFormat f);
bool parse_cpu_format(std::string_view name, CpuFormat& out);
// "native, int8, int8-rotated, int4, int4-down8, bf16 or mxfp4", for a sentence.
std::string cpu_format_names_in_words();
// The CPU format a conversion method packs (a converted folder runs in it).
CpuFormat cpu_format_of(Method method);
// Int4 and Int4Down8: the formats with INT4 weights, whose group --int4-group sets.
bool has_int4(CpuFormat f);
// Whether `f` packs its INT8 matrices rotated (kernels::pack_int8_rotated).
inline bool rotates_int8(CpuFormat f) {
  return f == CpuFormat::Int8Rotated;
}

// Which code multiplies the dense INT8 matrices (attention, dense FFNs and shared experts,
// output head). Auto: our kernels, whose activations have a scale per group of 32 columns;
// oneDNN 2.6 has one per token only, which a real model's predictions measurably suffer
// from (kernels/cpu/packed/matmul.h). Onednn: every prompt's products (2 tokens and more)
// through oneDNN, a little faster on long prompts with AVX-512 (kernels/cpu/onednn_matmul.h)
// and less accurate, while decoding's single token keeps our kernels, where oneDNN measured
// a quarter slower. BF16 and the routed experts always take our kernels. oneDNN holds its
// own copy of the weights (our packed one serves fewer tokens).
enum class DenseBackend { Auto, Packed, Onednn };
inline constexpr std::int64_t kOnednnMinTokens = 2;

// How far a load has got: `done` of `total` items of the stage ("packing weights", ...).
struct LoadProgress {
  std::string stage;
  std::size_t done = 0, total = 0;
};

struct LoadOptions {
  // Ignored for a converted folder, whose weights are already packed in one format, unless
  // cpu_format_asked: then another format than the folder's is refused with a sentence (a
  // command line that names one must not measure or run another without a word).
  CpuFormat cpu_format = CpuFormat::Native;
  bool cpu_format_asked = false;
  std::int64_t int4_group = kernels::kDefaultInt4Group;
  int threads = 0;  // for packing; 0: all hardware threads
  // Thread pools the packed routed experts are split across (see expert_slicing.h); 0: a
  // converted folder's own count, otherwise one per NUMA node (fewer when the experts'
  // width cannot be split that many ways). A converted folder takes only its own count.
  int pools = 0;
  DenseBackend dense = DenseBackend::Auto;
  // Attention, shared experts, dense layers and the output head in BF16 whatever cpu_format
  // says (packed_format_for). A converted folder carries its formats, and refuses this where
  // it was converted without it.
  bool dense_bf16 = false;
  // Told as each stage advances by a percent, from the loading threads (so a window can show
  // a bar and the time left while a large model packs); may be empty.
  std::function<void(const LoadProgress&)> on_progress;
};

// Every matrix the fast kernels take, with its layer (-1: the output head): all but the
// embedding (looked up by row), routers and MLA's kv_b (whose per-head slices feed the
// absorbed attention). The converter packs exactly these.
// Expert: a routed expert; FeedForward: a shared expert or a dense layer's FFN.
enum class MatrixRole { Attention, Expert, FeedForward, Output };
struct PackableMatrix {
  int layer = -1;
  MatrixRole role = MatrixRole::FeedForward;
  kernels::WeightMatrix* matrix = nullptr;
  // Routed experts: how the matrix is cut for several pools (gate, up: rows; down: columns).
  SliceAxis slice_axis = SliceAxis::Rows;
  bool down = false;  // an FFN's down projection (routed, shared or dense)
};
std::vector<PackableMatrix> packable_matrices(model::ModelWeights& w);

// The packed format of a matrix for a CPU format. INT4 is the format of the routed experts
// (nearly all the bytes of an MoE model, each read by few tokens) and, in a model without
// experts, of the FFNs' gate and up projections; attention, shared experts, dense layers, the
// output head and a model without experts' down projections stay INT8, as 4-bit schemes
// elsewhere keep their sensitive tensors at higher precision (the downs: on SmolLM2-135M with
// its weights off the 4-bit grid, KL 0.17 -> 0.08; docs/benchmarks.md, "INT8 and INT4 on
// weights off the grid"). A model without experts is small, and the plan already counts its
// FFNs at 8 bits; the routed experts' downs stay INT4, whose memory is what INT4 is chosen
// for, and Int4Down8 keeps them INT8 too (the same model with its FFNs as one routed expert a
// layer: KL 0.17 in INT4, 0.08 in Int4Down8; docs/benchmarks.md, "INT4 with 8-bit downs for
// routed experts"). With `dense_bf16`, the matrices every token reads are BF16 instead (the experts
// keep `format`): for models whose attention is sensitive to INT8, such as the MLA of DeepSeek-V3.
// Not for CpuFormat::Native.
kernels::PackedFormat packed_format_for(CpuFormat format, MatrixRole role, bool has_experts,
                                        bool dense_bf16 = false, bool ffn_down = false);
// Empty when CpuFormat::Mxfp4 (and Method::Mxfp4) applies to the model: its routed experts
// are stored as MXFP4; otherwise the sentence saying why not and what to use.
std::string mxfp4_refusal(const ModelSpec& spec);

// Whether a matrix packed as `format` in `role` goes through oneDNN.
bool onednn_for(DenseBackend backend, kernels::PackedFormat format, MatrixRole role);

class LoadedModel {
 public:
  // Throws model::ModelError with a sentence naming the file for anything wrong.
  // `folder`: a model folder (config.json and safetensors, or a converted folder) or a
  // .gguf file (one file, or any part of a split set).
  static std::unique_ptr<LoadedModel> load(const std::string& folder,
                                           const LoadOptions& options = {});
  // What load checks before it binds any weight (config.json and the safetensors headers,
  // or a GGUF file's metadata and the types of its tensors), without loading; throws as
  // load does.
  static void check(const std::string& path);
  // The spec and the (memory-mapped) checkpoint of a folder or a .gguf file.
  static std::unique_ptr<model::Checkpoint> open_checkpoint(const std::string& path,
                                                            model::ModelSpec& spec);

  const std::string& folder() const { return folder_; }
  const model::ModelSpec& spec() const { return spec_; }
  const model::Checkpoint& checkpoint() const { return *checkpoint_; }
  const model::ModelWeights& weights() const { return weights_; }
  CpuFormat cpu_format() const { return cpu_format_; }
  kernels::CpuVariant cpu_variant() const { return variant_; }
  // Bytes of weights one token reads (attention, the active experts, the output head).
  std::uint64_t active_weight_bytes_per_token() const;
  std::uint64_t packed_bytes() const;
  // How many matrices oneDNN multiplies, and the bytes of its copies of them.
  std::size_t onednn_matrices() const { return onednn_.size(); }
  std::uint64_t onednn_bytes() const;
  // Whether the packed weights came from a `tandem convert` folder.
  bool converted() const { return converted_; }
  // The pool count to run with (a NumaPools of as many pools). Packed routed experts are
  // split this many ways; the fp32 reference path (CpuFormat::Native) splits nothing.
  int pools() const { return pools_; }
  // Whether the routed experts are split across the pools.
  bool experts_sliced() const { return experts_sliced_; }

 private:
  std::string folder_;
  model::ModelSpec spec_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  model::ModelWeights weights_;
  CpuFormat cpu_format_ = CpuFormat::Native;
  kernels::CpuVariant variant_ = kernels::CpuVariant::Scalar;
  // Each pool's slices of each layer's experts, bound to the pool's NUMA nodes; the slices
  // in packed_ view into them.
  std::vector<hw::NodeMemory> expert_memory_;
  std::vector<std::unique_ptr<kernels::PackedMatrix>> packed_;
  std::vector<std::unique_ptr<kernels::OnednnMatmul>> onednn_;
  bool converted_ = false;
  int pools_ = 1;
  bool experts_sliced_ = false;

  std::function<void(const LoadProgress&)> on_progress_;  // from LoadOptions, during load
  void load_converted(const std::string& folder, int threads);
  // Maps the pages of the matrices used as stored into the process, on `threads` threads,
  // when they fit in the memory available (see the definition).
  void map_in_stored_weights(int threads);
  // One pool's slice of an expert matrix in `format`, in its part of pools_' memory:
  // `destination`.
  using SliceMaker = std::function<kernels::PackedMatrix(
      const kernels::WeightMatrix& matrix, SliceAxis axis, int pool, std::uint8_t* destination,
      kernels::PackedFormat format)>;
  // Fills every routed expert's slices (one per pool) with `make`, on `threads` threads: gate
  // and up in `format`, down in `down_format`.
  void make_expert_slices(kernels::PackedFormat format, kernels::PackedFormat down_format,
                          std::int64_t int4_group, int threads, const SliceMaker& make);
  void attach_onednn(DenseBackend backend, int threads);
};

}  // namespace tandem::model
