// Turns a failed HTTP answer from the Hub into a HubError whose sentence says what
// happened and what to do.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"

namespace tandem::hub {

struct FailureContext {
  const HubConfig* hub = nullptr;
  std::string repo;
  std::string what;  // "the file list of ORG/NAME", "model.safetensors"
  // Part of a download, which resumes where it stopped (the sentences say so); not a search
  // or a look at one file.
  bool download = false;
};

// A GET of `url` from the Hub as every Hub request makes it: the token's headers, the
// timeouts of `hub`, stopped by `should_stop`; the caller sets on_body.
HttpGet hub_get(const HubConfig& hub, std::string url, const std::function<bool()>& should_stop);

HubError describe_failure(const HttpAnswer& answer, const FailureContext& context);

// How long the server asked us to wait (429 and 503 carry Retry-After), if it did.
std::optional<std::int64_t> requested_wait_ms(const HttpAnswer& answer);

// Says that `error` (failed attempt `attempt`) will be retried in `wait_ms`: to
// `hub.on_retry`, and on the console once (with warn_on_retry) while the same failure
// repeats, then in the log file only, so an offline machine is told once, not per retry.
void report_retry(const HubConfig& hub, const HubError& error, int attempt, std::int64_t wait_ms);

// After the failed `answer` (described by `error`) of a request tried `failed_attempts`
// times: throws `error` when another attempt is not worth making (not retryable, the
// attempts of `hub.retry` used up, or a Retry-After longer than the policy waits), else
// waits the backoff or the server's Retry-After, whichever is longer. Throws
// HubError(Cancelled) promptly when `should_stop` turns true while waiting.
void wait_before_retry(const HubConfig& hub, const HubError& error, const HttpAnswer& answer,
                       int failed_attempts, const std::function<bool()>& should_stop);

}  // namespace tandem::hub
