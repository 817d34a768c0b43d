#include "app/export_command.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/files/whole_file.h"
#include "engine/plan/sglang_export.h"

namespace tandem::app {

int run_export_sglang(const ExportOptions& o) {
  namespace fs = std::filesystem;
  try {
    const PlannedModel planned = plan_model(o.plan);
    plan::SglangInputs in;
    in.gpus = o.gpus;
    if (in.gpus <= 0) {
      in.gpus = 0;
      for (const hw::GpuDevice& d : planned.hardware.gpus.devices) in.gpus += d.usable ? 1 : 0;
      in.gpus = std::max(1, in.gpus);
    }
    in.host = o.host;
    in.port = o.port;
    in.kt_weight_path = o.kt_weight_path;
    const std::string repo = planned.model.repo.empty() ? planned.model.name : planned.model.repo;
    if (planned.model.origin != plan::ModelOrigin::Folder)
      in.download_folder = (fs::path(o.models_folder) / repo).string();
    const plan::SglangExport e = plan::export_sglang(planned.model, planned.plan, in);
    const std::string script = plan::sglang_script(e);
    if (o.json) {
      std::cout << nlohmann::json{{"convert", e.convert},
                                  {"launch", e.launch},
                                  {"config", e.config},
                                  {"notes", e.notes},
                                  {"script", script}}
                       .dump(2)
                << "\n";
      return 0;
    }
    if (o.out.empty()) {
      std::cout << script;
      return 0;
    }
    // Written whole under another name, then renamed into place.
    const std::string why = files::write_whole_file(o.out, script, /*executable=*/true);
    if (!why.empty()) throw std::runtime_error("cannot write " + o.out + ": " + why + ".");
    std::cout << "Wrote " << o.out << ": run it on the machine with SGLang and kt-kernel.\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
}

}  // namespace tandem::app
