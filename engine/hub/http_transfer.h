// One HTTP GET through libcurl: redirects followed, TLS always verified, the proxy taken
// from the environment (libcurl's http_proxy/https_proxy/no_proxy), a stall timeout, and
// a stop check polled often enough that pausing or cancelling is prompt.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::hub {

struct HttpGet {
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  long connect_timeout_s = 30;
  long stall_timeout_s = 60;  // fewer than one byte per second for this long fails the transfer
  std::string ca_bundle;      // certificates to trust instead of the system's; empty: those
  // Called once before the first body byte of a 2xx answer, with its status and headers
  // (names in lower case); returning false stops the transfer (Failure::Aborted).
  std::function<bool(long status, const std::map<std::string, std::string>& headers)> on_start;
  // Receives the body of a 2xx answer; returning false stops the transfer (Failure::Aborted).
  std::function<bool(std::string_view bytes)> on_body;
  // Polled about every 50 ms; true stops the transfer (Failure::Stopped).
  std::function<bool()> should_stop;
};

struct HttpAnswer {
  // Certificate: the server's TLS certificate was refused (libcurl's verification).
  enum class Failure { None, Network, Certificate, Stalled, Aborted, Stopped };
  Failure failure = Failure::None;
  long status = 0;            // of the last response (after redirects); 0 when none came
  std::string network_error;  // libcurl's words when failure is Network, Certificate or Stalled
  std::map<std::string, std::string> headers;  // of the last response, names in lower case
  std::string error_body;  // the start of a non-2xx body (the Hub explains errors there)

  bool ok() const { return failure == Failure::None && status >= 200 && status < 300; }
  std::string header(const std::string& lower_case_name) const;
};

HttpAnswer http_get(const HttpGet& request);

// Percent-encodes everything but unreserved characters and, when `keep_slashes`, '/'.
std::string url_escape(std::string_view text, bool keep_slashes);

}  // namespace tandem::hub
