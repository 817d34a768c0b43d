// Converts a model into Tandem's CPU weight format: every matrix the CPU kernels take
// (attention projections, experts, dense FFNs, output head) packed as INT8, INT4 or BF16, one
// safetensors file per layer, so the output folder is a model of its own. The source is a
// Hugging Face folder (the tensors used as stored, the embedding, norms, routers, biases, MLA
// kv_b, go to base.safetensors, the tokenizer and config files beside) or a GGUF model, one
// file or a split set (those tensors stay in their block formats in base.gguf, with the
// file's metadata: its tokenizer and chat template). Streams layer by layer with bounded
// memory; every file is written under a temporary name and renamed when complete;
// resumable; cancellable.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/model/gguf/set.h"
#include "engine/model/manifest.h"
#include "kernels/cpu/isa.h"

namespace tandem::convert {

struct ConvertOptions {
  std::string input, output;  // input: a model folder, or a .gguf file (any part of a set)
  model::Method method = model::Method::Int8;
  int group = 0;  // INT4 columns per scale; 0: the default (kernels::kDefaultInt4Group)
  // Thread pools the routed experts are split for (see model/expert_slicing.h); 0: one
  // per NUMA node of this machine, or the most below that the experts' width allows.
  int pools = 0;
  // Attention, shared experts, dense layers and the output head in BF16 (the experts keep
  // `method`): see model::packed_format_for.
  bool dense_bf16 = false;
  bool verify = false;
  int threads = 0;  // packing threads; 0: all hardware threads
};

struct ConvertProgress {
  std::uint64_t bytes_done = 0, bytes_total = 0;  // source bytes
  double bytes_per_s = 0, eta_s = 0;
  int layer = 0, layers = 0;  // layer being written (0-based); layers in the model
  std::string tensor;
};

struct TensorCheck {
  std::string name;
  double relative_error = 0;  // ||packed - source|| / ||source|| over the whole matrix
};

struct ConvertResult {
  std::uint64_t bytes_written = 0;
  double seconds = 0;
  std::uint64_t peak_memory_bytes = 0;  // peak resident set of this process (VmHWM)
  bool resumed = false;
  std::vector<TensorCheck> verification;
};

struct ConvertEstimate {
  std::uint64_t output_bytes = 0;
  double seconds = 0;
  // A GGUF source: whether converting it pays on this CPU (gguf_conversion_advice); empty for
  // a folder.
  std::string advice;
};

// A conversion that cannot be done as asked (bad folder, method, group, pools, disk space):
// what() is a sentence for the user.
class ConvertError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConvertCancelled : public std::runtime_error {
 public:
  ConvertCancelled() : std::runtime_error("the conversion was cancelled; run it again to resume") {}
};

// Throws ConvertError (or model::ModelError for a broken source) with a sentence.
ConvertEstimate estimate_conversion(const ConvertOptions& options);

// Whether converting the GGUF model `set` pays on a CPU whose kernels run as `variant`, in a
// few sentences for the user, from what the experts are stored as: AMX runs Tandem's INT8 and
// INT4 prompts on its tiles, which block formats as stored do not use; without AMX an 8-bit
// file gains from INT8 in prompts and replies, a 4-bit one gains in prompts from INT4 but
// loses in replies and accuracy (the weights are rounded a second time), and a file under 4
// bits a weight would only grow. Empty when no format of it is known.
std::string gguf_conversion_advice(const model::GgufSet& set, kernels::CpuVariant variant);

class Converter {
 public:
  explicit Converter(ConvertOptions options);
  // Runs the conversion on the calling thread; `progress` is called from it after every
  // tensor. Throws ConvertError / model::ModelError with a sentence, ConvertCancelled after
  // cancel(); either way, finished files stay for a resume and nothing looks complete.
  ConvertResult run(const std::function<void(const ConvertProgress&)>& progress);
  // From any thread; run() stops after the tensors in flight (well under a second).
  void cancel() { cancelled_.store(true); }

 private:
  ConvertOptions options_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace tandem::convert
