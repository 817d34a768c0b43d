#include "engine/runtime/loaded_model.h"

#include "engine/log/log.h"

namespace tandem::runtime {

std::unique_ptr<LoadedModel> LoadedModel::load(const std::string& folder) {
  auto m = std::unique_ptr<LoadedModel>(new LoadedModel);
  m->folder_ = folder;
  m->spec_ = model::load_model_spec(folder);
  m->checkpoint_ = std::make_unique<model::Checkpoint>(folder);
  m->checkpoint_->set_fp8_block(m->spec_.fp8_block_rows, m->spec_.fp8_block_cols);
  m->weights_ = model::bind_weights(m->spec_, *m->checkpoint_);
  log::info("loaded {} ({}, {} layers, hidden {}, {} experts) from {}", m->spec_.architecture,
            model::family_name(m->spec_.family), m->spec_.num_layers, m->spec_.hidden_size, m->spec_.num_experts,
            folder);
  return m;
}

}  // namespace tandem::runtime
