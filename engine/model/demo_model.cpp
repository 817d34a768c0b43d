#include "engine/model/demo_model.h"

#include <system_error>

namespace tandem::model {
namespace {

namespace fs = std::filesystem;

bool is_model_folder(const fs::path& folder) {
  std::error_code ec;
  return fs::is_regular_file(folder / "config.json", ec) &&
         fs::is_regular_file(folder / "model.safetensors", ec);
}

fs::path running_executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::string demo_model_folder(const fs::path& executable_dir) {
  if (!executable_dir.empty()) {
    const fs::path installed = executable_dir / ".." / "share" / "tandem" / "demo-model";
    if (is_model_folder(installed)) return fs::weakly_canonical(installed).string();
  }
#ifdef TANDEM_SOURCE_DEMO_MODEL_DIR
  // A build tree runs from the sources it was configured from.
  const fs::path source = TANDEM_SOURCE_DEMO_MODEL_DIR;
  if (is_model_folder(source)) return source.string();
#endif
  return {};
}

std::string demo_model_folder() {
  return demo_model_folder(running_executable_dir());
}

}  // namespace tandem::model
