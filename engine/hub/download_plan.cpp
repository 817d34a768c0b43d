#include "engine/hub/download_plan.h"

#include <fmt/format.h>

#include <filesystem>

#include "engine/hub/hub_error.h"
#include "engine/hub/part_file.h"

namespace tandem::hub {

std::uint64_t DownloadPlan::total_bytes() const {
  std::uint64_t sum = 0;
  for (const auto& f : files) sum += f.file.size;
  return sum;
}

std::uint64_t DownloadPlan::bytes_present() const {
  std::uint64_t sum = 0;
  for (const auto& f : files) sum += f.bytes_present;
  return sum;
}

DownloadPlan plan_from_listing(const DownloadRequest& request,
                               const std::vector<RepoFile>& listing) {
  namespace fs = std::filesystem;
  DownloadPlan plan;
  plan.repo = request.repo;
  plan.revision = request.revision;
  plan.destination = request.destination;
  for (const auto& file : listing) {
    if (!request.filter.accepts(file.path)) continue;
    PlannedFile planned;
    planned.file = file;
    const fs::path final_path = fs::path(request.destination) / file.path;
    std::error_code ec;
    const auto final_size = fs::file_size(final_path, ec);
    if (!ec && final_size == file.size) {
      // Only verified files are ever renamed to their final name, so one of the listed size
      // is this file. (A file with the same name and another size is replaced.)
      planned.complete = true;
      planned.bytes_present = file.size;
    } else {
      const auto part_size = fs::file_size(part_path_for(final_path), ec);
      if (!ec && part_size <= file.size) planned.bytes_present = part_size;
    }
    plan.files.push_back(std::move(planned));
  }
  if (plan.files.empty()) {
    throw HubError(
        HubErrorKind::NotFound,
        listing.empty()
            ? fmt::format("{} has no files at revision {}.", request.repo, request.revision)
            : fmt::format("None of the {} files of {} matches the include/exclude patterns; "
                          "check them (for example --include \"*.safetensors\").",
                          listing.size(), request.repo));
  }
  return plan;
}

DownloadPlan plan_download(const HubConfig& hub, const DownloadRequest& request,
                           const std::function<bool()>& should_stop) {
  return plan_from_listing(request,
                           list_repo_files(hub, request.repo, request.revision, should_stop));
}

}  // namespace tandem::hub
