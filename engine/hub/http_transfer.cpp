#include "engine/hub/http_transfer.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <stdexcept>

#include "engine/version.h"

namespace tandem::hub {
namespace {

constexpr std::size_t kErrorBodyLimit = 64 * 1024;

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      throw std::runtime_error("libcurl could not initialise");
    }
  });
}

struct TransferState {
  const HttpGet* request = nullptr;
  HttpAnswer* answer = nullptr;
  CURL* easy = nullptr;
  bool aborted = false;
  bool started = false;
};

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto* state = static_cast<TransferState*>(user);
  const std::size_t length = size * count;
  std::string_view line(data, length);
  if (line.rfind("HTTP/", 0) == 0) {
    // A new response starts (after a redirect or a 100 Continue): keep only the last one's.
    state->answer->headers.clear();
    return length;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return length;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
    value.remove_suffix(1);
  }
  state->answer->headers[name] = std::string(value);
  return length;
}

std::size_t on_write(char* data, std::size_t size, std::size_t count, void* user) {
  auto* state = static_cast<TransferState*>(user);
  const std::size_t length = size * count;
  long status = 0;
  curl_easy_getinfo(state->easy, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status < 300) {
    if (!state->started) {
      state->started = true;
      if (state->request->on_start && !state->request->on_start(status, state->answer->headers)) {
        state->aborted = true;
        return CURL_WRITEFUNC_ERROR;
      }
    }
    if (state->request->on_body && !state->request->on_body(std::string_view(data, length))) {
      state->aborted = true;
      return CURL_WRITEFUNC_ERROR;
    }
    return length;
  }
  std::string& body = state->answer->error_body;
  body.append(data, std::min(length, kErrorBodyLimit - std::min(kErrorBodyLimit, body.size())));
  return length;
}

}  // namespace

std::string HttpAnswer::header(const std::string& lower_case_name) const {
  const auto it = headers.find(lower_case_name);
  return it == headers.end() ? std::string() : it->second;
}

std::string url_escape(std::string_view text, bool keep_slashes) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slashes && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

HttpAnswer http_get(const HttpGet& request) {
  init_curl_once();
  HttpAnswer answer;
  TransferState state;
  state.request = &request;
  state.answer = &answer;

  CURL* easy = curl_easy_init();
  CURLM* multi = curl_multi_init();
  if (easy == nullptr || multi == nullptr) {
    curl_easy_cleanup(easy);
    curl_multi_cleanup(multi);
    throw std::runtime_error("libcurl could not create a transfer (out of memory?)");
  }
  state.easy = easy;
  char error_text[CURL_ERROR_SIZE] = {};
  curl_slist* headers = nullptr;
  for (const auto& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  const std::string user_agent = std::string("tandem/") + kTandemVersion;

  curl_easy_setopt(easy, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, user_agent.c_str());
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 10L);
  // A redirect may lead to another host (the Hub's CDN) but never to file:// or other schemes.
  curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!request.ca_bundle.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, request.ca_bundle.c_str());
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT, request.connect_timeout_s);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, request.stall_timeout_s);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_text);
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &state);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &state);
  curl_multi_add_handle(multi, easy);

  // The multi interface lets us wake up every 50 ms to look at the stop flag, which the
  // easy interface's progress callback (about once a second when idle) would not.
  bool stopped = false;
  CURLcode result = CURLE_OK;
  for (;;) {
    int running = 0;
    curl_multi_perform(multi, &running);
    int queued = 0;
    bool done = false;
    while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
      if (message->msg == CURLMSG_DONE) {
        result = message->data.result;
        done = true;
      }
    }
    if (done || running == 0) break;
    if (request.should_stop && request.should_stop()) {
      stopped = true;
      break;
    }
    curl_multi_poll(multi, nullptr, 0, 50, nullptr);
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &answer.status);
  if (stopped) {
    answer.failure = HttpAnswer::Failure::Stopped;
  } else if (state.aborted) {
    answer.failure = HttpAnswer::Failure::Aborted;
  } else if (result == CURLE_OPERATION_TIMEDOUT && answer.status != 0) {
    answer.failure = HttpAnswer::Failure::Stalled;
    answer.network_error = error_text[0] ? error_text : curl_easy_strerror(result);
  } else if (result != CURLE_OK) {
    const bool certificate =
        result == CURLE_PEER_FAILED_VERIFICATION || result == CURLE_SSL_CACERT_BADFILE ||
        result == CURLE_SSL_ISSUER_ERROR || result == CURLE_SSL_PINNEDPUBKEYNOTMATCH;
    answer.failure = result == CURLE_OPERATION_TIMEDOUT ? HttpAnswer::Failure::Stalled
                     : certificate                      ? HttpAnswer::Failure::Certificate
                                                        : HttpAnswer::Failure::Network;
    answer.network_error = error_text[0] ? error_text : curl_easy_strerror(result);
  }
  curl_multi_remove_handle(multi, easy);
  curl_easy_cleanup(easy);
  curl_multi_cleanup(multi);
  curl_slist_free_all(headers);
  return answer;
}

}  // namespace tandem::hub
