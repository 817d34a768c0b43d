// A model's shape from a GGUF file or split set: parameter counts summed from its tensors (so they
// are exact whatever the quantization) and the KV cache size from its metadata.
#pragma once

#include "engine/model/gguf/set.h"
#include "engine/plan/model_shape.h"

namespace tandem::plan {

// Throws std::runtime_error naming the file when the metadata lacks what the plan needs.
ModelShape model_shape_from_gguf(const model::GgufSet& file);

}  // namespace tandem::plan
