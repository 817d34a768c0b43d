#include "engine/hub/hub_failure.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>

#include "engine/log/log.h"

namespace tandem::hub {
namespace {

// How a sentence about a failed transfer ends.
std::string_view retries(const FailureContext& c) {
  return c.download ? ", and a download resumes where it stopped." : ".";
}

}  // namespace

HubError describe_failure(const HttpAnswer& answer, const FailureContext& c) {
  const HubConfig& hub = *c.hub;
  using Failure = HttpAnswer::Failure;
  if (answer.failure == Failure::Stopped) return HubError(HubErrorKind::Cancelled, "Cancelled.");
  if (answer.failure == Failure::Stalled) {
    return HubError(
        HubErrorKind::Stalled,
        fmt::format("The transfer of {} stalled: no data arrived for {} s. Check the network "
                    "connection. Tandem retries{}",
                    c.what, hub.stall_timeout_s, retries(c)),
        fmt::format("no data for {} s", hub.stall_timeout_s));
  }
  if (answer.failure == Failure::Certificate) {
    return HubError(
        HubErrorKind::Untrusted,
        fmt::format("{} could not prove who it is: its TLS certificate was refused ({}). Tandem "
                    "does not connect to it. For a mirror with its own authority, give that "
                    "authority's certificate in CURL_CA_BUNDLE.",
                    hub.endpoint, answer.network_error),
        answer.network_error);
  }
  if (answer.failure == Failure::Network) {
    return HubError(
        HubErrorKind::Network,
        fmt::format("The connection to {} failed while fetching {} ({}). Check the network "
                    "connection and proxy settings (https_proxy), or use a mirror "
                    "(HF_ENDPOINT). Tandem retries{}",
                    hub.endpoint, c.what, answer.network_error, retries(c)),
        answer.network_error);
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

HttpGet hub_get(const HubConfig& hub, std::string url, const std::function<bool()>& should_stop) {
  HttpGet get;
  get.url = std::move(url);
  get.headers = hub_headers(hub);
  get.connect_timeout_s = hub.connect_timeout_s;
  get.stall_timeout_s = hub.stall_timeout_s;
  get.ca_bundle = hub.ca_bundle;
  get.should_stop = should_stop;
  return get;
}

std::optional<std::int64_t> requested_wait_ms(const HttpAnswer& answer) {
  const std::string value = answer.header("retry-after");
  if (value.empty()) return std::nullopt;
  return parse_retry_after_ms(value, std::time(nullptr));
}

void report_retry(const HubConfig& hub, const HubError& error, int attempt, std::int64_t wait_ms) {
  if (hub.on_retry)
    hub.on_retry({error.kind(), error.what(), attempt, hub.retry.max_attempts, wait_ms});
  // The same failure within ten minutes (another file, the next attempt) is not repeated.
  // Its sentence without digits is the key: curl's "after 30001 ms" varies between tries.
  std::string key = std::to_string(static_cast<int>(error.kind())) + ':';
  for (const char ch : std::string_view(error.what()))
    if (ch < '0' || ch > '9') key += ch;
  static std::mutex mutex;
  static std::string last;
  static std::chrono::steady_clock::time_point last_time;
  const auto now = std::chrono::steady_clock::now();
  bool repeated = false;
  {
    std::lock_guard lock(mutex);
    repeated = last == key && now - last_time < std::chrono::minutes(10);
    last = key;
    last_time = now;
  }
  if (hub.warn_on_retry && !repeated) {
    log::warn(
        "hub: {} (Attempt {} of {}; the next in {:.0f} s. Further retries of this go to the "
        "log file only.)",
        error.what(), attempt, hub.retry.max_attempts, static_cast<double>(wait_ms) / 1000.0);
  } else {
    log::info("hub: {} (attempt {} of {}; retrying in {} ms)", error.what(), attempt,
              hub.retry.max_attempts, wait_ms);
  }
}

void wait_before_retry(const HubConfig& hub, const HubError& error, const HttpAnswer& answer,
                       int failed_attempts, const std::function<bool()>& should_stop) {
  if (!is_retryable(error.kind()) || failed_attempts >= hub.retry.max_attempts) throw error;
  std::int64_t wait_ms = backoff_delay_ms(hub.retry, failed_attempts);
  if (const auto asked = requested_wait_ms(answer)) {
    if (*asked > hub.retry.max_retry_after_ms) throw error;
    wait_ms = std::max(wait_ms, *asked);
  }
  report_retry(hub, error, failed_attempts, wait_ms);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (std::chrono::steady_clock::now() < until) {
    if (should_stop && should_stop()) throw HubError(HubErrorKind::Cancelled, "Cancelled.");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace tandem::hub
