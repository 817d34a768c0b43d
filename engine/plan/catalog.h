// The models Tandem knows before anything is downloaded: repository, description and the
// configuration the planner needs (resources/catalog.json, compiled in).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/plan/model_shape.h"

namespace tandem::plan {

struct CatalogEntry {
  std::string id;
  std::string name;
  std::string repo;      // empty for the built-in demo
  std::string fp8_repo;  // where an FP8 upload exists
  std::string gguf_repo;  // where GGUF quantisations of it are (unsloth's), one download each
  std::string description;
  std::vector<std::string> quantizations;
  bool builtin = false;
  nlohmann::json config;  // null for the demo (its folder has the config)
};

const std::vector<CatalogEntry>& catalog();
const CatalogEntry* find_catalog_entry(const std::string& id);

// The catalog entry a Hugging Face repository belongs to: its `repo`, or its `fp8_repo`
// (then `fp8` is true), or its `gguf_repo` or any OWNER/NAME-GGUF whose NAME is the entry's
// (then `gguf` is true). Repository names are compared without regard to case, as the Hub
// compares them. Null when the catalog does not have it.
struct CatalogMatch {
  const CatalogEntry* entry = nullptr;
  bool fp8 = false;
  bool gguf = false;  // its gguf_repo, or another GGUF release named after it
};
CatalogMatch find_catalog_repo(const std::string& repo);

// How the entry's `repo` stores its weights: "fp8" when FP8 is its only quantization
// (DeepSeek-V3, Kimi-K2), "mxfp4" when MXFP4 is (gpt-oss: the experts MXFP4, the rest BF16),
// otherwise "bf16".
std::string catalog_stored_format(const CatalogEntry& entry);

// Download sizes estimated from the parameter count.
struct SizeEstimate {
  std::uint64_t bf16_bytes = 0;
  std::uint64_t fp8_bytes = 0;
  std::uint64_t int4_bytes = 0;
  std::uint64_t mxfp4_bytes = 0;  // experts as MXFP4, the rest BF16 (gpt-oss's release)
};
SizeEstimate estimate_sizes(const ModelShape& shape);

}  // namespace tandem::plan
