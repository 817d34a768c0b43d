// Watches streamed text for stop strings. Text that could still become a stop string is
// held back, so the caller never prints part of one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::generate {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  // Adds `text`; returns what can be shown now. After a stop string appears, stopped()
  // is true and the returned text ends right before it.
  std::string push(std::string_view text);
  // What is still held back, at the end of generation (nothing after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace tandem::generate
