// GGUF split sets: the input is cut into one to three parts written side by side as
// fuzz-0000K-of-0000N.gguf (or one plainly named file), and the set is opened from one of
// them: the parts' split keys, their agreement, tensors spread over parts and every
// tensor's bytes.
// Input: byte 0 picks the part count (and, high bit set, a plain name); byte 1, the part
// to open; then each part but the last as a 4-byte little-endian length and its bytes,
// the last part being the rest.
#include <cstring>
#include <exception>
#include <string>

#include "engine/model/gguf/set.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool plain = (data[0] & 0x80) != 0;
  const int count = plain ? 1 : 1 + data[0] % 3;
  const int open = data[1] % count;
  std::size_t at = 2;
  std::string folder, opened;
  for (int part = 0; part < count; ++part) {
    std::size_t length = size - at;
    if (part + 1 < count) {
      std::uint32_t declared = 0;
      if (size - at >= 4) std::memcpy(&declared, data + at, 4);
      at += std::min<std::size_t>(4, size - at);
      length = std::min<std::size_t>(declared, size - at);
    }
    const std::string name = plain ? "fuzz.gguf"
                                   : "fuzz-0000" + std::to_string(part + 1) + "-of-0000" +
                                         std::to_string(count) + ".gguf";
    folder = tandem::fuzz::folder_with(name, data + at, length);
    if (part == open) opened = folder + "/" + name;
    at += length;
  }
  try {
    const tandem::model::GgufSet set(opened);
    for (const auto& [name, tensor] : set.tensors()) {
      const auto bytes = set.tensor_data(tensor);
      if (!bytes.empty()) (void)bytes[bytes.size() - 1];
    }
  } catch (const std::exception&) {
  }
  return 0;
}
