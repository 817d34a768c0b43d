#include "engine/hub/model_search.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/hub_failure.h"

namespace tandem::hub {

std::vector<ModelSearchHit> parse_model_search(const std::string& body) {
  std::vector<ModelSearchHit> hits;
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array()) return hits;
  for (const auto& m : j) {
    if (!m.is_object()) continue;
    ModelSearchHit h;
    const auto id = m.contains("id") ? m["id"] : m.value("modelId", nlohmann::json());
    if (!id.is_string()) continue;
    h.repo = id.get<std::string>();
    if (m.contains("downloads") && m["downloads"].is_number_integer())
      h.downloads = m["downloads"].get<std::int64_t>();
    if (m.contains("likes") && m["likes"].is_number_integer())
      h.likes = m["likes"].get<std::int64_t>();
    if (m.contains("pipeline_tag") && m["pipeline_tag"].is_string())
      h.pipeline = m["pipeline_tag"].get<std::string>();
    hits.push_back(std::move(h));
  }
  return hits;
}

std::vector<ModelSearchHit> search_models(const HubConfig& hub, const std::string& query, int limit,
                                          const std::function<bool()>& should_stop) {
  if (query.empty())
    throw HubError(HubErrorKind::InvalidRequest, "Type part of a model's name to search for.");
  const FailureContext context{&hub, "", fmt::format("the models matching \"{}\"", query)};
  const std::string url =
      fmt::format("{}/api/models?search={}&limit={}&sort=downloads&direction=-1", hub.endpoint,
                  url_escape(query, false), limit);
  int failed_attempts = 0;
  for (;;) {
    std::string body;
    HttpGet get = hub_get(hub, url, should_stop);
    get.on_body = [&body](std::string_view bytes) {
      body.append(bytes);
      return body.size() < (16u << 20);  // a search answer is small
    };
    const HttpAnswer answer = http_get(get);
    if (answer.ok()) return parse_model_search(body);
    wait_before_retry(hub, describe_failure(answer, context), answer, ++failed_attempts,
                      should_stop);
  }
}

}  // namespace tandem::hub
