#include "app/load_progress_printer.h"

#include <fmt/format.h>
#include <unistd.h>

#include "app/download_progress_printer.h"

namespace tandem::app {
namespace {

constexpr auto kPipeLineEvery = std::chrono::seconds(5);

double seconds_between(LoadProgressPrinter::Clock::time_point a,
                       LoadProgressPrinter::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

LoadProgressPrinter::LoadProgressPrinter(std::FILE* out, bool terminal)
    : out_(out), terminal_(terminal) {}

void LoadProgressPrinter::update(const model::LoadProgress& p, Clock::time_point now) {
  const std::lock_guard guard(lock_);
  const bool done = p.done >= p.total;
  if (p.stage != stage_) {
    if (!stage_.empty() && terminal_) std::fputc('\n', out_);  // the last stage never ended
    stage_ = p.stage;
    stage_start_ = last_line_ = now;
    if (!terminal_ && !done) std::fprintf(out_, "loading: %s\n", stage_.c_str());
  }
  const double elapsed = seconds_between(stage_start_, now);
  const int percent = p.total == 0 ? 100 : static_cast<int>(100 * p.done / p.total);
  if (done) {
    const std::string line =
        fmt::format("loading: {} 100% ({})", p.stage, format_duration(elapsed));
    std::fprintf(out_, terminal_ ? "\r\x1b[K%s\n" : "%s\n", line.c_str());
    stage_.clear();
  } else if (terminal_ || now - last_line_ >= kPipeLineEvery) {
    last_line_ = now;
    // The time left once a second of the stage has passed, at its pace so far.
    std::string left;
    if (p.done > 0 && elapsed >= 1.0)
      left =
          fmt::format(", {} left", format_duration(elapsed * static_cast<double>(p.total - p.done) /
                                                   static_cast<double>(p.done)));
    const std::string line =
        fmt::format("loading: {} {:>3}% ({} of {}{})", p.stage, percent, p.done, p.total, left);
    std::fprintf(out_, terminal_ ? "\r\x1b[K%s" : "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void LoadProgressPrinter::finish() {
  const std::lock_guard guard(lock_);
  if (!stage_.empty() && terminal_) std::fputc('\n', out_);
  stage_.clear();
  std::fflush(out_);
}

std::function<void(const model::LoadProgress&)> LoadProgressPrinter::callback() {
  return [this](const model::LoadProgress& p) { update(p); };
}

LoadProgressPrinter& stderr_load_progress() {
  static LoadProgressPrinter printer(stderr, ::isatty(fileno(stderr)) == 1);
  return printer;
}

}  // namespace tandem::app
