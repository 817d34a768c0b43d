#include "engine/hub/hub_failure.h"

#include <fmt/format.h>

#include <ctime>

namespace tandem::hub {

HubError describe_failure(const HttpAnswer& answer, const FailureContext& c) {
  const HubConfig& hub = *c.hub;
  using Failure = HttpAnswer::Failure;
  if (answer.failure == Failure::Stopped) return HubError(HubErrorKind::Cancelled, "Cancelled.");
  if (answer.failure == Failure::Stalled) {
    return HubError(
        HubErrorKind::Stalled,
        fmt::format("The transfer of {} stalled: no data arrived for {} s. Check the network "
                    "connection. Tandem retries, and a download resumes where it stopped.",
                    c.what, hub.stall_timeout_s));
  }
  if (answer.failure == Failure::Network) {
    return HubError(
        HubErrorKind::Network,
        fmt::format("The connection to {} failed while fetching {} ({}). Check the network "
                    "connection and proxy settings (https_proxy), or use a mirror "
                    "(HF_ENDPOINT). Tandem retries, and a download resumes where it stopped.",
                    hub.endpoint, c.what, answer.network_error));
  }
  const std::string code = answer.header("x-error-code");
  const long status = answer.status;
  if (code == "RepoNotFound" || code == "RevisionNotFound" || code == "EntryNotFound" ||
      status == 404) {
    return HubError(
        HubErrorKind::NotFound,
        fmt::format("{} was not found on {} ({}). Check the repository name and the revision; "
                    "a private repository also needs a token.",
                    c.what, hub.endpoint, code.empty() ? fmt::format("HTTP {}", status) : code));
  }
  if (status == 401 || status == 403 || code == "GatedRepo") {
    const std::string page = model_page_url(hub, c.repo);
    if (hub.token.empty()) {
      return HubError(
          HubErrorKind::AuthRequired,
          fmt::format("{} is gated or private: the Hub refused {} without a token (HTTP {}). "
                      "Accept the licence on the model page ({}), then add a token "
                      "(set HF_TOKEN, or paste it in Tandem's settings).",
                      c.repo, c.what, status, page));
    }
    return HubError(
        HubErrorKind::AuthRequired,
        fmt::format("{} is gated or private and the Hub refused the token (HTTP {}). Accept the "
                    "licence on the model page ({}) with the account the token belongs to, "
                    "and check that the token may read this repository.",
                    c.repo, status, page));
  }
  if (status == 429) {
    return HubError(
        HubErrorKind::RateLimited,
        fmt::format("The Hub is limiting requests (HTTP 429) while fetching {}. Tandem waits and "
                    "retries; a token raises the limit.",
                    c.what));
  }
  if (status >= 500) {
    return HubError(
        HubErrorKind::ServerError,
        fmt::format("The server answered HTTP {} while fetching {}; it is having trouble. Tandem "
                    "retries; if it persists, try again later or use a mirror (HF_ENDPOINT).",
                    status, c.what));
  }
  return HubError(
      HubErrorKind::BadResponse,
      fmt::format("{} answered HTTP {} for {}, which Tandem did not expect. Check that the "
                  "endpoint is the Hugging Face Hub or a mirror of it.",
                  hub.endpoint, status, c.what));
}

std::optional<std::int64_t> requested_wait_ms(const HttpAnswer& answer) {
  const std::string value = answer.header("retry-after");
  if (value.empty()) return std::nullopt;
  return parse_retry_after_ms(value, std::time(nullptr));
}

}  // namespace tandem::hub
