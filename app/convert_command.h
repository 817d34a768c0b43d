#pragma once

#include <string>

namespace tandem::app {

struct ConvertCommandOptions {
  std::string input, output, method;
  int group = 0;
  int pools = 0;  // 0: one per NUMA node of this machine
  int threads = 0;
  bool verify = false;
  bool dense_bf16 = false;
};

// Exit status: 0 done, 1 failed (run again to resume), 2 bad arguments or input, 130 interrupted.
int run_convert(const ConvertCommandOptions& options);

}  // namespace tandem::app
