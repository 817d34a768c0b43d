// What a download will fetch: the listed files that pass the filter, and how much of each
// is already on disk (complete files, and .part files from an earlier run).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/hub/file_listing.h"
#include "engine/hub/glob_match.h"
#include "engine/hub/hub_config.h"

namespace tandem::hub {

struct DownloadRequest {
  std::string repo;  // ORG/NAME
  std::string revision = "main";
  FileFilter filter;
  std::string destination;  // the folder the repository's files go into
};

struct PlannedFile {
  RepoFile file;
  std::uint64_t bytes_present = 0;  // of the final file or its .part
  bool complete = false;            // the final file is there with the listed size
};

struct DownloadPlan {
  std::string repo;
  std::string revision;
  std::string destination;
  std::vector<PlannedFile> files;

  std::uint64_t total_bytes() const;
  std::uint64_t bytes_present() const;
  std::uint64_t bytes_to_fetch() const { return total_bytes() - bytes_present(); }
};

// Lists the repository and builds the plan. Throws HubError, including NotFound when no
// file passes the filter.
DownloadPlan plan_download(const HubConfig& hub, const DownloadRequest& request,
                           const std::function<bool()>& should_stop = {});

// The plan for an already fetched listing: filters and looks at the destination folder.
DownloadPlan plan_from_listing(const DownloadRequest& request,
                               const std::vector<RepoFile>& listing);

}  // namespace tandem::hub
