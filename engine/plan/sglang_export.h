// A way out when one machine is not enough: the SGLang + kt-kernel launch for the model and
// Tandem's plan, with the seeds' own parameter names (kt-method, kt-cpuinfer, ...), and the
// kt-kernel weight conversion it needs first where it needs one. Only flags the seeds
// document are written (tests/data/sglang/documented-flags.txt lists them with their
// sources).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/plan/memory_planner.h"
#include "engine/plan/model_lookup.h"

namespace tandem::plan {

struct SglangInputs {
  int gpus = 1;  // for --tensor-parallel-size
  std::string host = "0.0.0.0";
  int port = 30000;
  std::string kt_weight_path;  // where kt-kernel's converted experts go; default beside the model
  // Where the files of a catalog or Hub model are downloaded to (tandem download's folder):
  // the converter and SGLang read them there.
  std::string download_folder;
};

struct SglangExport {
  std::vector<std::string>
      convert;  // kt-kernel's conversion; empty when the model's own weights serve
  std::vector<std::string> launch;  // python3 -m sglang.launch_server ...
  nlohmann::json config;            // every kt parameter: value and why
  std::vector<std::string>
      notes;  // what differs from Tandem's plan; when SGLang is the better choice
};

// Throws std::runtime_error with a sentence when the model cannot be handed over (a GGUF
// file, experts kt-kernel has no documented method for).
SglangExport export_sglang(const ModelLookup& model, const Plan& plan, const SglangInputs& in);

// Both commands as a bash script, each argument quoted where the shell needs it, with the
// notes as comments.
std::string sglang_script(const SglangExport& e);

}  // namespace tandem::plan
