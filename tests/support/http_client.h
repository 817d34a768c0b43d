// A blocking HTTP/1.1 client on a plain socket, for tests that drive a server running on
// the test's own event loop: call it from another thread (std::async) and spin the loop.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

struct HttpResponse {
  int status = 0;                              // 0: no answer (refused, closed)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
  std::vector<std::string> events;             // "data: ..." payloads of an SSE body
};

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Called with each SSE payload as it arrives; returning false closes the connection there.
  std::function<bool(const std::string&)> on_event;
  int timeout_ms = 30000;
};

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_all(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

inline HttpResponse http(int port, const HttpRequest& r) {
  HttpResponse out;
  const int fd = connect_to(port);
  if (fd < 0) return out;
  timeval tv{r.timeout_ms / 1000, (r.timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string head =
      r.method + " " + r.path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
  if (!r.body.empty() || r.method == "POST")
    head += "Content-Type: application/json\r\nContent-Length: " + std::to_string(r.body.size()) +
            "\r\n";
  head += "\r\n";
  send_all(fd, head + r.body);  // a server may answer (413) before it has read everything

  std::string data;
  std::size_t header_end = std::string::npos;
  bool chunked = false;
  std::size_t parsed = 0;  // of the de-chunked body, how much was scanned for events
  bool closed_early = false;
  char buffer[16384];
  const auto scan_events = [&] {
    for (;;) {
      const std::size_t end = out.body.find("\n\n", parsed);
      if (end == std::string::npos) return true;
      const std::string event = out.body.substr(parsed, end - parsed);
      parsed = end + 2;
      if (event.rfind("data: ", 0) == 0) {
        out.events.push_back(event.substr(6));
        if (r.on_event && !r.on_event(out.events.back())) return false;
      }
    }
  };
  std::string raw_body;
  const auto dechunk = [&] {
    if (!chunked) {
      out.body = raw_body;
      return;
    }
    std::string body;
    std::size_t at = 0;
    for (;;) {
      const std::size_t line = raw_body.find("\r\n", at);
      if (line == std::string::npos) break;
      const std::size_t size = std::stoul(raw_body.substr(at, line - at), nullptr, 16);
      if (size == 0 || line + 2 + size + 2 > raw_body.size()) break;
      body += raw_body.substr(line + 2, size);
      at = line + 2 + size + 2;
    }
    out.body = body;
  };
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    data.append(buffer, static_cast<std::size_t>(n));
    if (header_end == std::string::npos) {
      header_end = data.find("\r\n\r\n");
      if (header_end == std::string::npos) continue;
      const std::string status_line = data.substr(0, data.find("\r\n"));
      out.status = std::stoi(status_line.substr(status_line.find(' ') + 1, 3));
      std::size_t at = data.find("\r\n") + 2;
      while (at < header_end) {
        const std::size_t e = data.find("\r\n", at);
        const std::string line = data.substr(at, e - at);
        const std::size_t colon = line.find(':');
        std::string key = line.substr(0, colon);
        for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        out.headers[key] = value;
        at = e + 2;
      }
      chunked = out.headers["transfer-encoding"] == "chunked";
    }
    raw_body = data.substr(header_end + 4);
    dechunk();
    if (!scan_events()) {
      closed_early = true;
      break;
    }
    if (chunked && raw_body.size() >= 5 &&
        raw_body.compare(raw_body.size() - 5, 5, "0\r\n\r\n") == 0)
      break;
    if (!chunked && out.headers.count("content-length") &&
        raw_body.size() >= std::stoul(out.headers["content-length"]))
      break;
  }
  (void)closed_early;
  ::close(fd);
  return out;
}

}  // namespace tandem::test
