#pragma once

#include <string>

namespace tandem::app {

struct DetectOptions {
  bool json = false;
  std::string disk_path;  // empty: the models folder
};

int run_detect(const DetectOptions& options);

}  // namespace tandem::app
