#include "engine/hub/hub_config.h"

#include <cstdlib>
#include <regex>

#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_error.h"

namespace tandem::hub {
namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace

HubConfig hub_config_from(std::string_view endpoint_setting, std::string_view token_setting) {
  HubConfig hub;
  std::string endpoint(endpoint_setting);
  if (endpoint.empty()) endpoint = environment("HF_ENDPOINT");
  if (!endpoint.empty()) hub.endpoint = endpoint;
  while (!hub.endpoint.empty() && hub.endpoint.back() == '/') hub.endpoint.pop_back();
  hub.token = std::string(token_setting);
  if (hub.token.empty()) hub.token = environment("HF_TOKEN");
  if (hub.token.empty()) hub.token = environment("HUGGING_FACE_HUB_TOKEN");
  for (const char* name : {"CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"}) {
    hub.ca_bundle = environment(name);
    if (!hub.ca_bundle.empty()) break;
  }
  return hub;
}

void validate_repo_id(std::string_view repo) {
  static const std::regex kRepoId(R"(([A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*)");
  if (!std::regex_match(repo.begin(), repo.end(), kRepoId) ||
      repo.find("..") != std::string_view::npos) {
    throw HubError(HubErrorKind::InvalidRequest,
                   "\"" + std::string(repo) +
                       "\" is not a Hugging Face repository name; write it as ORGANISATION/MODEL, "
                       "for example Qwen/Qwen3-30B-A3B.");
  }
}

std::string tree_url(const HubConfig& hub, std::string_view repo, std::string_view revision) {
  return hub.endpoint + "/api/models/" + std::string(repo) + "/tree/" +
         url_escape(revision, false) + "?recursive=true";
}

std::string resolve_url(const HubConfig& hub, std::string_view repo, std::string_view revision,
                        std::string_view path) {
  return hub.endpoint + "/" + std::string(repo) + "/resolve/" + url_escape(revision, false) + "/" +
         url_escape(path, true);
}

std::string model_page_url(const HubConfig& hub, std::string_view repo) {
  return hub.endpoint + "/" + std::string(repo);
}

std::vector<std::string> hub_headers(const HubConfig& hub) {
  std::vector<std::string> headers;
  if (!hub.token.empty()) headers.push_back("Authorization: Bearer " + hub.token);
  return headers;
}

}  // namespace tandem::hub
