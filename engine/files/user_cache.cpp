#include "engine/files/user_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "engine/files/whole_file.h"
#include "engine/log/log.h"

namespace tandem::files {

namespace fs = std::filesystem;

std::string user_cache_file(const std::string& name) {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return (fs::path(xdg) / "tandem" / name).string();
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return (fs::path(home) / ".cache" / "tandem" / name).string();
  return {};
}

nlohmann::json read_cache_object(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
    log::warn("{} kept in {} is not a JSON object; measuring again", what, path);
  } catch (const std::exception& e) {
    log::warn("{} kept in {} could not be read ({}); measuring again", what, path, e.what());
  }
  return nlohmann::json::object();
}

void write_cache_object(const std::string& path, const nlohmann::json& cache,
                        const std::string& what) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string why = write_whole_file(path, cache.dump(1) + "\n");
  if (!why.empty())
    log::warn("{} could not be kept in {} ({}); it is measured again at the next start", what, path,
              why);
}

}  // namespace tandem::files
