// How `tandem download` shows progress: on a terminal, a bar per active file and one for
// the total, redrawn in place; otherwise (a pipe, a log) plain lines now and then.
#pragma once

#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "engine/hub/downloader.h"

namespace tandem::app {

class DownloadProgressPrinter {
 public:
  DownloadProgressPrinter(std::FILE* out, bool terminal);

  void update(const hub::DownloadProgress& progress);
  // Leaves the last drawing on screen and ends the line.
  void finish(const hub::DownloadProgress& progress);

 private:
  void draw_terminal(const hub::DownloadProgress& progress);
  void print_lines(const hub::DownloadProgress& progress, bool force_total);
  void erase_live_block();

  std::FILE* out_;
  bool terminal_;
  int live_lines_ = 0;  // lines of the block that is redrawn
  std::set<std::string> announced_done_;
  std::set<std::string> announced_started_;
  std::set<std::string> announced_problem_;
  std::chrono::steady_clock::time_point last_total_line_{};
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

}  // namespace tandem::app
