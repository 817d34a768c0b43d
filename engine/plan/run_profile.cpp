#include "engine/plan/run_profile.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/files/whole_file.h"

namespace tandem::plan {
namespace {

std::runtime_error bad(const std::string& path, const std::string& what) {
  return std::runtime_error("the profile " + path + " " + what +
                            "; save it again with tandem recommend --save, or run without it.");
}

std::int64_t integer(const std::string& path, const std::string& name, const std::string& value) {
  std::size_t used = 0;
  std::int64_t v = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || v < 0)
    throw bad(path, "gives " + name + " the value \"" + value + "\", which is not a count");
  return v;
}

}  // namespace

std::string cpu_format_of_method(const std::string& m) {
  // An instruction set, then a format: AMXINT8, AVX512MXFP4, AVX2BF16; INT4DOWN8 (INT4
  // experts with INT8 downs) and INT8ROTATED are Tandem's own, which kt-kernel does not have.
  for (const char* isa : {"AMX", "AVX512", "AVX2"}) {
    for (const char* f : {"INT8", "INT4", "BF16", "MXFP4", "INT4DOWN8", "INT8ROTATED"}) {
      if (m != std::string(isa) + f) continue;
      if (std::string_view(f) == "INT4DOWN8") return "int4-down8";
      if (std::string_view(f) == "INT8ROTATED") return "int8-rotated";
      std::string lower = f;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return lower;
    }
  }
  return {};
}

RunProfile run_profile_from_json(const nlohmann::json& doc, const std::string& path) {
  RunProfile p;
  p.path = path;
  if (!doc.is_object() || !doc.contains("parameters") || !doc["parameters"].is_array())
    throw bad(path, "has no \"parameters\" list");
  for (const auto& x : doc["parameters"]) {
    if (!x.is_object() || !x.contains("name") || !x.contains("value") || !x["name"].is_string() ||
        !x["value"].is_string())
      throw bad(path, "has a parameter without a name and a value");
    const std::string name = x["name"].get<std::string>();
    const std::string value = x["value"].get<std::string>();
    if (name == "kt-method") {
      if (cpu_format_of_method(value).empty())
        throw bad(path, "names the kt-method \"" + value + "\", which Tandem does not know");
      p.kt_method = value;
    } else if (name == "cpuinfer") {
      p.cpuinfer = static_cast<int>(integer(path, name, value));
    } else if (name == "threadpool-count") {
      p.threadpool_count = static_cast<int>(integer(path, name, value));
    } else if (name == "num-gpu-experts") {
      p.num_gpu_experts = integer(path, name, value);
    } else if (name == "max-deferred-experts-per-token") {
      p.max_deferred_experts_per_token = integer(path, name, value);
    } else if (name == "gpu-prefill-token-threshold") {
      p.gpu_prefill_token_threshold = integer(path, name, value);
    } else if (name == "context-length") {
      p.context_length = integer(path, name, value);
    } else if (name == "prefill-chunk") {
      p.prefill_chunk = integer(path, name, value);
      if (*p.prefill_chunk == 0)
        throw bad(path, "gives prefill-chunk the value 0; a prompt's pass takes at least 1 token");
    } else if (name == "expert-placement-strategy") {
      p.expert_placement_strategy = value;
    } else if (name == "enable-dynamic-expert-update") {
      if (value != "true" && value != "false")
        throw bad(path, "gives enable-dynamic-expert-update the value \"" + value +
                            "\" instead of true or false");
      p.enable_dynamic_expert_update = value == "true";
    } else if (name == "accelerator") {
      p.accelerator = value;
    } else if (name == "kv-cache") {
      p.kv_cache = value;
    } else if (name == "expert-stats") {
      p.expert_stats = value;
    }
  }
  return p;
}

void write_run_profile(const std::string& path, const nlohmann::json& document) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::path(path).has_parent_path()) fs::create_directories(fs::path(path).parent_path(), ec);
  const std::string why = files::write_whole_file(path, document.dump(2) + "\n");
  if (!why.empty()) throw std::runtime_error("cannot write the profile " + path + ": " + why + ".");
}

RunProfile read_run_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read the profile " + path + "; check the path.");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    throw bad(path, "is not valid JSON");
  }
  return run_profile_from_json(doc, path);
}

}  // namespace tandem::plan
