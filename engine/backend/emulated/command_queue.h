// An in-order queue of commands run by a thread of its own, with events: how the emulated
// accelerator's compute and copy engines work, as a GPU's streams do. A command that throws
// marks the queue failed; its events still become ready, and waiting on one of them (or
// draining the queue) rethrows, so the host hears of the failure at its next sync point.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/backend/backend.h"

namespace tandem::backend {

class CommandQueue {
 public:
  explicit CommandQueue(std::string name);
  // Runs what is queued, then stops the thread.
  ~CommandQueue();
  CommandQueue(const CommandQueue&) = delete;
  CommandQueue& operator=(const CommandQueue&) = delete;

  void enqueue(std::function<void()> command);
  // Ready once every command enqueued before has run.
  EventPtr record();
  // Commands enqueued after this wait until `event` (of any queue) is ready.
  void wait_for(const EventPtr& event);
  // Returns when every command enqueued before has run; rethrows a command's failure.
  void drain();

 private:
  struct Failure;
  class QueueEvent;
  void run();

  std::string name_;
  std::shared_ptr<Failure> failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> commands_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::backend
