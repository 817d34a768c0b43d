// The model `tandem recommend` and the setup wizard plan for, found from what the user
// typed: a model folder, a .gguf file, a catalog id, or a Hugging Face repository. A
// repository in the catalog is answered from it without the network; any other is asked
// of the Hub for its config.json and file list only, so "will it fit" has an answer before
// anything is downloaded. Nothing is written to disk.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/hub/gguf_quantizations.h"
#include "engine/hub/hub_config.h"
#include "engine/plan/catalog.h"
#include "engine/plan/model_shape.h"

namespace tandem::plan {

enum class ModelOrigin { Folder, Gguf, Catalog, Hub };
std::string_view origin_name(ModelOrigin origin);  // "folder", "gguf", "catalog", "hub"

// How the checkpoint stores its weights, and what says so.
struct StoredFormat {
  std::string name;      // "bf16", "f16", "f32", "fp8", "16-bit", "8-bit", "4-bit", "gguf",
                         // a quantization method ("gptq"), or "unknown"
  std::string evidence;  // "quantization_config: fp8", "torch_dtype bfloat16", ...
};

struct ModelLookup {
  ModelOrigin origin = ModelOrigin::Folder;
  std::string name;      // as the user gave it
  std::string source;    // where the configuration was read, for messages
  std::string path;      // Folder: the folder; Gguf: the file
  std::string repo;      // Catalog, Hub: the repository its files download from
  std::string endpoint;  // Hub: the Hub that answered
  const CatalogEntry* catalog_entry = nullptr;  // Catalog
  nlohmann::json config;                        // null for a .gguf file
  ModelShape shape;
  StoredFormat stored;
  // Catalog, Hub: what the model's files (hub::model_files_filter) take to download;
  // listed: summed from the Hub's file list, otherwise estimated from the parameters.
  std::uint64_t download_bytes = 0;
  bool download_bytes_listed = false;
  std::size_t download_files = 0;  // listed only
  // Empty when Tandem's engine runs this model; otherwise why not, in a sentence (a catalog
  // entry can be planned before Tandem runs it).
  std::string cannot_run;
  // A GGUF repository (origin Hub, no config.json; its model in the catalog): every
  // quantisation it offers, smallest first, and the one the download, shape.stored and the
  // plan are for (choose_gguf_quantization).
  std::vector<hub::GgufQuantization> gguf_quantizations;
  std::string gguf_quantization;
  const hub::GgufQuantization* chosen_gguf() const;
  // The quantisations whose stored sizes were read from their files' headers, exact per
  // category (read_gguf_sizes); the others are sized by their files' bytes per parameter.
  std::map<std::string, ModelShape::StoredBytes> gguf_sized;
};

// "ORGANISATION/NAME" in the characters the Hub allows.
bool looks_like_repo_id(std::string_view text);

// How the weights are stored: the quantization_config first, then the safetensors files'
// bytes per parameter (when `safetensors_bytes` is known), then torch_dtype (or dtype).
StoredFormat stored_format(const nlohmann::json& config, std::uint64_t safetensors_bytes,
                           std::int64_t params);

// A catalog entry as a lookup (its FP8 release when `fp8`); never touches the network.
ModelLookup lookup_catalog_entry(const CatalogEntry& entry, bool fp8 = false);

// A Hugging Face repository: the catalog entry whose repo or fp8_repo it is (any case; no
// network), otherwise the Hub's file list and config.json; for a GGUF repository (no
// config.json) of a catalog model, its file list and the catalog's configuration, with at most a
// few quick attempts (a question, not a download). Throws hub::HubError with a sentence for what a
// user can cause (no such repository, gated, offline, no config.json) and model::ModelError when
// Tandem cannot run the model (naming the architectures it runs).
ModelLookup lookup_repository(const hub::HubConfig& hub, const std::string& repo,
                              const std::function<bool()>& should_stop = {});

// What `tandem recommend -m` takes, the first that matches: a .gguf file or a folder on this
// computer (so a folder wins over a repository of the same relative name), a catalog id,
// then lookup_repository for an ORGANISATION/NAME. Throws std::runtime_error (HubError,
// ModelError) with a sentence.
ModelLookup lookup_model(const hub::HubConfig& hub, const std::string& name,
                         const std::function<bool()>& should_stop = {});

// Plans for quantisation `name` of a GGUF repository: its download, and the stored sizes of
// every category: as its files' headers say where they were read (lookup.gguf_sized),
// otherwise its bytes per parameter for all. Throws std::invalid_argument naming the
// quantisations there are.
void choose_gguf_quantization(ModelLookup& lookup, const std::string& name);

// Reads the headers of the chosen quantisation's files (ranged requests, no weights), unless
// they were read already, so that its stored sizes are exact per category: the files of a
// mixture keep attention and embeddings in more bits than the experts (unsloth's UD files:
// 8 against 2), which bytes per parameter spread evenly. Throws std::runtime_error (a
// hub::HubError for the network) with a sentence; `lookup` is unchanged then, its estimate
// still usable.
void read_gguf_sizes(const hub::HubConfig& hub, ModelLookup& lookup,
                     const std::function<bool()>& should_stop = {});
// Whether the chosen quantisation's stored sizes are its headers' (read_gguf_sizes).
bool gguf_sizes_read(const ModelLookup& lookup);

// One or two lines for people: where the model was found, how it is stored, the download.
std::string describe_lookup(const ModelLookup& lookup);
nlohmann::json to_json(const ModelLookup& lookup);

}  // namespace tandem::plan
