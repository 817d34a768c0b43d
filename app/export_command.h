#pragma once

#include <string>

#include "app/recommend_command.h"

namespace tandem::app {

struct ExportOptions {
  RecommendOptions plan;  // the model and the wishes, as for recommend
  int gpus = 0;           // 0: the usable GPUs found (at least 1)
  std::string host = "0.0.0.0";
  int port = 30000;
  std::string kt_weight_path;
  bool json = false;
  std::string models_folder;  // where tandem download puts a repository
  std::string out;            // write the script here (made executable) instead of printing it
};

// `tandem export sglang`: the SGLang + kt-kernel commands for the model and the plan.
int run_export_sglang(const ExportOptions& options);

}  // namespace tandem::app
