#include "engine/plan/catalog.h"

#include "engine/plan/memory_planner.h"

#include <algorithm>
#include <cctype>

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
      if (m.contains("gguf_repo") && m["gguf_repo"].is_string())
        e.gguf_repo = m["gguf_repo"].get<std::string>();
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

namespace {

bool same_repo(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

CatalogMatch find_catalog_repo(const std::string& repo) {
  if (repo.empty()) return {};
  for (const CatalogEntry& e : catalog()) {
    if (!e.repo.empty() && same_repo(e.repo, repo)) return {&e, false};
    if (!e.fp8_repo.empty() && same_repo(e.fp8_repo, repo)) return {&e, true};
    if (!e.gguf_repo.empty() && same_repo(e.gguf_repo, repo)) return {&e, false, true};
  }
  // Another GGUF release named after a catalog model: OWNER/Qwen3-30B-A3B-GGUF.
  const std::size_t slash = repo.find('/');
  const std::string_view name = std::string_view(repo).substr(slash + 1);
  constexpr std::string_view kSuffix = "-GGUF";
  if (slash == std::string::npos || name.size() <= kSuffix.size() ||
      !same_repo(name.substr(name.size() - kSuffix.size()), kSuffix))
    return {};
  const std::string_view base = name.substr(0, name.size() - kSuffix.size());
  for (const CatalogEntry& e : catalog()) {
    const std::size_t at = e.repo.find('/');
    if (at != std::string::npos && same_repo(std::string_view(e.repo).substr(at + 1), base))
      return {&e, false, true};
  }
  return {};
}

std::string catalog_stored_format(const CatalogEntry& e) {
  const auto has = [&](const char* q) {
    return std::find(e.quantizations.begin(), e.quantizations.end(), q) != e.quantizations.end();
  };
  if (has("mxfp4") && !has("bf16")) return "mxfp4";
  return has("fp8") && !has("bf16") ? "fp8" : "bf16";
}

SizeEstimate estimate_sizes(const ModelShape& shape) {
  const auto params = static_cast<double>(shape.total_params());
  const auto experts = static_cast<double>(shape.routed_expert_params());
  return {static_cast<std::uint64_t>(params * 2), static_cast<std::uint64_t>(params),
          static_cast<std::uint64_t>(params * bytes_per_param(WeightFormat::Int4)),
          static_cast<std::uint64_t>(experts * (0.5 + 1.0 / 32.0) + (params - experts) * 2)};
}

}  // namespace tandem::plan
