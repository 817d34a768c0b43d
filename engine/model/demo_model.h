// The built-in demo model: a small Qwen3-MoE trained on public-domain English (see
// resources/demo-model/README.md) that ships with Tandem, so the chat works before the
// user has downloaded anything.
#pragma once

#include <filesystem>
#include <string>

namespace tandem::model {

// The demo model's folder, or an empty string when this Tandem has none. Looks beside the
// running executable first (<prefix>/bin/tandem -> <prefix>/share/tandem/demo-model, which
// covers installs and AppImages), then in the source tree the build came from.
std::string demo_model_folder();

// The same search for an executable living in `executable_dir`.
std::string demo_model_folder(const std::filesystem::path& executable_dir);

}  // namespace tandem::model
