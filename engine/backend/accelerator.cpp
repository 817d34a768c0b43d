#include "engine/backend/accelerator.h"

#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_query.h"
#if TANDEM_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace tandem::backend {
namespace {

// `auto` leaves the CUDA backend to be asked for by name (--accelerator cuda). It has passed
// its tests on one H200 (2026-12-04), not yet on the 24-48 GB cards Tandem's users own, and
// its layerwise prefill copies experts at about 1 GB/s (docs/benchmarks.md): a GPU chosen for
// every user waits for scripts/gpu-check.sh on such a card and for faster staging.
constexpr bool kCudaChosenByAuto = false;

// The GPU asked for, or the first usable one; null with `why` said when there is none.
const kernels::cuda::DeviceInfo* choose_gpu(const kernels::cuda::DeviceQuery& q, int wanted,
                                            std::string& why) {
  if (!q.compiled) {
    why = "this Tandem was built without CUDA";
    return nullptr;
  }
  if (q.devices.empty()) {
    why = q.reason.empty() ? "no NVIDIA GPU was found" : q.reason;
    return nullptr;
  }
  if (wanted >= 0) {
    for (const auto& d : q.devices) {
      if (d.index != wanted) continue;
      if (d.usable) return &d;
      why = "GPU " + std::to_string(wanted) + " (" + d.name + ") cannot be used: " + d.not_usable;
      return nullptr;
    }
    why = "there is no GPU " + std::to_string(wanted) + " (this computer has " +
          std::to_string(q.devices.size()) + ", numbered from 0)";
    return nullptr;
  }
  for (const auto& d : q.devices)
    if (d.usable) return &d;
  why = "the " + q.devices.front().name + " cannot be used: " + q.devices.front().not_usable;
  return nullptr;
}

}  // namespace

std::string_view accelerator_choice_name(AcceleratorChoice c) {
  switch (c) {
    case AcceleratorChoice::Auto:
      return "auto";
    case AcceleratorChoice::Cuda:
      return "cuda";
    case AcceleratorChoice::Emulated:
      return "emulated";
    case AcceleratorChoice::None:
      return "none";
  }
  return "auto";
}

bool parse_accelerator_choice(std::string_view name, AcceleratorChoice& out) {
  for (AcceleratorChoice c : {AcceleratorChoice::Auto, AcceleratorChoice::Cuda,
                              AcceleratorChoice::Emulated, AcceleratorChoice::None}) {
    if (name == accelerator_choice_name(c)) {
      out = c;
      return true;
    }
  }
  return false;
}

AcceleratorResult make_accelerator(const AcceleratorRequest& request,
                                   const model::ModelSpec& spec) {
  AcceleratorResult r;
  switch (request.choice) {
    case AcceleratorChoice::None:
      r.note = "no accelerator: everything runs on the CPU";
      r.reason = "the settings ask for the CPU alone";
      return r;
    case AcceleratorChoice::Emulated:
      r.backend = std::make_unique<EmulatedBackend>(request.emulated, spec);
      r.note = "on the " + r.backend->description();
      return r;
    case AcceleratorChoice::Cuda:
    case AcceleratorChoice::Auto: {
      const kernels::cuda::DeviceQuery q = kernels::cuda::query_devices();
      std::string why;
      const kernels::cuda::DeviceInfo* gpu = choose_gpu(q, request.gpu.gpu, why);
#if TANDEM_HAVE_CUDA
      if (gpu != nullptr && request.choice == AcceleratorChoice::Auto && !kCudaChosenByAuto) {
        why = "the " + gpu->name +
              " was found; Tandem computes on it when asked to with --accelerator cuda (its "
              "CUDA backend has been tested on one H200 so far)";
        gpu = nullptr;
      }
      if (gpu != nullptr) {
        CudaOptions options;
        options.device = gpu->index;
        options.memory_bytes = request.gpu.memory_bytes;
        try {
          r.backend = std::make_unique<CudaBackend>(options, spec);
          r.note = "on the " + r.backend->description();
          if (q.devices.size() > 1) {
            r.note += "; GPU " + std::to_string(gpu->index) + " of the " +
                      std::to_string(q.devices.size()) +
                      " found (this version computes on one GPU; choose another with --gpu N)";
          }
          return r;
        } catch (const std::exception& e) {
          why = "the " + gpu->name + " could not be set up (" + e.what() + ")";
        }
      }
#else
      (void)gpu;
#endif
      if (request.choice == AcceleratorChoice::Cuda) {
        throw std::invalid_argument("--accelerator cuda cannot be used: " + why +
                                    ". Run with --accelerator none (the CPU alone), or "
                                    "--accelerator emulated to try the hybrid engine on the CPU.");
      }
      r.note = why + ": everything runs on the CPU";
      r.reason = why;
      return r;
    }
  }
  return r;
}

bool parse_byte_size(std::string_view text, std::uint64_t& bytes) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return false;
  double value = 0;
  try {
    value = std::stod(std::string(text.substr(0, i)));
  } catch (const std::exception&) {
    return false;
  }
  std::string unit(text.substr(i));
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.ends_with("IB"))
    unit.resize(unit.size() - 2);
  else if (unit.size() > 1 && unit.ends_with("B"))
    unit.resize(unit.size() - 1);
  double scale = 1;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return false;
  const double b = value * scale;
  if (!std::isfinite(b) || b < 1 || b > 1.8e19) return false;
  bytes = static_cast<std::uint64_t>(std::llround(b));
  return true;
}

}  // namespace tandem::backend
