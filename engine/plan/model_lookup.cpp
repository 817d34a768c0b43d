#include "engine/plan/model_lookup.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "engine/hub/hub_error.h"
#include "engine/hub/repo_metadata.h"
#include "engine/hw/hardware_report.h"
#include "engine/log/log.h"
#include "engine/model/gguf/model.h"
#include "engine/model/gguf/set.h"
#include "engine/model/manifest.h"
#include "engine/model/model_error.h"
#include "engine/model/model_spec.h"
#include "engine/plan/gguf_shape.h"

namespace tandem::plan {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

// Why the engine would refuse the configuration; empty when it runs it.
std::string why_not_runnable(const json& config, const std::string& source) {
  try {
    model::parse_model_spec(config, source);
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string catalog_ids() {
  std::string ids;
  for (const CatalogEntry& e : catalog()) {
    if (!e.config.is_null()) ids += (ids.empty() ? "" : ", ") + e.id;
  }
  return ids;
}

// The catalog keeps only the settings the planner reads, so for its entries the question is
// whether Tandem runs the architecture; the downloaded config.json is checked when it loads.
std::string architecture_refusal(const std::string& architecture, const std::string& source) {
  if (model::is_supported_architecture(architecture)) return {};
  return source + ": the architecture " + architecture + " is not supported yet. Tandem runs " +
         model::supported_architectures() + ".";
}

const CatalogEntry* find_catalog_id(const std::string& name) {
  for (const CatalogEntry& e : catalog()) {
    if (!e.config.is_null() && lower(e.id) == lower(name)) return &e;
  }
  return nullptr;
}

ModelLookup from_catalog(const CatalogEntry& e, bool fp8, const std::string& name) {
  ModelLookup l;
  l.origin = ModelOrigin::Catalog;
  l.name = name;
  l.catalog_entry = &e;
  l.repo = fp8 ? e.fp8_repo : e.repo;
  l.source = "catalog entry " + e.id;
  l.config = e.config;
  l.shape = model_shape_from_config(e.config, l.source);
  const std::string format = fp8 ? "fp8" : catalog_stored_format(e);
  l.stored = {format, fp8 ? "the catalog's FP8 release" : "the catalog's release"};
  const SizeEstimate size = estimate_sizes(l.shape);
  l.download_bytes = format == "fp8"     ? size.fp8_bytes
                     : format == "mxfp4" ? size.mxfp4_bytes
                                         : size.bf16_bytes;
  l.cannot_run = architecture_refusal(l.shape.architecture, l.source);
  return l;
}

// The architectures whose GGUF files Tandem runs (engine/model/gguf/model.cpp), by the
// transformers class their catalog configuration names.
bool gguf_runs(const std::string& architecture) {
  for (const char* a : {"Qwen3MoeForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM",
                        "MixtralForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM"}) {
    if (architecture == a) return true;
  }
  return false;
}

std::string quantization_names(const std::vector<hub::GgufQuantization>& qs) {
  std::string out;
  for (std::size_t i = 0; i < qs.size(); ++i) out += (i ? ", " : "") + qs[i].name;
  return out;
}

ModelLookup from_gguf(const std::string& file, const std::string& name);

// The quantisation to plan for until a plan picks one: the usual middle ground, else the
// middle of the list.
std::string default_quantization(const std::vector<hub::GgufQuantization>& quants) {
  std::string first = quants[quants.size() / 2].name;
  for (const char* preferred : {"UD-Q4_K_XL", "Q4_K_M"}) {
    for (const auto& q : quants)
      if (q.name == preferred) first = q.name;
  }
  return first;
}

// A folder of its own under the system's temporary folder, removed with everything in it.
struct TemporaryFolder {
  fs::path path;
  TemporaryFolder() {
    std::string pattern = (fs::temp_directory_path() / "tandem-gguf-head-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("no temporary folder could be made to read GGUF headers in");
    path = pattern;
  }
  ~TemporaryFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
};

// The model a GGUF quantisation holds, read from its headers alone: the start of every part
// is fetched into a sparse file of the part's listed size (so the reader's size checks hold
// and no weight is fetched), more of a part while its header runs past what was fetched. The
// first part holds the metadata (a vocabulary takes megabytes); the others little but their
// tensor tables.
ModelLookup from_gguf_headers(const hub::HubConfig& hub, const std::string& repo,
                              const hub::GgufQuantization& q,
                              const std::function<bool()>& should_stop) {
  TemporaryFolder folder;
  constexpr std::uint64_t kMostHead = 256ull << 20;
  std::vector<std::uint64_t> head(q.files.size(), 1ull << 20);
  head.front() = 16ull << 20;
  std::vector<bool> fetched_whole(q.files.size(), false), needed(q.files.size(), true);
  std::string last_error;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t i = 0; i < q.files.size(); ++i) {
      if (!needed[i]) continue;
      const std::string bytes =
          hub::fetch_file_head(hub, repo, "main", q.files[i], head[i], should_stop);
      const fs::path local = folder.path / fs::path(q.files[i]).filename();
      {
        std::ofstream out(local, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!out)
          throw std::runtime_error("the GGUF header of " + q.files[i] + " could not be kept");
      }
      const std::uint64_t listed = i < q.file_bytes.size() ? q.file_bytes[i] : 0;
      if (listed > bytes.size()) fs::resize_file(local, listed);
      fetched_whole[i] = bytes.size() < head[i];
    }
    // Past the fetched bytes a part reads as zeros: a header cut short may not parse, or may
    // parse into nonsense, so each part's header must end within what was fetched.
    bool all_inside = true;
    for (std::size_t i = 0; i < q.files.size(); ++i) {
      needed[i] = false;
      if (fetched_whole[i]) continue;
      bool inside = false;
      try {
        const model::GgufFile part((folder.path / fs::path(q.files[i]).filename()).string());
        inside = part.data_offset_bytes() <= head[i];
      } catch (const std::exception& e) {
        last_error = e.what();
      }
      if (!inside && head[i] < kMostHead) {
        head[i] *= 4;
        needed[i] = true;
        all_inside = false;
      }
    }
    if (!all_inside) continue;
    try {
      const fs::path first = folder.path / fs::path(q.first_file()).filename();
      const model::GgufSet set(first.string());
      ModelLookup l = from_gguf(first.string(), repo);
      try {
        model::gguf_model_spec(set);
      } catch (const std::exception& e) {
        l.cannot_run = e.what();
      }
      return l;
    } catch (const std::exception& e) {
      last_error = e.what();
      break;
    }
  }
  log::info("GGUF header of {} in {}: {}", q.first_file(), repo, last_error);
  throw std::runtime_error("The start of " + q.first_file() + " in " + repo +
                           " is not a GGUF header Tandem can read, so the repository cannot be "
                           "sized before the download (it may not hold GGUF models; download "
                           "one file and open it to see why).");
}

// A GGUF repository: its quantisations from the listing, its shape from the catalog model it
// is a release of, or else from the headers of one quantisation's files.
ModelLookup from_gguf_repository(const hub::HubConfig& hub, const std::string& repo,
                                 const hub::RepoMetadata& meta, const CatalogMatch& match,
                                 const std::function<bool()>& should_stop) {
  std::vector<hub::GgufQuantization> quants = hub::gguf_quantizations(meta.files);
  if (quants.empty()) {
    throw hub::HubError(hub::HubErrorKind::NotFound,
                        fmt::format("{} on {} has no config.json and no GGUF file Tandem "
                                    "recognises as a model, so there is nothing to plan.",
                                    repo, hub.endpoint));
  }
  const std::string first = default_quantization(quants);
  ModelLookup l;
  if (match.entry != nullptr && !match.entry->config.is_null()) {
    l = from_catalog(*match.entry, false, repo);
    l.source = "the GGUF files of " + repo + " on " + hub.endpoint + ", sized by " +
               match.entry->name + "'s configuration in Tandem's catalog";
    if (l.cannot_run.empty() && !gguf_runs(l.shape.architecture)) {
      l.cannot_run =
          "Tandem reads GGUF files of Qwen3, Qwen3-MoE, Llama, Mixtral, DeepSeek-V3 "
          "and GLM-4.5 models; " +
          match.entry->name + "'s are not among them yet" +
          (match.entry->repo.empty() ? std::string(".")
                                     : "; its release " + match.entry->repo + " runs.");
    }
  } else {
    const auto q =
        std::find_if(quants.begin(), quants.end(), [&](const auto& g) { return g.name == first; });
    l = from_gguf_headers(hub, repo, *q, should_stop);
    l.gguf_sized[q->name] = l.shape.stored;
    l.path.clear();
    l.source = "the GGUF header of " + q->first_file() + " in " + repo + " on " + hub.endpoint;
  }
  l.origin = ModelOrigin::Hub;
  l.name = repo;
  l.repo = repo;
  l.endpoint = hub.endpoint;
  l.gguf_quantizations = std::move(quants);
  choose_gguf_quantization(l, first);
  return l;
}

ModelLookup from_folder(const std::string& folder, const std::string& name) {
  ModelLookup l;
  l.origin = ModelOrigin::Folder;
  l.name = name;
  l.path = folder;
  const fs::path config_path = fs::path(folder) / "config.json";
  l.source = config_path.string();
  std::ifstream in(config_path);
  if (!in) {
    throw std::runtime_error(
        l.source +
        " is missing; give a model folder, a catalog id or a Hugging Face repository (a folder "
        "on this computer is taken before a repository of the same name).");
  }
  l.config = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!l.config.is_object())
    throw std::runtime_error(l.source + " is not a JSON object; the model cannot be planned.");
  l.shape = model_shape_from_config(l.config, l.source);
  std::uint64_t safetensors = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    // A folder converted from a GGUF file keeps its embedding and norms in base.gguf.
    if ((entry.path().extension() == ".safetensors" ||
         entry.path().filename() == model::kConvertedGgufName) &&
        entry.is_regular_file(ec))
      safetensors += entry.file_size(ec);
  }
  l.stored = stored_format(l.config, safetensors, l.shape.total_params());
  l.cannot_run = why_not_runnable(l.config, l.source);
  return l;
}

