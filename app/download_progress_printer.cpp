#include "app/download_progress_printer.h"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "engine/hw/hardware_report.h"

namespace tandem::app {
namespace {

int terminal_width(std::FILE* out) {
  winsize size{};
  if (::ioctl(fileno(out), TIOCGWINSZ, &size) == 0 && size.ws_col >= 40) return size.ws_col;
  return 80;
}

std::string bar(double fraction, int width) {
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(std::floor(fraction * width));
  std::string s(static_cast<std::size_t>(filled), '=');
  if (filled < width) s += '>';
  s.resize(static_cast<std::size_t>(width), ' ');
  return "[" + s + "]";
}

double fraction_of(std::uint64_t done, std::uint64_t total) {
  return total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total);
}

std::string speed_text(double bytes_per_s) {
  return bytes_per_s > 0 ? hw::format_bytes(static_cast<std::uint64_t>(bytes_per_s)) + "/s" : "-";
}

std::string shorten(const std::string& name, std::size_t width) {
  if (name.size() <= width) return name + std::string(width - name.size(), ' ');
  return "..." + name.substr(name.size() - (width - 3));
}

bool is_active(hub::FileState s) {
  return s == hub::FileState::Downloading || s == hub::FileState::Verifying ||
         s == hub::FileState::Waiting || s == hub::FileState::Paused;
}

}  // namespace

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

DownloadProgressPrinter::DownloadProgressPrinter(std::FILE* out, bool terminal)
    : out_(out), terminal_(terminal) {}

void DownloadProgressPrinter::update(const hub::DownloadProgress& progress) {
  if (terminal_) {
    draw_terminal(progress);
  } else {
    print_lines(progress, false);
  }
}

void DownloadProgressPrinter::finish(const hub::DownloadProgress& progress) {
  if (terminal_) {
    draw_terminal(progress);
    live_lines_ = 0;  // what is on screen stays
  } else {
    print_lines(progress, true);
  }
  std::fflush(out_);
}

void DownloadProgressPrinter::erase_live_block() {
  // Up to the first line of the block, then clear to the end of the screen.
  if (live_lines_ > 0) std::fprintf(out_, "\r\x1b[%dA\x1b[J", live_lines_);
  live_lines_ = 0;
}

void DownloadProgressPrinter::draw_terminal(const hub::DownloadProgress& progress) {
  const int width = terminal_width(out_);
  erase_live_block();
  // Finished and failed files get a permanent line above the live block.
  for (const auto& f : progress.files) {
    if (f.state == hub::FileState::Done && announced_done_.insert(f.path).second) {
      std::fprintf(out_, "  done     %s (%s, verified)\n", f.path.c_str(),
                   hw::format_bytes(f.size).c_str());
    } else if (f.state == hub::FileState::Failed && announced_problem_.insert(f.path).second) {
      std::fprintf(out_, "  FAILED   %s: %s\n", f.path.c_str(), f.error.c_str());
    }
  }
  const std::size_t done_files =
      std::count_if(progress.files.begin(), progress.files.end(),
                    [](const auto& f) { return f.state == hub::FileState::Done; });
  const double total_fraction = fraction_of(progress.bytes_done, progress.bytes_total);
  const std::string total_tail = fmt::format(
      "{:>3.0f}% {} of {}  {}  ETA {}{}", 100 * total_fraction,
      hw::format_bytes(progress.bytes_done), hw::format_bytes(progress.bytes_total),
      speed_text(progress.bytes_per_s), progress.eta_s ? format_duration(*progress.eta_s) : "-",
      progress.paused ? "  (paused)" : "");
  // The total line has the longest tail; the bars are as wide as it leaves room for, and
  // names give way before the bars shrink below a readable width.
  const int room = width - 1 - 2 - 1 - 2 - 1 - static_cast<int>(total_tail.size());
  int name_width = std::clamp(width / 3, 12, 40);
  const int bar_width = std::clamp(room - name_width, 10, 40);
  if (room - name_width < 10) name_width = std::max(12, room - bar_width);
  auto line = [&](const std::string& name, double fraction, const std::string& tail) {
    const std::string text =
        fmt::format("  {} {} {}", shorten(name, static_cast<std::size_t>(name_width)),
                    bar(fraction, bar_width), tail);
    std::fprintf(out_, "%s\n", text.substr(0, static_cast<std::size_t>(width - 1)).c_str());
    ++live_lines_;
  };
  for (const auto& f : progress.files) {
    if (!is_active(f.state)) continue;
    const double fraction = fraction_of(f.bytes_done, f.size);
    line(f.path, fraction,
         fmt::format("{:>3.0f}% {:>10} {}", 100 * fraction, hw::format_bytes(f.bytes_done),
                     f.state == hub::FileState::Downloading
                         ? speed_text(f.bytes_per_s)
                         : std::string(hub::file_state_name(f.state))));
  }
  line(fmt::format("total ({}/{} files)", done_files, progress.files.size()), total_fraction,
       total_tail);
  std::fflush(out_);
}

void DownloadProgressPrinter::print_lines(const hub::DownloadProgress& progress, bool force_total) {
  for (const auto& f : progress.files) {
    if (f.state == hub::FileState::Downloading && f.bytes_done < f.size &&
        announced_started_.insert(f.path).second) {
      std::fprintf(out_, "start %s (%s of %s already here)\n", f.path.c_str(),
                   hw::format_bytes(f.bytes_done).c_str(), hw::format_bytes(f.size).c_str());
    }
    if (f.state == hub::FileState::Done && announced_done_.insert(f.path).second) {
      std::fprintf(out_, "done %s (%s, verified)\n", f.path.c_str(),
                   hw::format_bytes(f.size).c_str());
    }
    if ((f.state == hub::FileState::Failed || f.state == hub::FileState::Waiting) &&
        announced_problem_.insert(f.path + "#" + std::to_string(f.failed_attempts) + f.error)
            .second) {
      std::fprintf(out_, "%s %s: %s\n", f.state == hub::FileState::Failed ? "failed" : "retrying",
                   f.path.c_str(), f.error.c_str());
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (force_total || now - last_total_line_ >= std::chrono::seconds(2)) {
    last_total_line_ = now;
    std::fprintf(out_, "progress %.0f%% %s of %s, %s, ETA %s\n",
                 100 * fraction_of(progress.bytes_done, progress.bytes_total),
                 hw::format_bytes(progress.bytes_done).c_str(),
                 hw::format_bytes(progress.bytes_total).c_str(),
                 speed_text(progress.bytes_per_s).c_str(),
                 progress.eta_s ? format_duration(*progress.eta_s).c_str() : "-");
  }
  std::fflush(out_);
}

}  // namespace tandem::app
