// Where Tandem keeps what it measured about this computer, so that later starts take it
// instead of measuring again: the GPU speeds, where AMX widening pays. Each is a JSON object
// in a file of its own, keyed by what the measurement depends on.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tandem::files {

// $XDG_CACHE_HOME/tandem/NAME, or ~/.cache/tandem/NAME; empty when neither variable is set.
std::string user_cache_file(const std::string& name);

// The object kept at `path`: empty where there is none, or where it cannot be read (said in
// the log, `what` naming what it keeps).
nlohmann::json read_cache_object(const std::string& path, const std::string& what);
// Writes `cache` to `path` whole (write_whole_file), making its folder; a failure is said in
// the log, and the measurement is then made again at the next start.
void write_cache_object(const std::string& path, const nlohmann::json& cache,
                        const std::string& what);

}  // namespace tandem::files
