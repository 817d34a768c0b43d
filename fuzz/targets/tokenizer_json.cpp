// tokenizer.json: the model, its vocabulary and merges, added tokens, normalizer and
// pre-tokenizer; then a short text through the tokenizer it makes.
#include <exception>

#include "engine/text/tokenizer.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string folder = tandem::fuzz::folder_with("tokenizer.json", data, size);
  try {
    const auto tokenizer = tandem::text::load_tokenizer_json(folder);
    const auto ids = tokenizer->encode("Hello, world! <|im_end|> 123 ünïcode", true, true);
    (void)tokenizer->decode(ids, true);
  } catch (const std::exception&) {
  }
  return 0;
}
