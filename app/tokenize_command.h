#pragma once

#include <string>

namespace tandem::app {

struct TokenizeOptions {
  std::string model;  // a model folder, tokenizer.json or .gguf file
  std::string text;
  std::string file;
  bool json = false;
  bool no_special = false;  // do not add BOS/EOS or parse special tokens
};

int run_tokenize(const TokenizeOptions& options);

}  // namespace tandem::app
