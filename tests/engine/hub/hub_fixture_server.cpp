#include "hub_fixture_server.h"

#include <cctype>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <QCryptographicHash>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

namespace tandem::test {
namespace {

std::string hex_digest(QCryptographicHash::Algorithm algorithm, const std::string& prefix,
                       const std::string& content) {
  QCryptographicHash hash(algorithm);
  hash.addData(QByteArrayView(prefix.data(), static_cast<qsizetype>(prefix.size())));
  hash.addData(QByteArrayView(content.data(), static_cast<qsizetype>(content.size())));
  return hash.result().toHex().toStdString();
}

std::string percent_decode(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size()) {
      out.push_back(static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 302:
      return "Found";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 416:
      return "Range Not Satisfiable";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

HubFixtureServer::HubFixtureServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    throw std::runtime_error("the fixture server cannot listen on 127.0.0.1");
  }
  socklen_t length = sizeof address;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HubFixtureServer::~HubFixtureServer() {
  stopping_ = true;
  acceptor_.join();
  std::vector<std::thread> connections;
  {
    std::lock_guard lock(mutex_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& t : connections) t.join();
  ::close(listen_fd_);
}

std::string HubFixtureServer::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

void HubFixtureServer::add_file_from(const std::string& repo, const std::string& path,
                                     const std::string& local) {
  std::ifstream in(local, std::ios::binary);
  if (!in) throw std::runtime_error("the fixture " + local + " cannot be read");
  add_file(repo, path, std::string(std::istreambuf_iterator<char>(in), {}));
}

void HubFixtureServer::add_file(const std::string& repo, const std::string& path,
                                const std::string& content, bool lfs) {
  std::lock_guard lock(mutex_);
  File& f = repos_[repo].files[path];
  f.content = content;
  f.lfs = lfs;
}

void HubFixtureServer::set_gated(const std::string& repo, const std::string& token,
                                 bool listing_public) {
  std::lock_guard lock(mutex_);
  repos_[repo].token = token;
  repos_[repo].listing_public = listing_public;
}

void HubFixtureServer::add_model_repo(const std::string& repo, const std::string& config_json,
                                      std::uint64_t weight_bytes, int shards) {
  add_file(repo, "config.json", config_json, false);
  add_file(repo, "tokenizer.json", R"({"model":{"type":"BPE"}})", false);
  for (int i = 1; i <= shards; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i, shards);
    const std::uint64_t share = weight_bytes / static_cast<std::uint64_t>(shards);
    add_file(repo, name, "shard " + std::to_string(i));
    set_listed_size(repo, name, i < shards ? share : weight_bytes - share * (shards - 1));
  }
}

void HubFixtureServer::set_page_size(int entries) {
  std::lock_guard lock(mutex_);
  page_size_ = entries;
}

void HubFixtureServer::set_listed_sha256(const std::string& repo, const std::string& path,
                                         const std::string& sha) {
  std::lock_guard lock(mutex_);
  repos_[repo].files[path].listed_sha256 = sha;
}

void HubFixtureServer::set_listed_size(const std::string& repo, const std::string& path,
                                       std::uint64_t size) {
  std::lock_guard lock(mutex_);
  repos_[repo].files[path].listed_size = size;
}

void HubFixtureServer::set_served_content(const std::string& repo, const std::string& path,
                                          const std::string& content) {
  std::lock_guard lock(mutex_);
  repos_[repo].files[path].served = content;
}

void HubFixtureServer::push_fault(const std::string& repo, const std::string& path,
                                  const ServerFault& fault) {
  std::lock_guard lock(mutex_);
  repos_[repo].files[path].faults.push_back(fault);
}

void HubFixtureServer::set_throttle(std::uint64_t bytes_per_s) {
  std::lock_guard lock(mutex_);
  throttle_bytes_per_s_ = bytes_per_s;
}

void HubFixtureServer::set_answer_delay_ms(int ms) {
  std::lock_guard lock(mutex_);
  answer_delay_ms_ = ms;
}

std::uint64_t HubFixtureServer::bytes_served(const std::string& repo,
                                             const std::string& path) const {
  std::lock_guard lock(mutex_);
  const auto it = bytes_served_.find(repo + ":" + path);
  return it == bytes_served_.end() ? 0 : it->second;
}

std::vector<ServedRequest> HubFixtureServer::file_requests(const std::string& repo,
                                                           const std::string& path) const {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find(repo + ":" + path);
  return it == requests_.end() ? std::vector<ServedRequest>{} : it->second;
}

int HubFixtureServer::tree_requests() const {
  std::lock_guard lock(mutex_);
  return tree_requests_;
}

int HubFixtureServer::open_connections() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(open_fds_.size());
}

void HubFixtureServer::reset_counters() {
  std::lock_guard lock(mutex_);
  bytes_served_.clear();
  requests_.clear();
  tree_requests_ = 0;
}

void HubFixtureServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(mutex_);
    open_fds_.push_back(fd);
    connections_.emplace_back([this, fd] { serve(fd); });
  }
}

