// How the commands that load a model (run, chat, bench, perplexity, serve) show the load on
// stderr, since a large model reads and packs its weights for minutes: on a terminal, a line
// per stage redrawn in place with its percent and the time left; otherwise (a pipe, a log) a
// line as each stage starts, its percent every few seconds, and a line as it ends.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

#include "engine/model/loaded_model.h"

namespace tandem::app {

class LoadProgressPrinter {
 public:
  using Clock = std::chrono::steady_clock;

  LoadProgressPrinter(std::FILE* out, bool terminal);

  // A stage's progress, from the loading threads (one report at a time); `now` for tests.
  void update(const model::LoadProgress& progress, Clock::time_point now = Clock::now());
  // Ends a stage's line left open (a load that failed part way); nothing if none is.
  void finish();

  // For LoadOptions::on_progress: reports go to this printer.
  std::function<void(const model::LoadProgress&)> callback();

 private:
  std::FILE* out_;
  bool terminal_;
  std::mutex lock_;
  std::string stage_;  // the stage whose line is open; empty when none is
  Clock::time_point stage_start_{}, last_line_{};
};

// The usual printer of a command: on stderr, redrawn in place when stderr is a terminal.
LoadProgressPrinter& stderr_load_progress();

}  // namespace tandem::app
