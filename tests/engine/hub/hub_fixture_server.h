// A stand-in for the Hugging Face Hub on 127.0.0.1, for tests: the tree API (paginated
// with Link headers), the resolve route (LFS files redirect to a "CDN" route, as the Hub
// does) with Range support, gated repositories, and faults injected per file. Plain
// sockets on its own threads, so it also serves while a test blocks or runs a process.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace tandem::test {

struct ServerFault {
  enum class Kind { Drop, Status, Stall };
  Kind kind = Kind::Drop;
  std::uint64_t after_bytes = 0;  // Drop/Stall: body bytes sent first
  int status = 500;               // Status
  std::string retry_after;        // Status: the Retry-After header, when not empty
  int stall_ms = 0;               // Stall: then the connection closes

  static ServerFault drop_after(std::uint64_t bytes) { return {Kind::Drop, bytes}; }
  static ServerFault status_code(int code, std::string retry_after = {}) {
    return {Kind::Status, 0, code, std::move(retry_after)};
  }
  static ServerFault stall_after(std::uint64_t bytes, int ms) {
    return {Kind::Stall, bytes, 0, {}, ms};
  }
};

struct ServedRequest {
  std::string repo;
  std::string path;
  std::uint64_t range_start = 0;  // 0 without a Range header
  bool had_range = false;
};

class HubFixtureServer {
 public:
  HubFixtureServer();  // listens on 127.0.0.1, on a port the system picks
  ~HubFixtureServer();

  std::string endpoint() const;  // http://127.0.0.1:PORT

  void add_file(const std::string& repo, const std::string& path, const std::string& content,
                bool lfs = true);
  // Serves the file at `local` (a committed fixture) as `path`, as LFS.
  void add_file_from(const std::string& repo, const std::string& path, const std::string& local);
  // Requests without the token are refused with 401, with another token with 403, as the
  // Hub refuses them. `listing_public`: the file list is served to anyone (the Hub lists a
  // gated repository's files; only their contents need the licence).
  void set_gated(const std::string& repo, const std::string& token, bool listing_public = false);
  // A model repository as the Hub lists it: config.json and tokenizer.json (in git) and
  // `shards` safetensors files (LFS) whose listed sizes add up to `weight_bytes`. Their
  // contents are a few bytes: a test of planning must never fetch them.
  void add_model_repo(const std::string& repo, const std::string& config_json,
                      std::uint64_t weight_bytes, int shards);
  void set_page_size(int entries);
  // The listing says one thing, the file route serves another.
  void set_listed_sha256(const std::string& repo, const std::string& path,
                         const std::string& sha256);
  void set_listed_size(const std::string& repo, const std::string& path, std::uint64_t size);
  void set_served_content(const std::string& repo, const std::string& path,
                          const std::string& content);
  // Faults are used up one per request for that file, in order.
  void push_fault(const std::string& repo, const std::string& path, const ServerFault& fault);
  void set_throttle(std::uint64_t bytes_per_s);  // 0: as fast as possible
  // Every answer waits this long first (a slow Hub, for tests of who waits on it).
  void set_answer_delay_ms(int ms);

  std::uint64_t bytes_served(const std::string& repo, const std::string& path) const;
  std::vector<ServedRequest> file_requests(const std::string& repo, const std::string& path) const;
  int tree_requests() const;
  // Connections still being served; a client that went away leaves one until the next write fails.
  int open_connections() const;
  void reset_counters();

 private:
  struct File {
    std::string content;
    std::optional<std::string> served;
    bool lfs = true;
    std::string listed_sha256;
    std::optional<std::uint64_t> listed_size;
    std::vector<ServerFault> faults;
  };
  struct Repo {
    std::map<std::string, File> files;
    std::string token;
    bool listing_public = false;
  };
  struct Request {
    std::string method, target;
    std::map<std::string, std::string> headers;
  };

  void accept_loop();
  void serve(int fd);
  void serve_tree(int fd, const Request& request, const std::string& repo,
                  const std::string& query);
  void serve_file(int fd, const Request& request, const std::string& repo, const std::string& path);
  // 0 when the request may have the repository's files, else the status refusing it.
  int refusal(const Request& request, const std::string& repo, bool listing) const;
  void send_refusal(int fd, int status);
  bool send_all(int fd, const char* data, std::size_t size, bool throttled);
  void send_simple(int fd, int status, const std::string& body,
                   const std::string& extra_headers = {});

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;  // guards everything below
  std::vector<std::thread> connections_;
  std::vector<int> open_fds_;
  std::map<std::string, Repo> repos_;
  int page_size_ = 1000;
  std::uint64_t throttle_bytes_per_s_ = 0;
  int answer_delay_ms_ = 0;
  std::map<std::string, std::uint64_t> bytes_served_;  // "repo:path"
  std::map<std::string, std::vector<ServedRequest>> requests_;
  int tree_requests_ = 0;
};

// The repository the fixture tests serve, and deterministic pseudo-random file contents.
inline const std::string kFixtureRepo = "tandem-test/tiny-moe";
inline std::string random_bytes(std::size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(size, '\0');
  for (auto& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

}  // namespace tandem::test
