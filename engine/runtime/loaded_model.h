// A model folder opened for inference: its spec, its memory-mapped checkpoint and the
// weights bound to their roles.
#pragma once

#include <memory>
#include <string>

#include "engine/model/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"

namespace tandem::runtime {

class LoadedModel {
 public:
  // Throws model::ModelError with a sentence naming the file for anything wrong.
  static std::unique_ptr<LoadedModel> load(const std::string& folder);

  const std::string& folder() const { return folder_; }
  const model::ModelSpec& spec() const { return spec_; }
  const model::Checkpoint& checkpoint() const { return *checkpoint_; }
  const model::ModelWeights& weights() const { return weights_; }

 private:
  std::string folder_;
  model::ModelSpec spec_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  model::ModelWeights weights_;
};

}  // namespace tandem::runtime
