// The converted-weights manifest (tandem-manifest.json) of a converted folder.
#include <exception>

#include "engine/model/manifest.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string folder = tandem::fuzz::folder_with("tandem-manifest.json", data, size);
  try {
    (void)tandem::model::read_manifest(folder);
  } catch (const std::exception&) {
  }
  return 0;
}