bool HubFixtureServer::send_all(int fd, const char* data, std::size_t size, bool throttled) {
  std::uint64_t rate = 0;
  if (throttled) {
    std::lock_guard lock(mutex_);
    rate = throttle_bytes_per_s_;
  }
  const std::size_t chunk = rate > 0 ? std::max<std::size_t>(1024, rate / 50) : size;
  while (size > 0) {
    if (stopping_) return false;
    const std::size_t n = std::min(chunk, size);
    const ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    size -= static_cast<std::size_t>(sent);
    if (rate > 0)
      std::this_thread::sleep_for(
          std::chrono::microseconds(static_cast<std::uint64_t>(sent) * 1'000'000 / rate));
  }
  return true;
}

void HubFixtureServer::send_simple(int fd, int status, const std::string& body,
                                   const std::string& extra_headers) {
  const std::string head =
      "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n" + extra_headers + "\r\n";
  send_all(fd, head.data(), head.size(), false);
  send_all(fd, body.data(), body.size(), false);
}

int HubFixtureServer::refusal(const Request& request, const std::string& repo, bool listing) const {
  std::lock_guard lock(mutex_);
  const auto it = repos_.find(repo);
  if (it == repos_.end() || it->second.token.empty()) return 0;
  if (listing && it->second.listing_public) return 0;
  const auto auth = request.headers.find("authorization");
  if (auth == request.headers.end()) return 401;
  return auth->second == "Bearer " + it->second.token ? 0 : 403;
}

void HubFixtureServer::send_refusal(int fd, int status) {
  send_simple(fd, status, R"({"error":"Access to this model is restricted."})",
              "X-Error-Code: GatedRepo\r\n");
}

