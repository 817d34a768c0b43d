// Fetches a DownloadPlan: several files at once, each with HTTP Range into FILE.part,
// resuming what an earlier run left, retrying transient failures with exponential backoff,
// verifying each file's published digest before renaming it into place. Pause, resume and
// cancel are cooperative and take effect within about 50 ms.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/hub/download_plan.h"
#include "engine/hub/hub_config.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/part_file.h"
#include "engine/hub/transfer_rate.h"

namespace tandem::hub {

enum class FileState {
  Queued,
  Downloading,
  Verifying,
  Waiting,  // before another attempt; `error` says why
  Paused,
  Done,
  Failed,
  Cancelled,
};
const char* file_state_name(FileState state);

struct FileProgress {
  std::string path;
  std::uint64_t size = 0;
  std::uint64_t bytes_done = 0;
  double bytes_per_s = 0;
  FileState state = FileState::Queued;
  int failed_attempts = 0;
  std::string error;  // the last failure's sentence (also while Waiting)
  std::optional<HubErrorKind> error_kind;
};

struct DownloadProgress {
  std::vector<FileProgress> files;
  std::uint64_t bytes_done = 0;
  std::uint64_t bytes_total = 0;
  double bytes_per_s = 0;       // over the last few seconds
  std::optional<double> eta_s;  // none while nothing moves
  bool paused = false;
};

struct DownloadOptions {
  HubConfig hub;
  int parallel_files = 4;
  int progress_interval_ms = 250;
  PartFileOpener open_part_file = hub::open_part_file;
  // Called on the thread that runs run(), every progress_interval_ms and once at the end.
  std::function<void(const DownloadProgress&)> on_progress;
};

enum class DownloadOutcome { Completed, Failed, Cancelled };

struct DownloadResult {
  DownloadOutcome outcome = DownloadOutcome::Failed;
  DownloadProgress progress;  // the final state of every file
  std::string message;        // for Failed: the first failure's sentence
  std::optional<HubErrorKind> error_kind;
};

class Downloader {
 public:
  Downloader(DownloadPlan plan, DownloadOptions options);
  ~Downloader();
  Downloader(const Downloader&) = delete;
  Downloader& operator=(const Downloader&) = delete;

  // Downloads every file of the plan; blocks until all are done, failed or cancelled.
  DownloadResult run();

  // Thread-safe; callable from any thread (not from a signal handler).
  void pause();
  void resume();
  void cancel();
  bool paused() const { return paused_.load(); }

 private:
  struct Slot;
  void work();
  void fetch(Slot& slot);
  void set_state(Slot& slot, FileState state, const std::string& error = {},
                 std::optional<HubErrorKind> kind = std::nullopt);
  bool wait_while_paused(Slot& slot);  // false when cancelled
  bool sleep_unless_cancelled(std::int64_t ms);
  DownloadProgress snapshot();

  DownloadPlan plan_;
  DownloadOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<std::size_t> next_slot_{0};
  std::atomic<bool> paused_{false};
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;  // guards every Slot's state, error and speed meter, and what follows
  std::condition_variable wake_;
  int workers_left_ = 0;
  TransferRate total_rate_;
};

}  // namespace tandem::hub
