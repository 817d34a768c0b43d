#include "engine/backend/emulated/command_queue.h"

#include <pthread.h>

#include "engine/log/log.h"

namespace tandem::backend {

struct CommandQueue::Failure {
  std::mutex mutex;
  std::exception_ptr error;
  void rethrow() {
    const std::lock_guard lock(mutex);
    if (error) std::rethrow_exception(error);
  }
};

class CommandQueue::QueueEvent : public Event {
 public:
  explicit QueueEvent(std::shared_ptr<Failure> failure) : failure_(std::move(failure)) {}
  bool ready() const override {
    const std::lock_guard lock(mutex_);
    return done_;
  }
  void wait() const override {
    {
      std::unique_lock lock(mutex_);
      done_changed_.wait(lock, [this] { return done_; });
    }
    failure_->rethrow();
  }
  void signal() {
    {
      const std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_changed_.notify_all();
  }

 private:
  std::shared_ptr<Failure> failure_;
  mutable std::mutex mutex_;
  mutable std::condition_variable done_changed_;
  bool done_ = false;
};

CommandQueue::CommandQueue(std::string name)
    : name_(std::move(name)), failure_(std::make_shared<Failure>()), thread_([this] { run(); }) {}

CommandQueue::~CommandQueue() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void CommandQueue::enqueue(std::function<void()> command) {
  {
    const std::lock_guard lock(mutex_);
    commands_.push_back(std::move(command));
  }
  wake_.notify_one();
}

EventPtr CommandQueue::record() {
  auto event = std::make_shared<QueueEvent>(failure_);
  enqueue([event] { event->signal(); });
  return event;
}

void CommandQueue::wait_for(const EventPtr& event) {
  // Another queue's failure is that queue's to report; this one only needs the order.
  enqueue([event] {
    try {
      event->wait();
    } catch (...) {
    }
  });
}

void CommandQueue::drain() {
  record()->wait();
}

void CommandQueue::run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  for (;;) {
    std::function<void()> command;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !commands_.empty(); });
      if (commands_.empty()) return;  // stopping, and everything ran
      command = std::move(commands_.front());
      commands_.pop_front();
    }
    try {
      command();
    } catch (const std::exception& e) {
      log::warn("the {} queue failed: {}", name_, e.what());
      const std::lock_guard lock(failure_->mutex);
      if (!failure_->error) failure_->error = std::current_exception();
    }
  }
}

}  // namespace tandem::backend
