// Replays inputs through a fuzz target in the normal build: each file named, or each file
// in each folder named. The suite runs it over the committed findings (fuzz/regressions) and
// the seeds, so a crash found once can never come back unnoticed.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::size_t replayed = 0;
  const auto replay = [&](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    ++replayed;
  };
  for (int i = 1; i < argc; ++i) {
    const fs::path p(argv[i]);
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) replay(e.path());
    } else if (fs::is_regular_file(p)) {
      replay(p);
    } else {
      // A target without findings has no regressions folder yet.
      std::printf("replay: nothing at %s\n", argv[i]);
    }
  }
  std::printf("replayed %zu inputs, none crashed\n", replayed);
  return replayed > 0 ? 0 : 2;
}
