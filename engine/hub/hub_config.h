// Where the Hub is and who we are to it: the endpoint (huggingface.co or a mirror), the
// token for gated and private repositories, timeouts and the retry policy.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/hub/retry_policy.h"

namespace tandem::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

struct HubConfig {
  std::string endpoint = kDefaultEndpoint;  // no trailing slash
  std::string token;                        // empty: anonymous
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;
  RetryPolicy retry;
  // Each retry is a warning on the console while a download runs; a quick question (a
  // repository's config.json) logs its retries to the log file only and says what failed
  // once, at the end.
  bool warn_on_retry = true;
};

// The app's settings win; empty settings fall back to HF_ENDPOINT and HF_TOKEN (then
// HUGGING_FACE_HUB_TOKEN), then to huggingface.co anonymously.
HubConfig hub_config_from(std::string_view endpoint_setting, std::string_view token_setting);

// "ORG/NAME" (or a bare legacy "NAME"); throws HubError(InvalidRequest) with a sentence.
void validate_repo_id(std::string_view repo);

std::string tree_url(const HubConfig& hub, std::string_view repo, std::string_view revision);
std::string resolve_url(const HubConfig& hub, std::string_view repo, std::string_view revision,
                        std::string_view path);
std::string model_page_url(const HubConfig& hub, std::string_view repo);

// Request headers every Hub call carries (the token, when there is one).
std::vector<std::string> hub_headers(const HubConfig& hub);

}  // namespace tandem::hub