void HubFixtureServer::serve(int fd) {
  std::string data;
  char buffer[4096];
  while (data.find("\r\n\r\n") == std::string::npos && data.size() < 65536) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    data.append(buffer, static_cast<std::size_t>(n));
  }
  Request request;
  const auto line_end = data.find("\r\n");
  if (line_end != std::string::npos) {
    const std::string line = data.substr(0, line_end);
    const auto s1 = line.find(' ');
    const auto s2 = line.find(' ', s1 + 1);
    request.method = line.substr(0, s1);
    request.target = line.substr(s1 + 1, s2 - s1 - 1);
    std::size_t pos = line_end + 2;
    for (;;) {
      const auto end = data.find("\r\n", pos);
      if (end == std::string::npos || end == pos) break;
      const std::string header = data.substr(pos, end - pos);
      const auto colon = header.find(':');
      if (colon != std::string::npos) {
        std::string name = header.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(), ::tolower);
        request.headers[name] = header.substr(header.find_first_not_of(' ', colon + 1));
      }
      pos = end + 2;
    }
    int delay_ms = 0;
    {
      std::lock_guard lock(mutex_);
      delay_ms = answer_delay_ms_;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    while (!stopping_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto q = request.target.find('?');
    const std::string path = request.target.substr(0, q);
    const std::string query = q == std::string::npos ? std::string() : request.target.substr(q + 1);
    std::vector<std::string> parts;
    for (std::size_t start = 1; start <= path.size();) {
      const auto slash = std::min(path.find('/', start), path.size());
      parts.push_back(path.substr(start, slash - start));
      start = slash + 1;
    }
    auto join_from = [&](std::size_t i) {
      std::string joined;
      for (; i < parts.size(); ++i) joined += (joined.empty() ? "" : "/") + parts[i];
      return percent_decode(joined);
    };
    if (parts.size() == 2 && parts[0] == "api" && parts[1] == "models") {
      // The model search: repositories whose name holds the term, any case.
      std::string term;
      for (std::size_t at = 0; at < query.size();) {
        const auto amp = std::min(query.find('&', at), query.size());
        const std::string pair = query.substr(at, amp - at);
        if (pair.rfind("search=", 0) == 0) term = percent_decode(pair.substr(7));
        at = amp + 1;
      }
      const auto lower = [](std::string t) {
        for (char& ch : t) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        return t;
      };
      std::string body = "[";
      {
        std::lock_guard lock(mutex_);
        for (const auto& [repo, r] : repos_) {
          if (lower(repo).find(lower(term)) == std::string::npos) continue;
          body += std::string(body.size() > 1 ? "," : "") + "{\"id\":\"" + repo +
                  "\",\"downloads\":" + std::to_string(r.files.size() * 100) +
                  ",\"likes\":1,\"pipeline_tag\":\"text-generation\"}";
        }
      }
      send_simple(fd, 200, body + "]");
    } else if (parts.size() >= 6 && parts[0] == "api" && parts[1] == "models" &&
               parts[4] == "tree") {
      serve_tree(fd, request, parts[2] + "/" + parts[3], query);
    } else if (parts.size() >= 5 && parts[2] == "resolve") {
      const std::string repo = parts[0] + "/" + parts[1];
      const std::string file = join_from(4);
      bool lfs = false, known = false;
      {
        std::lock_guard lock(mutex_);
        const auto r = repos_.find(repo);
        if (r != repos_.end() && r->second.files.count(file)) {
          known = true;
          lfs = r->second.files.at(file).lfs;
        }
      }
      if (const int refused = refusal(request, repo, false)) {
        send_refusal(fd, refused);
      } else if (!known || percent_decode(parts[3]) != "main") {
        send_simple(fd, 404, R"({"error":"Entry not found"})", "X-Error-Code: EntryNotFound\r\n");
      } else if (lfs) {
        // Like the Hub: LFS content lives elsewhere, and the client follows the redirect.
        std::string raw_path;
        for (std::size_t i = 4; i < parts.size(); ++i) raw_path += (i > 4 ? "/" : "") + parts[i];
        send_simple(fd, 302, "", "Location: /cdn/" + repo + "/" + raw_path + "\r\n");
      } else {
        serve_file(fd, request, repo, file);
      }
    } else if (parts.size() >= 4 && parts[0] == "cdn") {
      serve_file(fd, request, parts[1] + "/" + parts[2], join_from(3));
    } else {
      send_simple(fd, 404, R"({"error":"no such route"})");
    }
  }
  std::lock_guard lock(mutex_);
  open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
  ::close(fd);
}

