// Which accelerator the forward pass runs on, as the user chooses it with --accelerator:
// auto (a usable GPU when Tandem can compute on one, else the CPU alone), cuda, emulated (the
// CPU-run accelerator of engine/backend/emulated, for trying and measuring the hybrid engine
// without a GPU) or none.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/backend/backend.h"
#include "engine/backend/emulated/emulated_backend.h"

namespace tandem::backend {

enum class AcceleratorChoice { Auto, Cuda, Emulated, None };
std::string_view accelerator_choice_name(AcceleratorChoice c);  // "auto", "cuda", ...
bool parse_accelerator_choice(std::string_view name, AcceleratorChoice& out);

// The CUDA GPU to use, when one is: `gpu` -1 is the first usable one; `memory_bytes` 0 is its
// free memory less a reserve (engine/backend/cuda/cuda_backend.h).
struct GpuRequest {
  int gpu = -1;
  std::uint64_t memory_bytes = 0;
};

struct AcceleratorRequest {
  AcceleratorChoice choice = AcceleratorChoice::Auto;
  EmulatedOptions emulated;
  GpuRequest gpu;
};

struct AcceleratorResult {
  std::unique_ptr<Backend> backend;  // null: the CPU alone
  // What was chosen and why, for the user ("no usable GPU: running on the CPU alone").
  std::string note;
  // Without an accelerator, why in a few words ("no NVIDIA GPU was found"); else empty.
  std::string reason;
};

// Throws std::invalid_argument with a sentence when the choice cannot be had (cuda without a
// GPU Tandem can compute on, a GPU index that is not there). With several GPUs, one is used
// and the note says which.
AcceleratorResult make_accelerator(const AcceleratorRequest& request, const model::ModelSpec& spec);

// Parses a size such as "512M", "4G", "4GiB" or "1073741824" into bytes; false for anything
// else.
bool parse_byte_size(std::string_view text, std::uint64_t& bytes);

}  // namespace tandem::backend
