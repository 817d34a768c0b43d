// A timeline of what every thread does, for `tandem bench --trace FILE`: spans (a name, the
// thread, start and duration) recorded while tracing is on, written in the Chrome trace
// format that chrome://tracing and ui.perfetto.dev open. The engine's thread records each
// backend operation; every worker records its share of each parallel loop under the name of
// the operation that started it, so idle gaps between them show. Off, a span costs one
// relaxed atomic load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::trace {

// Clears what was recorded and starts recording; stop() ends it. Call both while no parallel
// loop runs (the buffers are written by their threads without locks).
void start();
void stop();
bool enabled();
std::size_t event_count();
// Writes what was recorded; false, with a sentence in `error`, when it cannot be written.
bool write_chrome_json(const std::string& path, std::string* error);
// Each recording thread's share of the recording spent inside its spans (nested ones counted
// once), over the time from the first span's start to the last one's end on any thread. A
// worker's spans are its shares of the loops, so the rest is time it waited or was not
// scheduled; the engine thread's operations include its own waits for the workers.
struct ThreadShare {
  std::string name;
  bool worker = false;  // a pool's worker ("worker N"), not a thread that runs operations
  double busy = 0;      // 0 to 1
};
std::vector<ThreadShare> busy_shares();
// Per operation (the spans of the threads that are not workers, "worker N", by name; a name's
// nested or repeated spans counted once): its time, its share of the recording, and the
// workers' mean share of that time spent inside their spans, which is where the idle share
// of busy_shares() lies. Longest first; none without workers.
struct OperationShare {
  std::string name;
  double seconds = 0;
  double share = 0;         // of the recording, 0 to 1
  double workers_busy = 0;  // 0 to 1
};
std::vector<OperationShare> operation_shares();
// Names the calling thread in the timeline ("engine", "worker 3"); unnamed threads are
// "thread N".
void name_thread(const std::string& name);

// A span on the calling thread, from construction to destruction. `name` must outlive the
// recording (a literal, or __func__).
class Span {
 public:
  explicit Span(const char* name);
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  std::int64_t begin_ns_ = -1;  // -1: not recording
};

// A span that also names the operation running now, which the workers' spans take.
class Operation {
 public:
  explicit Operation(const char* name);
  ~Operation();
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

 private:
  Span span_;
  const char* previous_;
};

// The name of the operation running now ("work" outside any).
const char* current_operation();

}  // namespace tandem::trace
