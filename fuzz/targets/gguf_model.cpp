// A GGUF file read as a model: the architecture's settings from the metadata, the tensors
// mapped to their roles and formats (experts cut from their fused tensors), every matrix
// bound with its shape checked, and the first and last row of each converted to fp32.
#include <exception>
#include <memory>
#include <vector>

#include "engine/model/checkpoint.h"
#include "engine/model/gguf/model.h"
#include "engine/model/gguf/set.h"
#include "engine/model/model_weights.h"
#include "fuzz/fuzz_input.h"

namespace {

void touch(const tandem::kernels::WeightMatrix& m) {
  if (m.data == nullptr || m.rows == 0 || m.cols == 0) return;
  std::vector<float> row(static_cast<std::size_t>(m.cols));
  const auto* bytes = static_cast<const char*>(m.data);
  for (std::int64_t r : {std::int64_t{0}, m.rows - 1}) {
    tandem::kernels::convert_to_f32(
        m.dtype, bytes + tandem::kernels::dtype_bytes(m.dtype, r * m.cols), row.data(), row.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tandem::fuzz::MemoryFile file(data, size);
  try {
    auto set = std::make_unique<tandem::model::GgufSet>(file.path());
    const tandem::model::ModelSpec spec = tandem::model::gguf_model_spec(*set);
    tandem::model::Checkpoint checkpoint(std::move(set), spec);
    const tandem::model::ModelWeights w = tandem::model::bind_weights(spec, checkpoint);
    touch(w.embedding);
    touch(w.output);
    for (const auto& layer : w.layers) {
      for (const auto* m : {&layer.attention.q, &layer.attention.k, &layer.attention.v,
                            &layer.attention.o, &layer.dense.gate, &layer.dense.down})
        touch(*m);
      for (const auto& e : layer.experts.experts) touch(e.down);
    }
  } catch (const std::exception&) {
  }
  return 0;
}
