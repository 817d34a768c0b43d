// GGUF: the header, metadata of every type (nested arrays), tensor infos and alignment.
#include <exception>

#include "engine/model/gguf/file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  tandem::fuzz::MemoryFile file(data, size);
  try {
    const tandem::model::GgufFile f(file.path());
    for (const auto& t : f.tensors()) {
      const auto bytes = f.tensor_data(t);
      if (!bytes.empty()) (void)bytes[bytes.size() - 1];
    }
  } catch (const std::exception&) {
  }
  return 0;
}
