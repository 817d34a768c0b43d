// config.json into a model spec, as transformers 4 and 5 write it, for every family.
#include <exception>

#include <nlohmann/json.hpp>

#include "engine/model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto config = nlohmann::json::parse(data, data + size, nullptr, false);
  if (config.is_discarded()) return 0;
  try {
    (void)tandem::model::parse_model_spec(config, "config.json");
  } catch (const std::exception&) {
  }
  return 0;
}
