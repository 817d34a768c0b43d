#include "engine/measure/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tandem::trace {
namespace {

// Per thread, at most this many spans (about 24 MB): a trace is for a benchmark's few runs.
constexpr std::size_t kMaxEventsPerThread = 1u << 20;

struct Event {
  const char* name;
  std::int64_t begin_ns, end_ns;
};

struct ThreadBuffer {
  int id = 0;
  std::string name;
  std::vector<Event> events;
};

std::atomic<bool> g_enabled{false};
std::atomic<const char*> g_operation{nullptr};
std::atomic<std::int64_t> g_origin_ns{0};

std::mutex& registry_lock() {
  static std::mutex m;
  return m;
}
std::vector<std::shared_ptr<ThreadBuffer>>& registry() {
  static std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  return buffers;
}

// The calling thread's buffer, registered on first use (kept after the thread ends).
ThreadBuffer& this_thread() {
  thread_local std::shared_ptr<ThreadBuffer> mine = [] {
    auto b = std::make_shared<ThreadBuffer>();
    const std::lock_guard lock(registry_lock());
    b->id = static_cast<int>(registry().size()) + 1;
    registry().push_back(b);
    return b;
  }();
  return *mine;
}

// A thread's name in the timeline: the one it was given, else "thread N".
std::string display_name(const ThreadBuffer& b) {
  return b.name.empty() ? "thread " + std::to_string(b.id) : b.name;
}

// A set of spans as disjoint [begin, end) intervals in time order (nested and overlapping
// spans merged).
using Intervals = std::vector<std::pair<std::int64_t, std::int64_t>>;
Intervals merged(std::vector<Event> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const Event& x, const Event& y) { return x.begin_ns < y.begin_ns; });
  Intervals out;
  for (const Event& e : spans) {
    if (!out.empty() && e.begin_ns <= out.back().second)
      out.back().second = std::max(out.back().second, e.end_ns);
    else
      out.emplace_back(e.begin_ns, e.end_ns);
  }
  return out;
}

std::int64_t length(const Intervals& a) {
  std::int64_t n = 0;
  for (const auto& [b, e] : a) n += e - b;
  return n;
}

// The time two sets of disjoint, ordered intervals share.
std::int64_t overlap(const Intervals& a, const Intervals& b) {
  std::int64_t n = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    n += std::max<std::int64_t>(
        0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return n;
}

bool is_worker(const ThreadBuffer& b) {
  return display_name(b).rfind("worker", 0) == 0;
}

// The recording's time: the first span's start to the last one's end on any thread (empty
// when first >= last). The registry lock is held.
std::pair<std::int64_t, std::int64_t> recording_time() {
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& b : registry()) {
    for (const Event& e : b->events) {
      first = std::min(first, e.begin_ns);
      last = std::max(last, e.end_ns);
    }
  }
  return {first, last};
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void start() {
  const std::lock_guard lock(registry_lock());
  for (const auto& b : registry()) b->events.clear();
  g_origin_ns.store(now_ns());
  g_enabled.store(true);
}

void stop() {
  g_enabled.store(false);
}

bool enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

std::size_t event_count() {
  const std::lock_guard lock(registry_lock());
  std::size_t n = 0;
  for (const auto& b : registry()) n += b->events.size();
  return n;
}

void name_thread(const std::string& name) {
  this_thread().name = name;
}

Span::Span(const char* name) : name_(name) {
  if (g_enabled.load(std::memory_order_relaxed)) begin_ns_ = now_ns();
}

Span::~Span() {
  if (begin_ns_ < 0) return;
  ThreadBuffer& b = this_thread();
  if (b.events.size() < kMaxEventsPerThread) b.events.push_back({name_, begin_ns_, now_ns()});
}

Operation::Operation(const char* name)
    : span_(name), previous_(g_operation.exchange(name, std::memory_order_relaxed)) {}

Operation::~Operation() {
  g_operation.store(previous_, std::memory_order_relaxed);
}

const char* current_operation() {
  const char* op = g_operation.load(std::memory_order_relaxed);
  return op != nullptr ? op : "work";
}

std::vector<ThreadShare> busy_shares() {
  const std::lock_guard lock(registry_lock());
  const auto [first, last] = recording_time();
  std::vector<ThreadShare> shares;
  if (last <= first) return shares;
  for (const auto& b : registry()) {
    if (b->events.empty()) continue;
    shares.push_back(
        {display_name(*b), is_worker(*b),
         static_cast<double>(length(merged(b->events))) / static_cast<double>(last - first)});
  }
  return shares;
}

std::vector<OperationShare> operation_shares() {
  const std::lock_guard lock(registry_lock());
  std::vector<Intervals> workers;
  std::vector<std::string> names;
  std::vector<std::vector<Event>> spans_of;  // the operations' spans, by name
  const auto [first, last] = recording_time();
  for (const auto& b : registry()) {
    if (b->events.empty()) continue;
    if (is_worker(*b)) {
      workers.push_back(merged(b->events));
      continue;
    }
    for (const Event& e : b->events) {
      const auto at = std::find(names.begin(), names.end(), e.name);
      if (at == names.end()) {
        names.emplace_back(e.name);
        spans_of.push_back({e});
      } else {
        spans_of[static_cast<std::size_t>(at - names.begin())].push_back(e);
      }
    }
  }
  std::vector<OperationShare> shares;
  if (workers.empty() || last <= first) return shares;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const Intervals op = merged(spans_of[i]);
    const std::int64_t total = length(op);
    if (total <= 0) continue;
    double busy = 0;
    for (const Intervals& w : workers)
      busy += static_cast<double>(overlap(op, w)) / static_cast<double>(total);
    shares.push_back({names[i], static_cast<double>(total) / 1e9,
                      static_cast<double>(total) / static_cast<double>(last - first),
                      busy / static_cast<double>(workers.size())});
  }
  std::sort(shares.begin(), shares.end(),
            [](const OperationShare& a, const OperationShare& b) { return a.seconds > b.seconds; });
  return shares;
}

bool write_chrome_json(const std::string& path, std::string* error) {
  nlohmann::json events = nlohmann::json::array();
  {
    const std::lock_guard lock(registry_lock());
    const std::int64_t origin = g_origin_ns.load();
    for (const auto& b : registry()) {
      if (b->events.empty()) continue;
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", b->id},
                        {"args", {{"name", display_name(*b)}}}});
      for (const Event& e : b->events) {
        events.push_back({{"name", e.name},
                          {"ph", "X"},
                          {"pid", 1},
                          {"tid", b->id},
                          {"ts", static_cast<double>(e.begin_ns - origin) / 1e3},
                          {"dur", static_cast<double>(e.end_ns - e.begin_ns) / 1e3}});
      }
    }
  }
  const nlohmann::json trace = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << trace.dump();
    out.close();
    if (!out) {
      if (error) *error = path + " cannot be written; check the folder exists and is writable.";
      std::remove(temp.c_str());
      return false;
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    if (error) *error = path + " cannot be put in place; check the folder is writable.";
    std::remove(temp.c_str());
    return false;
  }
  return true;
}

}  // namespace tandem::trace
