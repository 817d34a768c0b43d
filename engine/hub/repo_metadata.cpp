#include "engine/hub/repo_metadata.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/hub_failure.h"

namespace tandem::hub {
namespace {

constexpr std::uint64_t kConfigLimitBytes = 4u << 20;  // configs are a few KB

bool ends_with(std::string_view text, std::string_view tail) {
  return text.size() >= tail.size() && text.substr(text.size() - tail.size()) == tail;
}

HubError no_config(const HubConfig& hub, const std::string& repo,
                   const std::vector<RepoFile>& files) {
  std::vector<std::string> gguf;
  for (const RepoFile& f : files) {
    if (ends_with(f.path, ".gguf")) gguf.push_back(f.path);
  }
  if (!gguf.empty()) {
    std::string some;
    for (std::size_t i = 0; i < std::min<std::size_t>(3, gguf.size()); ++i)
      some += (i ? ", " : "") + gguf[i];
    if (gguf.size() > 3) some += fmt::format(" and {} more", gguf.size() - 3);
    return HubError(HubErrorKind::NotFound,
                    fmt::format("{} on {} has no config.json but GGUF files ({}). Download the "
                                "one you want (tandem download {} --include FILE) and give that "
                                ".gguf file instead of the repository.",
                                repo, hub.endpoint, some, repo));
  }
  return HubError(HubErrorKind::NotFound,
                  fmt::format("{} on {} has no config.json, so it is not a model Tandem can read "
                              "(it needs config.json and safetensors files, as transformers "
                              "saves them).",
                              repo, hub.endpoint));
}

}  // namespace

std::uint64_t RepoMetadata::bytes(const FileFilter& filter) const {
  std::uint64_t total = 0;
  for (const RepoFile& f : files) total += filter.accepts(f.path) ? f.size : 0;
  return total;
}

std::uint64_t RepoMetadata::safetensors_bytes() const {
  return bytes(FileFilter{{"*.safetensors"}, {}});
}

FileFilter model_files_filter() {
  return {{"*.safetensors", "*.json", "*.jinja", "*.txt", "*.model"}, {}};
}

std::string fetch_small_file(const HubConfig& hub, const std::string& repo,
                             const std::string& revision, const std::string& path,
                             std::uint64_t max_bytes, const std::function<bool()>& should_stop) {
  validate_repo_id(repo);
  const FailureContext context{&hub, repo, fmt::format("{} of {}", path, repo)};
  int failed_attempts = 0;
  for (;;) {
    std::string body;
    bool too_large = false;
    HttpGet get = hub_get(hub, resolve_url(hub, repo, revision, path), should_stop);
    get.on_body = [&](std::string_view bytes) {
      body.append(bytes);
      too_large = body.size() > max_bytes;
      return !too_large;
    };
    const HttpAnswer answer = http_get(get);
    if (too_large) {
      throw HubError(HubErrorKind::BadResponse,
                     fmt::format("{} on {} is larger than {} bytes, which no {} is; check that "
                                 "the endpoint is the Hugging Face Hub or a mirror of it.",
                                 context.what, hub.endpoint, max_bytes, path));
    }
    if (answer.ok()) return body;
    wait_before_retry(hub, describe_failure(answer, context), answer, ++failed_attempts,
                      should_stop);
  }
}

std::string fetch_file_head(const HubConfig& hub, const std::string& repo,
                            const std::string& revision, const std::string& path,
                            std::uint64_t bytes, const std::function<bool()>& should_stop) {
  validate_repo_id(repo);
  const FailureContext context{&hub, repo, fmt::format("the start of {} of {}", path, repo)};
  int failed_attempts = 0;
  for (;;) {
    std::string body;
    HttpGet get = hub_get(hub, resolve_url(hub, repo, revision, path), should_stop);
    get.headers.push_back(fmt::format("Range: bytes=0-{}", bytes - 1));
    get.on_body = [&](std::string_view chunk) {
      body.append(chunk.substr(0, static_cast<std::size_t>(bytes) - body.size()));
      return body.size() < bytes;  // enough: stop a server that sends the whole file
    };
    const HttpAnswer answer = http_get(get);
    if (answer.ok() || (answer.failure == HttpAnswer::Failure::Aborted && body.size() == bytes))
      return body;
    wait_before_retry(hub, describe_failure(answer, context), answer, ++failed_attempts,
                      should_stop);
  }
}

RepoMetadata fetch_repo_metadata(const HubConfig& hub, const std::string& repo,
                                 const std::string& revision,
                                 const std::function<bool()>& should_stop,
                                 bool gguf_without_config) {
  RepoMetadata m;
  m.repo = repo;
  m.revision = revision;
  try {
    m.files = list_repo_files(hub, repo, revision, should_stop);
  } catch (const HubError& e) {
    // The listing is the first request: its failures say whether the repository exists and
    // whether the Hub can be reached at all, in words about the repository, not a download.
    if (e.kind() == HubErrorKind::NotFound) {
      throw HubError(HubErrorKind::NotFound,
                     fmt::format("There is no repository {} on {}. Check its name as the "
                                 "address of its model page writes it ({}/ORGANISATION/MODEL); "
                                 "a private repository also needs a token (HF_TOKEN).",
                                 repo, hub.endpoint, hub.endpoint));
    }
    if (e.kind() == HubErrorKind::Network || e.kind() == HubErrorKind::Stalled) {
      throw HubError(e.kind(),
                     fmt::format("{} could not be reached to read the files of {} ({}). Check "
                                 "the network connection and the proxy (https_proxy), or set "
                                 "HF_ENDPOINT to a mirror.",
                                 hub.endpoint, repo, e.detail()),
                     e.detail());
    }
    throw;
  }
  const bool listed = std::any_of(m.files.begin(), m.files.end(),
                                  [](const RepoFile& f) { return f.path == "config.json"; });
  if (!listed) {
    const bool gguf = std::any_of(m.files.begin(), m.files.end(),
                                  [](const RepoFile& f) { return ends_with(f.path, ".gguf"); });
    if (gguf && gguf_without_config) return m;
    throw no_config(hub, repo, m.files);
  }
  const std::string text =
      fetch_small_file(hub, repo, revision, "config.json", kConfigLimitBytes, should_stop);
  m.config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!m.config.is_object()) {
    throw HubError(HubErrorKind::BadResponse,
                   fmt::format("The config.json of {} on {} is not a JSON object, so the model "
                               "cannot be planned from it.",
                               repo, hub.endpoint));
  }
  return m;
}

}  // namespace tandem::hub
