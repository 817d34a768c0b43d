// The Hub's model search (GET /api/models?search=...), for finding a repository by name:
// the most downloaded matches first.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/hub/hub_config.h"

namespace tandem::hub {

struct ModelSearchHit {
  std::string repo;  // ORG/NAME
  std::int64_t downloads = 0;
  std::int64_t likes = 0;
  std::string pipeline;  // "text-generation", ...; may be empty
};

// Up to `limit` repositories whose name matches `query`; throws HubError with a sentence
// (offline, the Hub's errors), after the retries of `hub.retry`.
std::vector<ModelSearchHit> search_models(const HubConfig& hub, const std::string& query,
                                          int limit = 20,
                                          const std::function<bool()>& should_stop = {});

// The answer's JSON (an array of models) as hits; malformed entries are skipped.
std::vector<ModelSearchHit> parse_model_search(const std::string& body);

}  // namespace tandem::hub
