// When to try a failed request again, and how long to wait first.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string_view>

namespace tandem::hub {

struct RetryPolicy {
  int max_attempts = 8;              // attempts in a row without progress before giving up
  int initial_delay_ms = 1000;       // the wait after the first failure, doubled after each next
  int max_delay_ms = 60'000;         // the doubling stops here
  int max_retry_after_ms = 600'000;  // a server asking for longer than this is not waited for
};

// The wait before attempt `failed_attempts + 1`: initial * 2^(failed - 1), at most max.
std::int64_t backoff_delay_ms(const RetryPolicy& policy, int failed_attempts);

// A Retry-After header: delta-seconds or an HTTP date (measured against `now`). Nothing
// when the value is neither.
std::optional<std::int64_t> parse_retry_after_ms(std::string_view value, std::time_t now);

}  // namespace tandem::hub