void HubFixtureServer::serve_tree(int fd, const Request& request, const std::string& repo,
                                  const std::string& query) {
  {
    std::lock_guard lock(mutex_);
    ++tree_requests_;
  }
  if (const int refused = refusal(request, repo, true)) {
    send_refusal(fd, refused);
    return;
  }
  nlohmann::json entries = nlohmann::json::array();
  int page_size = 0;
  {
    std::lock_guard lock(mutex_);
    const auto r = repos_.find(repo);
    page_size = page_size_;
    if (r != repos_.end()) {
      std::set<std::string> folders;
      for (const auto& [path, f] : r->second.files) {
        for (auto slash = path.find('/'); slash != std::string::npos;
             slash = path.find('/', slash + 1)) {
          folders.insert(path.substr(0, slash));
        }
      }
      for (const auto& folder : folders) {
        entries.push_back(
            {{"type", "directory"}, {"oid", std::string(40, '0')}, {"size", 0}, {"path", folder}});
      }
      for (const auto& [path, f] : r->second.files) {
        const std::uint64_t size = f.listed_size.value_or(f.content.size());
        nlohmann::json e = {{"type", "file"}, {"size", size}, {"path", path}};
        if (f.lfs) {
          const std::string sha = f.listed_sha256.empty()
                                      ? hex_digest(QCryptographicHash::Sha256, "", f.content)
                                      : f.listed_sha256;
          e["oid"] = hex_digest(QCryptographicHash::Sha1, "pointer", sha);
          e["lfs"] = {{"oid", sha}, {"size", size}, {"pointerSize", 134}};
        } else {
          e["oid"] = hex_digest(QCryptographicHash::Sha1,
                                "blob " + std::to_string(f.content.size()) + '\0', f.content);
        }
        entries.push_back(e);
      }
    }
  }
  if (entries.empty()) {
    send_simple(fd, 404, R"({"error":"Repository not found"})", "X-Error-Code: RepoNotFound\r\n");
    return;
  }
  std::size_t cursor = 0;
  const auto c = query.find("cursor=");
  if (c != std::string::npos) cursor = std::stoul(query.substr(c + 7));
  nlohmann::json page = nlohmann::json::array();
  for (std::size_t i = cursor;
       i < entries.size() && i < cursor + static_cast<std::size_t>(page_size); ++i) {
    page.push_back(entries[i]);
  }
  std::string link;
  if (cursor + static_cast<std::size_t>(page_size) < entries.size()) {
    link = "Link: <" + endpoint() + "/api/models/" + repo + "/tree/main?recursive=true&cursor=" +
           std::to_string(cursor + static_cast<std::size_t>(page_size)) + ">; rel=\"next\"\r\n";
  }
  send_simple(fd, 200, page.dump(), link);
}

void HubFixtureServer::serve_file(int fd, const Request& request, const std::string& repo,
                                  const std::string& path) {
  std::string content;
  std::optional<ServerFault> fault;
  {
    std::lock_guard lock(mutex_);
    File& f = repos_[repo].files[path];
    content = f.served.value_or(f.content);
    if (!f.faults.empty()) {
      fault = f.faults.front();
      f.faults.erase(f.faults.begin());
    }
  }
  ServedRequest served{repo, path, 0, false};
  const auto range = request.headers.find("range");
  if (range != request.headers.end() && range->second.rfind("bytes=", 0) == 0) {
    served.had_range = true;
    served.range_start = std::stoull(range->second.substr(6));
  }
  {
    std::lock_guard lock(mutex_);
    requests_[repo + ":" + path].push_back(served);
  }
  if (fault && fault->kind == ServerFault::Kind::Status) {
    send_simple(
        fd, fault->status, R"({"error":"injected"})",
        fault->retry_after.empty() ? std::string() : "Retry-After: " + fault->retry_after + "\r\n");
    return;
  }
  const std::uint64_t size = content.size();
  std::string head;
  std::uint64_t start = served.range_start;
  if (served.had_range && start >= size) {
    send_simple(fd, 416, "", "Content-Range: bytes */" + std::to_string(size) + "\r\n");
    return;
  }
  if (served.had_range) {
    head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " + std::to_string(start) + "-" +
           std::to_string(size - 1) + "/" + std::to_string(size) + "\r\n";
  } else {
    head = "HTTP/1.1 200 OK\r\n";
  }
  head +=
      "Content-Type: application/octet-stream\r\nContent-Length: " + std::to_string(size - start) +
      "\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n";
  if (!send_all(fd, head.data(), head.size(), false)) return;
  std::uint64_t limit = size - start;
  if (fault) limit = std::min(limit, fault->after_bytes);
  // Send in pieces so the byte count is right even when the client hangs up midway.
  std::uint64_t sent = 0;
  while (sent < limit) {
    const std::uint64_t n = std::min<std::uint64_t>(limit - sent, 16384);
    if (!send_all(fd, content.data() + start + sent, n, true)) break;
    sent += n;
    std::lock_guard lock(mutex_);
    bytes_served_[repo + ":" + path] += n;
  }
  if (fault && fault->kind == ServerFault::Kind::Stall) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(fault->stall_ms);
    while (!stopping_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace tandem::test
