#include "engine/hub/retry_policy.h"

#include <curl/curl.h>

#include <algorithm>
#include <charconv>
#include <string>

namespace tandem::hub {

std::int64_t backoff_delay_ms(const RetryPolicy& policy, int failed_attempts) {
  std::int64_t delay = std::max(1, policy.initial_delay_ms);
  for (int i = 1; i < failed_attempts && delay < policy.max_delay_ms; ++i) delay *= 2;
  return std::min<std::int64_t>(delay, policy.max_delay_ms);
}

std::optional<std::int64_t> parse_retry_after_ms(std::string_view value, std::time_t now) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r')) {
    value.remove_suffix(1);
  }
  if (value.empty()) return std::nullopt;
  std::int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seconds);
  if (ec == std::errc() && end == value.data() + value.size()) {
    if (seconds < 0) return std::nullopt;
    return seconds * 1000;
  }
  // libcurl's parser knows the three date formats RFC 9110 allows.
  const std::time_t when = curl_getdate(std::string(value).c_str(), nullptr);
  if (when < 0) return std::nullopt;
  return std::max<std::int64_t>(0, static_cast<std::int64_t>(when - now)) * 1000;
}

}  // namespace tandem::hub
