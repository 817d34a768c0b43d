#pragma once

#include <string>
#include <vector>

namespace tandem::app {

struct DownloadCommandOptions {
  std::string repo;  // ORG/NAME
  std::string revision = "main";
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  std::string dir;  // empty: the models folder's ORG/NAME
  int parallel = 4;
};

// Exit statuses of `tandem download`, also listed in its --help.
enum DownloadExit : int {
  kDownloadDone = 0,
  kDownloadFailed = 1,        // network, server or verification failure (resumable)
  kDownloadBadRequest = 2,    // a repository name, revision or pattern that matches nothing
  kDownloadNoSpace = 3,       // not enough free disk space, or the disk filled up
  kDownloadAuthRequired = 4,  // gated or private repository: licence and token needed
  kDownloadCancelled = 130,   // Ctrl-C; the .part files stay for a resume
};

int run_download(const DownloadCommandOptions& options);

}  // namespace tandem::app
