// What went wrong talking to the Hub, in a sentence a user can act on.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace tandem::hub {

enum class HubErrorKind {
  InvalidRequest,    // a repository name or revision that cannot be right
  Network,           // no connection, or it dropped (retried first)
  Stalled,           // no bytes for the stall timeout (retried first)
  ServerError,       // 5xx (retried first)
  RateLimited,       // 429 (retried first, after Retry-After)
  AuthRequired,      // 401/403: gated or private repository
  NotFound,          // 404: repository, revision or file
  BadResponse,       // the server answered something that is not the Hub's API
  Untrusted,         // its TLS certificate did not check out (not retried)
  FileChanged,       // the file on the server is not the one that was listed
  ChecksumMismatch,  // the downloaded bytes do not have the published digest
  DiskFull,          // no space left while writing
  WriteFailed,       // any other failure to write or rename a file
  NotEnoughSpace,    // refused before starting: the free space is smaller than the download
  Cancelled,
};

class HubError : public std::runtime_error {
 public:
  HubError(HubErrorKind kind, const std::string& message, std::string detail = {})
      : std::runtime_error(message), kind_(kind), detail_(std::move(detail)) {}
  HubErrorKind kind() const { return kind_; }
  // The technical cause inside the sentence, for callers that word their own (libcurl's
  // words for Network and Stalled); may be empty.
  const std::string& detail() const { return detail_; }

 private:
  HubErrorKind kind_;
  std::string detail_;
};

// Transient failures that another attempt may cure.
bool is_retryable(HubErrorKind kind);

// A short name for logs and the UI ("network", "auth required", ...).
const char* error_kind_name(HubErrorKind kind);

}  // namespace tandem::hub
