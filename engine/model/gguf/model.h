// A GGUF model (one file or a split set, engine/model/gguf/set.h) read as Tandem reads a
// Hugging Face folder: its ModelSpec from the file's metadata, and its tensors under the
// names bind_weights asks for (Checkpoint's GGUF constructor, defined here), each kept in
// its stored block format.
//
// Architectures (general.architecture): llama (Llama, and Mixtral when it has experts),
// qwen3, qwen3moe, deepseek2 (DeepSeek-V3, R1, Kimi-K2: latent attention, with kv_b stored
// whole or split per head as attn_k_b and attn_v_b) and glm4moe (GLM-4.5 and later; the
// next-token-prediction layers are left out). Every setting the forward pass needs is read from the
// metadata; one that is absent, and a feature Tandem does not read from GGUF, is a ModelError with
// a sentence naming the file and the key. Where the GGUF format itself defines a value for an
// absent key (head_count_kv: head_count; key_length: embedding_length / head_count;
// rope.freq_base: 10000), that value is used, as every GGUF reader does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/gguf/set.h"
#include "engine/model/model_spec.h"

namespace tandem::model {

// Whether `path` names a GGUF file (ends in ".gguf"), whatever is in it.
bool is_gguf_path(const std::string& path);

// The spec of the model `set` holds. Throws ModelError with a sentence.
ModelSpec gguf_model_spec(const GgufSet& set);
// The Hugging Face config.json the metadata amounts to (what gguf_model_spec parses; GGUF's
// Llama files turn rotary pairs as adjacent, which the spec adds and the config cannot say).
nlohmann::json gguf_model_config(const GgufSet& set);

// A folder converted from a GGUF model (tandem convert) keeps the source's metadata and the
// tensors used as stored in a GGUF file of its own (kConvertedGgufName, see manifest.h), and
// lists under this key the source's tensors that file leaves out (packed into the folder's
// layer files, or never read by Tandem), so that the model reads as its source did.
inline constexpr const char* kGgufOmittedTensorsKey = "tandem.omitted_tensors";

// The architectures (general.architecture) Tandem runs from GGUF, for messages.
std::string gguf_supported_architectures();

// What a model library shows of a GGUF model, read from its metadata and tensor table only.
struct GgufSummary {
  std::string family;       // as people call it ("Qwen3-MoE"); the architecture when unknown
  std::string format;       // llama.cpp's name of the mixture ("Q4_K_M"), else the main tensor type
  std::uint64_t bytes = 0;  // every part together
  std::vector<std::string> parts;  // the files, first part first
};
// Throws std::runtime_error with a sentence, as GgufSet does.
GgufSummary summarize_gguf(const std::string& path);
// Whether `path` is a .gguf file a library lists: a single file or a set's first part.
bool is_listed_gguf(const std::string& path);

}  // namespace tandem::model
