// What the Hub says about a model repository before anything of it is downloaded: the file
// list with sizes and the model's config.json, both held in memory. Nothing is written to
// disk; the weights are never requested.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/hub/file_listing.h"
#include "engine/hub/glob_match.h"
#include "engine/hub/hub_config.h"

namespace tandem::hub {

struct RepoMetadata {
  std::string repo;
  std::string revision;
  std::vector<RepoFile> files;
  nlohmann::json config;  // the repository's config.json

  // The listed size of the files `filter` accepts (default: every file).
  std::uint64_t bytes(const FileFilter& filter = {}) const;
  std::uint64_t safetensors_bytes() const;
};

// The files a model needs to run: the safetensors weights, the configuration, the tokenizer
// and the chat template. What the setup wizard downloads.
FileFilter model_files_filter();

// Lists the repository, then fetches its config.json (retried per `hub.retry`). Throws
// HubError with a sentence: the Hub's errors as hub_failure.h describes them, NotFound when
// the repository has no config.json (naming its GGUF files when it has those instead,
// unless `gguf_without_config`: then the listing comes back with a null config),
// BadResponse when config.json is not JSON.
RepoMetadata fetch_repo_metadata(const HubConfig& hub, const std::string& repo,
                                 const std::string& revision = "main",
                                 const std::function<bool()>& should_stop = {},
                                 bool gguf_without_config = false);

// The first `bytes` of a repository file (a Range request; from a server that ignores it, the
// transfer is cut off after them), retried per `hub.retry`. A GGUF file's header, say,
// without its weights. Throws HubError.
std::string fetch_file_head(const HubConfig& hub, const std::string& repo,
                            const std::string& revision, const std::string& path,
                            std::uint64_t bytes, const std::function<bool()>& should_stop = {});

// One small file of a repository into memory, retried per `hub.retry`; a file larger than
// `max_bytes` is refused (BadResponse). Throws HubError.
std::string fetch_small_file(const HubConfig& hub, const std::string& repo,
                             const std::string& revision, const std::string& path,
                             std::uint64_t max_bytes,
                             const std::function<bool()>& should_stop = {});

}  // namespace tandem::hub
