#include "engine/plan/catalog.h"

namespace tandem::plan {

// Generated from resources/catalog.json at build time.
extern const char* const kCatalogJson;

const std::vector<CatalogEntry>& catalog() {
  static const std::vector<CatalogEntry> entries = [] {
    std::vector<CatalogEntry> out;
    const auto doc = nlohmann::json::parse(kCatalogJson);
    for (const auto& m : doc.at("models")) {
      CatalogEntry e;
      e.id = m.at("id").get<std::string>();
      e.name = m.at("name").get<std::string>();
      if (m.contains("repo") && m["repo"].is_string()) e.repo = m["repo"].get<std::string>();
      if (m.contains("fp8_repo") && m["fp8_repo"].is_string())
        e.fp8_repo = m["fp8_repo"].get<std::string>();
      e.description = m.value("description", "");
      e.quantizations = m.value("quantizations", std::vector<std::string>{});
      e.builtin = m.value("builtin", false);
      if (m.contains("config")) e.config = m["config"];
      out.push_back(std::move(e));
    }
    return out;
  }();
  return entries;
}

const CatalogEntry* find_catalog_entry(const std::string& id) {
  for (const CatalogEntry& e : catalog()) {
    if (e.id == id) return &e;
  }
  return nullptr;
}

SizeEstimate estimate_sizes(const ModelShape& shape) {
  const auto params = static_cast<double>(shape.total_params());
  return {static_cast<std::uint64_t>(params * 2), static_cast<std::uint64_t>(params),
          static_cast<std::uint64_t>(params * (0.5 + 1.0 / 64.0))};
}

}  // namespace tandem::plan
