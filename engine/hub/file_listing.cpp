#include "engine/hub/file_listing.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/hub/http_transfer.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/hub_failure.h"

namespace tandem::hub {

bool is_safe_relative_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string::npos ||
      path.find('\\') != std::string::npos) {
    return false;
  }
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string_view part(path.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::vector<RepoFile> parse_tree_page(const std::string& json) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) {
    throw HubError(
        HubErrorKind::BadResponse,
        "The Hub's file list is not a JSON list; check that the endpoint is the Hugging Face "
        "Hub or a mirror of it.");
  }
  std::vector<RepoFile> files;
  for (const auto& entry : doc) {
    if (!entry.is_object() || entry.value("type", "") != "file") continue;
    RepoFile f;
    const auto path = entry.find("path");
    const auto size = entry.find("size");
    if (path == entry.end() || !path->is_string() || size == entry.end() ||
        !size->is_number_unsigned()) {
      throw HubError(HubErrorKind::BadResponse,
                     "An entry of the Hub's file list has no path or size.");
    }
    f.path = path->get<std::string>();
    f.size = size->get<std::uint64_t>();
    if (!is_safe_relative_path(f.path)) {
      throw HubError(
          HubErrorKind::BadResponse,
          fmt::format("The Hub listed a file named \"{}\", which would be written outside the "
                      "download folder; refusing it.",
                      f.path));
    }
    f.git_oid = entry.value("oid", "");
    const auto lfs = entry.find("lfs");
    if (lfs != entry.end() && lfs->is_object()) {
      f.sha256 = lfs->value("oid", "");
      if (lfs->contains("size") && (*lfs)["size"].is_number_unsigned())
        f.size = (*lfs)["size"].get<std::uint64_t>();
    }
    files.push_back(std::move(f));
  }
  return files;
}

std::string next_page_url(const std::string& link_header, const std::string& endpoint) {
  // Link: <https://huggingface.co/api/models/...?cursor=...>; rel="next", <...>; rel="prev"
  std::size_t pos = 0;
  while ((pos = link_header.find('<', pos)) != std::string::npos) {
    const std::size_t close = link_header.find('>', pos);
    if (close == std::string::npos) break;
    const std::size_t next_entry = link_header.find(',', close);
    const std::string params = link_header.substr(
        close + 1, next_entry == std::string::npos ? std::string::npos : next_entry - close - 1);
    if (params.find("rel=\"next\"") != std::string::npos ||
        params.find("rel=next") != std::string::npos) {
      std::string url = link_header.substr(pos + 1, close - pos - 1);
      if (!url.empty() && url.front() == '/') url = endpoint + url;
      return url;
    }
    pos = close;
  }
  return {};
}

std::vector<RepoFile> list_repo_files(const HubConfig& hub, const std::string& repo,
                                      const std::string& revision,
                                      const std::function<bool()>& should_stop) {
  validate_repo_id(repo);
  if (revision.empty())
    throw HubError(HubErrorKind::InvalidRequest, "The revision is empty; use main or a commit.");
  FailureContext context{&hub, repo, fmt::format("the file list of {} at {}", repo, revision)};
  std::vector<RepoFile> files;
  std::string url = tree_url(hub, repo, revision);
  int failed_attempts = 0;
  while (!url.empty()) {
    std::string body;
    HttpGet get = hub_get(hub, url, should_stop);
    get.on_body = [&body](std::string_view bytes) {
      body.append(bytes);
      return body.size() < (256u << 20);  // a runaway answer is not a file list
    };
    const HttpAnswer answer = http_get(get);
    if (answer.ok()) {
      auto page = parse_tree_page(body);
      files.insert(files.end(), std::make_move_iterator(page.begin()),
                   std::make_move_iterator(page.end()));
      url = next_page_url(answer.header("link"), hub.endpoint);
      failed_attempts = 0;
      continue;
    }
    wait_before_retry(hub, describe_failure(answer, context), answer, ++failed_attempts,
                      should_stop);
  }
  return files;
}

}  // namespace tandem::hub