ModelLookup from_gguf(const std::string& file, const std::string& name) {
  ModelLookup l;
  l.origin = ModelOrigin::Gguf;
  l.name = name;
  l.path = file;
  l.source = file;
  l.shape = model_shape_from_gguf(model::GgufSet(file));
  l.stored = {"gguf", "the file's own tensor types"};
  return l;
}

// The sizes the files take per parameter, as a format. Embeddings and norms kept in BF16
// beside 8-bit experts raise the ratio a little above 1; hence the wide bands.
std::string format_for_bytes_per_param(double ratio) {
  if (ratio < 0.75) return "4-bit";
  if (ratio < 1.5) return "8-bit";
  if (ratio < 3.0) return "16-bit";
  return "f32";
}

}  // namespace

std::string_view origin_name(ModelOrigin origin) {
  switch (origin) {
    case ModelOrigin::Folder:
      return "folder";
    case ModelOrigin::Gguf:
      return "gguf";
    case ModelOrigin::Catalog:
      return "catalog";
    case ModelOrigin::Hub:
      return "hub";
  }
  return "folder";
}

bool looks_like_repo_id(std::string_view text) {
  static const std::regex kRepoId(R"([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)");
  return std::regex_match(text.begin(), text.end(), kRepoId) &&
         text.find("..") == std::string_view::npos;
}

