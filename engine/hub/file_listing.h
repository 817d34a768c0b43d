// The files of a repository at a revision, from the Hub's tree API.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/hub/hub_config.h"

namespace tandem::hub {

struct RepoFile {
  std::string path;  // relative, '/'-separated
  std::uint64_t size = 0;
  std::string sha256;   // LFS files: sha256 of the content
  std::string git_oid;  // the git blob id; the digest of files stored in git itself

  bool is_lfs() const { return !sha256.empty(); }
};

// Lists every file (recursively) and follows the Link header's pages. Retries transient
// failures per `hub.retry`; throws HubError. `should_stop` makes it give up promptly.
std::vector<RepoFile> list_repo_files(const HubConfig& hub, const std::string& repo,
                                      const std::string& revision,
                                      const std::function<bool()>& should_stop = {});

// The tree API's JSON (one page) as files; directories are skipped. Throws HubError on
// JSON that is not a list of entries or on a path that would leave the download folder.
std::vector<RepoFile> parse_tree_page(const std::string& json);

// The URL of the next page from a Link header, empty when this was the last page.
std::string next_page_url(const std::string& link_header, const std::string& endpoint);

// A path from the server that stays inside the folder it is written to.
bool is_safe_relative_path(const std::string& path);

}  // namespace tandem::hub
