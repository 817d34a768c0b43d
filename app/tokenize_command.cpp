#include "app/tokenize_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/text/tokenizer.h"

namespace tandem::app {

int run_tokenize(const TokenizeOptions& o) {
  std::string text = o.text;
  if (!o.file.empty()) {
    std::ifstream in(o.file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "tandem: cannot read %s; check the path.\n", o.file.c_str());
      return 2;
    }
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  std::unique_ptr<text::Tokenizer> tokenizer;
  try {
    tokenizer = text::load_tokenizer(o.model);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
    return 1;
  }
  const auto ids = tokenizer->encode(text, !o.no_special, !o.no_special);
  if (o.json) {
    nlohmann::json pieces = nlohmann::json::array();
    for (auto id : ids) pieces.push_back(tokenizer->token_text(id));
    std::cout << nlohmann::json{{"ids", ids}, {"tokens", pieces}, {"count", ids.size()}}.dump(
                     2, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  }
  return 0;
}

}  // namespace tandem::app