StoredFormat stored_format(const json& config, std::uint64_t safetensors_bytes,
                           std::int64_t params) {
  if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    const json& q = config["quantization_config"];
    const std::string method = q.value("quant_method", std::string());
    bool fp8 = method == "fp8";
    if (method == "compressed-tensors" && q.contains("config_groups") &&
        q["config_groups"].is_object()) {
      fp8 = !q["config_groups"].empty();
      for (const auto& [name, group] : q["config_groups"].items()) {
        const json* w =
            group.is_object() && group.contains("weights") ? &group["weights"] : nullptr;
        fp8 = fp8 && w != nullptr && w->is_object() && w->value("type", std::string()) == "float" &&
              w->value("num_bits", std::int64_t{0}) == 8;
      }
    }
    if (fp8) return {"fp8", "quantization_config: " + method};
    return {method.empty() ? "quantized" : method,
            "quantization_config: " + (method.empty() ? std::string("no quant_method") : method)};
  }
  std::string dtype;
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (dtype.empty() && config.contains(key) && config[key].is_string())
      dtype = config[key].get<std::string>();
  }
  const std::string dtype_format = dtype == "bfloat16"  ? "bf16"
                                   : dtype == "float16" ? "f16"
                                   : dtype == "float32" ? "f32"
                                                        : "";
  if (safetensors_bytes > 0 && params > 0) {
    const double ratio = static_cast<double>(safetensors_bytes) / static_cast<double>(params);
    const std::string by_size = format_for_bytes_per_param(ratio);
    const std::string evidence =
        fmt::format("the weight files hold {:.2f} bytes per parameter", ratio);
    // The sizes are what is stored; the dtype only names the 16-bit kind.
    if (by_size == "16-bit" && (dtype_format == "bf16" || dtype_format == "f16"))
      return {dtype_format, evidence + ", torch_dtype " + dtype};
    return {by_size, evidence};
  }
  if (!dtype_format.empty()) return {dtype_format, "torch_dtype " + dtype};
  return {"unknown", "neither the configuration nor file sizes say"};
}

