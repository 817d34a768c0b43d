// The last-position logits llama.cpp computes for token sequences on a GGUF file: the second
// oracle of tests/tools/make_gguf_model_fixtures.py (--llama-cpp DIR). Not part of Tandem's
// build: the fixture script compiles it against a llama.cpp (or ik_llama.cpp) build, defining
// IK_LLAMA for ik_llama.cpp, whose older API (and switches for its fused paths) it then uses.
//
//   llama_logits MODEL.gguf < ids.txt > logits.txt
//
// Each input line is one prompt's token ids, separated by spaces; each output line is that
// prompt's last-position logits.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {
void quiet(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: llama_logits MODEL.gguf < ids.txt\n");
    return 2;
  }
  llama_log_set(quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "%s: llama.cpp could not load it\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
#ifdef IK_LLAMA
  cp.fused_moe_up_gate = false;
  cp.fused_up_gate = false;
  cp.fused_mmad = false;
  cp.rope_cache = false;
  cp.graph_reuse = false;
  cp.flash_attn = false;
#else
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // as for ik_llama.cpp: the plain graph
#endif
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "%s: llama.cpp could not make a context\n", argv[1]);
    return 1;
  }
#ifdef IK_LLAMA
  const int vocab = llama_n_vocab(model);
#else
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
#endif
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::vector<llama_token> ids;
    for (llama_token t; in >> t;) ids.push_back(t);
    if (ids.empty()) continue;
#ifdef IK_LLAMA
    llama_kv_cache_clear(ctx);
    const llama_batch batch = llama_batch_get_one(ids.data(), static_cast<int>(ids.size()), 0, 0);
#else
    llama_memory_clear(llama_get_memory(ctx), true);
    const llama_batch batch = llama_batch_get_one(ids.data(), static_cast<int>(ids.size()));
#endif
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "%s: llama_decode failed\n", argv[1]);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, static_cast<int>(ids.size()) - 1);
    for (int i = 0; i < vocab; ++i) std::printf(i == 0 ? "%.9g" : " %.9g", logits[i]);
    std::printf("\n");
  }
  llama_free(ctx);
#ifdef IK_LLAMA
  llama_free_model(model);
#else
  llama_model_free(model);
#endif
  llama_backend_free();
  return 0;
}
