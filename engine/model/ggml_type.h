// The ggml tensor element types that GGUF files name by number, with their block layout
// (how many elements share one block and how many bytes the block takes).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem::model {

struct GgmlTypeLayout {
  std::string_view name;
  std::uint32_t elements_per_block = 0;
  std::uint32_t bytes_per_block = 0;
};

// nullopt for a type number this build does not know (a newer llama.cpp may add some).
std::optional<GgmlTypeLayout> ggml_type_layout(std::uint32_t ggml_type);

}  // namespace tandem::model
