#include "engine/backend/accelerator.h"

#include <cctype>
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_query.h"

namespace tandem::backend {
namespace {

// Tandem computes on CUDA GPUs once its CUDA backend lands (engine/backend/cuda); until then
// a GPU is detected and listed, but not used.
constexpr bool kCudaBackend = false;

std::string gpu_phrase(const kernels::cuda::DeviceQuery& q) {
  for (const auto& d : q.devices) {
    if (d.usable) return d.name;
  }
  return {};
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
      return r;
    case AcceleratorChoice::Emulated:
      r.backend = std::make_unique<EmulatedBackend>(request.emulated, spec);
      r.note = "on the " + r.backend->description();
      return r;
    case AcceleratorChoice::Cuda:
    case AcceleratorChoice::Auto: {
      const kernels::cuda::DeviceQuery q = kernels::cuda::query_devices();
      const std::string gpu = gpu_phrase(q);
      std::string why;
      if (!q.compiled) {
        why = "this Tandem was built without CUDA";
      } else if (gpu.empty()) {
        why = q.reason.empty() ? "no usable NVIDIA GPU was found" : q.reason;
      } else if (!kCudaBackend) {
        why = "the " + gpu + " was found, but this version of Tandem cannot compute on a GPU yet";
      }
      if (request.choice == AcceleratorChoice::Cuda) {
        throw std::invalid_argument("--accelerator cuda cannot be used: " + why +
                                    ". Run with --accelerator none (the CPU alone), or "
                                    "--accelerator emulated to try the hybrid engine on the CPU.");
      }
      r.note = why + ": everything runs on the CPU";
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
