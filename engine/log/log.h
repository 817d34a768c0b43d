// The one logging path of Tandem. The engine logs through spdlog; the log file, the console
// and (in the desktop app) Qt's logging all receive the same records.
#pragma once

#include <spdlog/spdlog.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tandem::log {

enum class Level { Trace, Debug, Info, Warn, Error };

struct Options {
  std::string file_path;  // empty: no log file
  bool verbose = false;   // debug records to the console too
  bool console = true;    // warnings and errors (or everything when verbose) to stderr
};

// Configures the sinks; safe to call again (tests do). Throws nothing: a log file that
// cannot be opened is reported on stderr and logging continues without it.
void init(const Options& options);

// The path of the log file in use, empty when none.
std::string file_path();

// Receives every record (the desktop app routes them into Qt's log). Pass {} to remove.
using Forwarder = std::function<void(Level level, std::string_view message)>;
void set_forwarder(Forwarder forwarder);

// The shared logger; its records go to every configured sink.
spdlog::logger& logger();

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  logger().debug(f, std::forward<Args>(args)...);
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  logger().info(f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  logger().warn(f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  logger().error(f, std::forward<Args>(args)...);
}

}  // namespace tandem::log
