#include "engine/log/log.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <cstdio>
#include <filesystem>
#include <mutex>

namespace tandem::log {
namespace {

constexpr std::size_t kLogFileBytes = 4 * 1024 * 1024;
constexpr std::size_t kLogFilesKept = 3;

Level to_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
      return Level::Trace;
    case spdlog::level::debug:
      return Level::Debug;
    case spdlog::level::info:
      return Level::Info;
    case spdlog::level::warn:
      return Level::Warn;
    default:
      return Level::Error;
  }
}

// Hands each record, formatted without the time stamp, to the installed forwarder.
class ForwardingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void set(Forwarder f) {
    std::lock_guard lock(mutex_);
    forwarder_ = std::move(f);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!forwarder_) return;
    forwarder_(to_level(msg.level), std::string_view(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  Forwarder forwarder_;
};

struct State {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> dist =
      std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<ForwardingSink> forward = std::make_shared<ForwardingSink>();
  std::shared_ptr<spdlog::logger> logger;
  std::mutex mutex;
  std::string file;

  State() {
    logger = std::make_shared<spdlog::logger>("tandem", dist);
    logger->set_level(spdlog::level::debug);
    logger->flush_on(spdlog::level::warn);
    auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    console->set_level(spdlog::level::warn);
    console->set_pattern("tandem: %l: %v");
    dist->add_sink(console);
    forward->set_level(spdlog::level::debug);
    dist->add_sink(forward);
  }
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void init(const Options& options) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::vector<spdlog::sink_ptr> sinks;
  if (options.console) {
    auto console = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    console->set_level(options.verbose ? spdlog::level::debug : spdlog::level::warn);
    console->set_pattern(options.verbose ? "[%H:%M:%S.%e] %l: %v" : "tandem: %l: %v");
    sinks.push_back(console);
  }
  s.file.clear();
  if (!options.file_path.empty()) {
    try {
      std::filesystem::create_directories(std::filesystem::path(options.file_path).parent_path());
      auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          options.file_path, kLogFileBytes, kLogFilesKept);
      file->set_level(spdlog::level::debug);
      file->set_pattern("%Y-%m-%d %H:%M:%S.%e [%l] [thread %t] %v");
      sinks.push_back(file);
      s.file = options.file_path;
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "tandem: cannot write the log file %s (%s); logging to the console only\n",
                   options.file_path.c_str(), e.what());
    }
  }
  sinks.push_back(s.forward);
  s.dist->set_sinks(sinks);
}

std::string file_path() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.file;
}

void set_forwarder(Forwarder forwarder) {
  state().forward->set(std::move(forwarder));
}

spdlog::logger& logger() {
  return *state().logger;
}

}  // namespace tandem::log
