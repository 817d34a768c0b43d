// Where the Hub is and who we are to it: the endpoint (huggingface.co or a mirror), the
// token for gated and private repositories, timeouts and the retry policy.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/hub/hub_error.h"
#include "engine/hub/retry_policy.h"

namespace tandem::hub {

inline constexpr const char* kDefaultEndpoint = "https://huggingface.co";

// A request that failed and will be tried again: what went wrong, and when the next try is.
struct RetryNotice {
  HubErrorKind kind = HubErrorKind::Network;
  std::string message;  // the failure's sentence
  int attempt = 0;      // failed attempts so far
  int max_attempts = 0;
  std::int64_t wait_ms = 0;
};

struct HubConfig {
  std::string endpoint = kDefaultEndpoint;  // no trailing slash
  std::string token;                        // empty: anonymous
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;
  // Certificates to trust instead of the system's (a mirror inside a company with its own
  // authority): CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE or SSL_CERT_FILE. Certificates are always
  // checked; empty: the system's authorities.
  std::string ca_bundle;
  RetryPolicy retry;
  // Each retry is a warning on the console while a download runs; a quick question (a
  // repository's config.json) logs its retries to the log file only and says what failed
  // once, at the end.
  bool warn_on_retry = true;
  // Told of every retry, on the thread that waits for it (so a window can say at once what
  // is wrong and that Tandem retries, instead of showing nothing until it gives up).
  std::function<void(const RetryNotice&)> on_retry;
};

// The app's settings win; empty settings fall back to HF_ENDPOINT and HF_TOKEN (then
// HUGGING_FACE_HUB_TOKEN), then to huggingface.co anonymously. The CA bundle comes from the
// environment (CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE, SSL_CERT_FILE).
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