ModelLookup lookup_catalog_entry(const CatalogEntry& entry, bool fp8) {
  return from_catalog(entry, fp8, fp8 ? entry.fp8_repo : entry.repo);
}

ModelLookup lookup_repository(const hub::HubConfig& hub, const std::string& repo,
                              const std::function<bool()>& should_stop) {
  const CatalogMatch match = find_catalog_repo(repo);
  if (match.entry != nullptr && !match.entry->config.is_null() && !match.gguf)
    return from_catalog(*match.entry, match.fp8, repo);

  // A question, not a download: a few quick attempts, so an offline machine answers soon.
  hub::HubConfig quick = hub;
  quick.retry.max_attempts = std::min(quick.retry.max_attempts, 3);
  quick.retry.initial_delay_ms = std::min(quick.retry.initial_delay_ms, 500);
  quick.retry.max_retry_after_ms = std::min(quick.retry.max_retry_after_ms, 10'000);
  quick.connect_timeout_s = std::min(quick.connect_timeout_s, 15L);
  quick.stall_timeout_s = std::min(quick.stall_timeout_s, 30L);
  quick.warn_on_retry = false;

  hub::RepoMetadata meta;
  try {
    meta = hub::fetch_repo_metadata(quick, repo, "main", should_stop,
                                    /*gguf_without_config=*/true);
  } catch (const hub::HubError& e) {
    if (e.kind() == hub::HubErrorKind::Network || e.kind() == hub::HubErrorKind::Stalled) {
      throw hub::HubError(e.kind(),
                          std::string(e.what()) +
                              " Without the network, the catalog's models (by id or "
                              "repository: " +
                              catalog_ids() + ") and model folders on this computer still work.",
                          e.detail());
    }
    throw;
  }
  if (meta.config.is_null()) return from_gguf_repository(hub, repo, meta, match, should_stop);
  ModelLookup l;
  l.origin = ModelOrigin::Hub;
  l.name = repo;
  l.repo = repo;
  l.endpoint = hub.endpoint;
  l.source = "the config.json of " + repo + " on " + hub.endpoint;
  l.config = std::move(meta.config);
  // Tandem plans only what it runs: the planner would count an architecture it does not
  // know as a dense model, which is a wrong answer rather than none.
  model::parse_model_spec(l.config, l.source);
  l.shape = model_shape_from_config(l.config, l.source);
  l.stored = stored_format(l.config, meta.safetensors_bytes(), l.shape.total_params());
  const hub::FileFilter files = hub::model_files_filter();
  l.download_bytes = meta.bytes(files);
  l.download_bytes_listed = true;
  l.download_files = static_cast<std::size_t>(std::count_if(
      meta.files.begin(), meta.files.end(), [&](const auto& f) { return files.accepts(f.path); }));
  return l;
}

ModelLookup lookup_model(const hub::HubConfig& hub, const std::string& name,
                         const std::function<bool()>& should_stop) {
  std::error_code ec;
  if (fs::is_regular_file(name, ec) && fs::path(name).extension() == ".gguf")
    return from_gguf(name, name);
  if (fs::is_directory(name, ec)) return from_folder(name, name);
  if (const CatalogEntry* e = find_catalog_id(name)) return from_catalog(*e, false, name);
  if (looks_like_repo_id(name)) return lookup_repository(hub, name, should_stop);
  throw std::runtime_error(
      "\"" + name +
      "\" is neither a model folder, a .gguf file, a catalog model nor a Hugging Face "
      "repository (ORGANISATION/NAME, e.g. Qwen/Qwen3-30B-A3B). Catalog models: " +
      catalog_ids() + ".");
}

const hub::GgufQuantization* ModelLookup::chosen_gguf() const {
  for (const auto& q : gguf_quantizations)
    if (q.name == gguf_quantization) return &q;
  return nullptr;
}

void choose_gguf_quantization(ModelLookup& l, const std::string& name) {
  const hub::GgufQuantization* q = nullptr;
  for (const auto& candidate : l.gguf_quantizations)
    if (lower(candidate.name) == lower(name)) q = &candidate;
  if (q == nullptr) {
    throw std::invalid_argument(l.repo + " has no quantisation " + name + "; it has " +
                                (l.gguf_quantizations.empty()
                                     ? std::string("none")
                                     : quantization_names(l.gguf_quantizations)) +
                                ".");
  }
  l.gguf_quantization = q->name;
  l.download_bytes = q->bytes;
  l.download_bytes_listed = true;
  l.download_files = q->files.size();
  l.stored = {"gguf", q->name + " GGUF files, " + hw::format_bytes(q->bytes)};
  ModelShape& s = l.shape;
  if (const auto sized = l.gguf_sized.find(q->name); sized != l.gguf_sized.end()) {
    s.stored = sized->second;
    l.stored.evidence += ", each part of the model sized from the files' headers";
    return;
  }
  // Without the headers only the files' sizes are known: every category at the same bytes
  // per parameter (GGUF mixes keep embeddings and attention a little larger, experts a little
  // smaller; read_gguf_sizes, or the plan made from the file itself, has them exact).
  const double per = static_cast<double>(q->bytes) / static_cast<double>(s.total_params());
  const auto bytes = [per](std::int64_t params) {
    return static_cast<std::uint64_t>(static_cast<double>(params) * per);
  };
  s.stored.known = true;
  s.stored.embedding = bytes(s.embedding_params);
  s.stored.output = bytes(s.output_params);
  s.stored.attention = bytes(s.attention_params);
  s.stored.dense_ffn = bytes(s.dense_ffn_params);
  s.stored.shared_experts = bytes(s.shared_expert_params);
  s.stored.router = bytes(s.router_params);
  s.stored.expert = bytes(s.expert_params);
}

void read_gguf_sizes(const hub::HubConfig& hub, ModelLookup& l,
                     const std::function<bool()>& should_stop) {
  const hub::GgufQuantization* q = l.chosen_gguf();
  if (q == nullptr || l.repo.empty() || l.gguf_sized.count(q->name) != 0) return;
  const ModelLookup headers = from_gguf_headers(hub, l.repo, *q, should_stop);
  const ModelShape& h = headers.shape;
  // The files must hold the model the plan is for (the catalog's, or the headers of another
  // quantisation's files).
  if (h.layers != l.shape.layers || h.experts != l.shape.experts || h.hidden != l.shape.hidden) {
    throw std::runtime_error(fmt::format(
        "the headers of {} in {} describe {} layers of width {} with {} experts, not the {} "
        "layers of width {} with {} experts planned for; the repository holds another model "
        "than its name says",
        q->first_file(), l.repo, h.layers, h.hidden, h.experts, l.shape.layers, l.shape.hidden,
        l.shape.experts));
  }
  l.gguf_sized[q->name] = h.stored;
  choose_gguf_quantization(l, q->name);
}

bool gguf_sizes_read(const ModelLookup& l) {
  return !l.gguf_quantization.empty() && l.gguf_sized.count(l.gguf_quantization) != 0;
}

std::string describe_lookup(const ModelLookup& l) {
  const std::string stored =
      l.stored.name == "unknown"
          ? fmt::format("The stored format is not known ({})", l.stored.evidence)
          : fmt::format("Stored as {} ({})", upper(l.stored.name), l.stored.evidence);
  switch (l.origin) {
    case ModelOrigin::Folder:
      return fmt::format("{}: a model folder on this computer\n{}", l.path, stored);
    case ModelOrigin::Gguf:
      return fmt::format("{}: a GGUF file", l.path);
    case ModelOrigin::Catalog:
      return fmt::format(
          "{}: {} (answered offline)\n{}; about {} to download, estimated from the parameters",
          l.repo, l.source, stored, hw::format_bytes(l.download_bytes));
    case ModelOrigin::Hub:
      if (!l.gguf_quantizations.empty()) {
        std::string list;
        for (const auto& q : l.gguf_quantizations)
          list += fmt::format("\n  {:<14} {:>10}  {} file{}", q.name, hw::format_bytes(q.bytes),
                              q.files.size(), q.files.size() == 1 ? "" : "s");
        return fmt::format("{}: {}\nPlanned for {} ({} to download). Its quantisations:{}", l.repo,
                           l.source, l.gguf_quantization, hw::format_bytes(l.download_bytes), list);
      }
      return fmt::format("{}: its config.json and file list, from {}\n{}; {} files, {} to download",
                         l.repo, l.endpoint, stored, l.download_files,
                         hw::format_bytes(l.download_bytes));
  }
  return {};
}

json to_json(const ModelLookup& l) {
  json doc = {{"origin", origin_name(l.origin)},
              {"name", l.name},
              {"stored_format", l.stored.name},
              {"stored_format_evidence", l.stored.evidence}};
  if (!l.path.empty()) doc["path"] = l.path;
  if (!l.repo.empty()) doc["repo"] = l.repo;
  if (!l.endpoint.empty()) doc["endpoint"] = l.endpoint;
  if (l.catalog_entry != nullptr) doc["catalog_id"] = l.catalog_entry->id;
  if (l.origin == ModelOrigin::Catalog || l.origin == ModelOrigin::Hub) {
    doc["download_bytes"] = l.download_bytes;
    doc["download_bytes_listed"] = l.download_bytes_listed;
    if (l.download_bytes_listed) doc["download_files"] = l.download_files;
  }
  if (!l.gguf_quantizations.empty()) {
    json qs = json::array();
    for (const auto& q : l.gguf_quantizations)
      qs.push_back({{"name", q.name}, {"bytes", q.bytes}, {"files", q.files}});
    doc["gguf_quantizations"] = qs;
    doc["gguf_quantization"] = l.gguf_quantization;
    doc["gguf_sized_from_headers"] = gguf_sizes_read(l);
  }
  doc["runs"] = l.cannot_run.empty();
  if (!l.cannot_run.empty()) doc["cannot_run"] = l.cannot_run;
  return doc;
}

}  // namespace tandem::plan
