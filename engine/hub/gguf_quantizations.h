// The quantisations a GGUF repository offers (unsloth's, bartowski's, the model makers'),
// read from its file list: each is one .gguf file or a split set (NAME-00001-of-00003.gguf,
// often in a folder named after the quantisation), with its download size. Vision
// projectors (mmproj) and importance-matrix files are not models and are left out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/hub/file_listing.h"

namespace tandem::hub {

struct GgufQuantization {
  std::string name;                       // "Q4_K_M", "UD-Q2_K_XL", "BF16"
  std::vector<std::string> files;         // repository paths, a split set's parts in order
  std::vector<std::uint64_t> file_bytes;  // each part's listed size, in the same order
  std::uint64_t bytes = 0;                // listed sizes added up
  // The first part, the one a GGUF reader opens (it finds the others beside it).
  const std::string& first_file() const { return files.front(); }
};

// The quantisation a GGUF file's path names ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf" ->
// "UD-Q4_K_XL", "Q4_K_M/DeepSeek-V3-Q4_K_M-00001-of-00009.gguf" -> "Q4_K_M",
// "SmolLM2-135M-Instruct.Q4_1.gguf" -> "Q4_1"); the file's stem when it names none.
std::string gguf_quantization_label(const std::string& path);

// Every quantisation in `files`, smallest first.
std::vector<GgufQuantization> gguf_quantizations(const std::vector<RepoFile>& files);

}  // namespace tandem::hub
