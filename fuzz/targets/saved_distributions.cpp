// Distributions saved by `tandem perplexity --save-logits`, read back by --kl-base-logits:
// the header, then every record against a flat model distribution over its vocabulary.
#include <cmath>
#include <exception>
#include <vector>

#include "engine/measure/distribution_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const tandem::fuzz::MemoryFile file(data, size);
  try {
    tandem::measure::DistributionReader reader(file.path());
    const std::int64_t vocab = reader.header().vocab;
    if (vocab > (1 << 16)) return 0;  // a vocabulary larger than the input's records could be
    const std::vector<double> flat(static_cast<std::size_t>(vocab),
                                   -std::log(static_cast<double>(vocab)));
    for (std::int64_t i = 0; i < reader.header().evaluated_tokens; ++i) (void)reader.next_kl(flat);
  } catch (const std::exception&) {
  }
  return 0;
}
