#include "engine/hub/hub_error.h"

namespace tandem::hub {

bool is_retryable(HubErrorKind kind) {
  switch (kind) {
    case HubErrorKind::Network:
    case HubErrorKind::Stalled:
    case HubErrorKind::ServerError:
    case HubErrorKind::RateLimited:
      return true;
    default:
      return false;
  }
}

const char* error_kind_name(HubErrorKind kind) {
  switch (kind) {
    case HubErrorKind::InvalidRequest:
      return "invalid request";
    case HubErrorKind::Network:
      return "network";
    case HubErrorKind::Stalled:
      return "stalled";
    case HubErrorKind::ServerError:
      return "server error";
    case HubErrorKind::RateLimited:
      return "rate limited";
    case HubErrorKind::AuthRequired:
      return "auth required";
    case HubErrorKind::NotFound:
      return "not found";
    case HubErrorKind::BadResponse:
      return "bad response";
    case HubErrorKind::Untrusted:
      return "untrusted certificate";
    case HubErrorKind::FileChanged:
      return "file changed";
    case HubErrorKind::ChecksumMismatch:
      return "checksum mismatch";
    case HubErrorKind::DiskFull:
      return "disk full";
    case HubErrorKind::WriteFailed:
      return "write failed";
    case HubErrorKind::NotEnoughSpace:
      return "not enough space";
    case HubErrorKind::Cancelled:
      return "cancelled";
  }
  return "error";
}

}  // namespace tandem::hub
