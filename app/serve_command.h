#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/engine_flags.h"

namespace tandem::app {

struct ServeOptions {
  std::string model;
  int threads = 0;
  int pools = 0;
  std::int64_t context = 0;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // also TANDEM_API_KEY
  std::vector<std::string> cors;
  int max_waiting = 8;
  int max_body_mib = 8;
  EngineFlags engine;
};

// `tandem serve`: loads the model and answers OpenAI's API until interrupted.
int run_serve(int argc, char** argv, const ServeOptions& options);

}  // namespace tandem::app
