#include "app/download_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "app/download_progress_printer.h"
#include "engine/hub/download_plan.h"
#include "engine/hub/downloader.h"
#include "engine/hub/hub_error.h"
#include "engine/hub/preflight.h"
#include "engine/hw/hardware_report.h"
#include "engine/log/log.h"

namespace tandem::app {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_download_interrupt(int) {
  g_interrupted.store(true);
}

int exit_status_for(hub::HubErrorKind kind) {
  switch (kind) {
    case hub::HubErrorKind::InvalidRequest:
    case hub::HubErrorKind::NotFound:
      return kDownloadBadRequest;
    case hub::HubErrorKind::AuthRequired:
      return kDownloadAuthRequired;
    case hub::HubErrorKind::DiskFull:
    case hub::HubErrorKind::NotEnoughSpace:
      return kDownloadNoSpace;
    case hub::HubErrorKind::Cancelled:
      return kDownloadCancelled;
    default:
      return kDownloadFailed;
  }
}

// Restores the default Ctrl-C behaviour however the command ends.
struct InterruptGuard {
  InterruptGuard() {
    g_interrupted = false;
    std::signal(SIGINT, on_download_interrupt);
    std::signal(SIGTERM, on_download_interrupt);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
  }
};

}  // namespace

int run_download(const DownloadCommandOptions& o) {
  InterruptGuard interrupt_guard;
  const hub::HubConfig hub = hub::hub_config_from("", "");
  auto interrupted = [] { return g_interrupted.load(); };

  hub::DownloadRequest request;
  request.repo = o.repo;
  request.revision = o.revision;
  request.filter.include = o.include;
  request.filter.exclude = o.exclude;
  request.destination = o.dir;

  hub::DownloadPlan plan;
  try {
    std::printf("Listing the files of %s at %s on %s\n", o.repo.c_str(), o.revision.c_str(),
                hub.endpoint.c_str());
    std::fflush(stdout);
    plan = hub::plan_download(hub, request, interrupted);
  } catch (const hub::HubError& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return exit_status_for(e.kind());
  }

  const hub::Preflight preflight = hub::run_preflight(plan);
  std::size_t complete = 0;
  for (const auto& f : plan.files) complete += f.complete ? 1 : 0;
  std::printf("%zu files, %s in all; %zu already complete, %s to download into %s\n",
              plan.files.size(), hw::format_bytes(plan.total_bytes()).c_str(), complete,
              hw::format_bytes(plan.bytes_to_fetch()).c_str(), plan.destination.c_str());
  if (!preflight.may_start()) {
    std::fprintf(stderr, "tandem: %s\n", preflight.space.message.c_str());
    return kDownloadNoSpace;
  }
  if (preflight.memory && !preflight.memory->fits) {
    std::fprintf(stderr, "tandem: warning: %s\n", preflight.memory->message.c_str());
  }
  std::fflush(stdout);

  const bool terminal = ::isatty(STDOUT_FILENO) == 1;
  DownloadProgressPrinter printer(stdout, terminal);
  hub::DownloadOptions options;
  options.hub = hub;
  options.parallel_files = o.parallel;
  options.progress_interval_ms = terminal ? 200 : 250;
  hub::Downloader* running = nullptr;
  options.on_progress = [&](const hub::DownloadProgress& p) {
    // The signal handler only sets a flag; the downloader is told here, off the handler.
    if (g_interrupted && running != nullptr) running->cancel();
    printer.update(p);
  };
  hub::Downloader downloader(plan, options);
  running = &downloader;
  const hub::DownloadResult result = downloader.run();
  printer.finish(result.progress);

  switch (result.outcome) {
    case hub::DownloadOutcome::Completed:
      std::printf("Done: %s\n", result.message.c_str());
      return kDownloadDone;
    case hub::DownloadOutcome::Cancelled:
      std::fprintf(
          stderr,
          "tandem: download cancelled; the partial files are kept. Run the same command again to "
          "resume where it stopped.\n");
      return kDownloadCancelled;
    case hub::DownloadOutcome::Failed:
      break;
  }
  const auto failed =
      std::count_if(result.progress.files.begin(), result.progress.files.end(),
                    [](const auto& f) { return f.state == hub::FileState::Failed; });
  std::fprintf(stderr, "tandem: %td of %zu files failed. %s\n", failed,
               result.progress.files.size(), result.message.c_str());
  return exit_status_for(result.error_kind.value_or(hub::HubErrorKind::Network));
}

}  // namespace tandem::app
