// The speeds of each usable GPU (kernels/cuda/device_query.h: GpuSpeeds), measured once per
// GPU and driver at the first start and kept in the user's cache folder, so that the planner
// sizes its choices by this computer's bus and GPU and later starts cost nothing.
#pragma once

#include <functional>
#include <string>

#include "kernels/cuda/device_query.h"

namespace tandem::hw {

// $XDG_CACHE_HOME/tandem/gpu-speeds.json, or ~/.cache/tandem/gpu-speeds.json; empty when
// neither variable is set.
std::string default_gpu_speeds_cache();

using MeasureGpuSpeeds =
    std::function<bool(int device, kernels::cuda::GpuSpeeds& speeds, std::string& error)>;

// Fills the speeds of every usable GPU in `gpus`: from the cache file where it has this GPU
// (same name, PCI bus, memory and driver), else measured with `measure` and added to the file
// (written whole, then renamed into place). A measurement that fails leaves the speeds at 0
// and is logged; a cache that cannot be read or written is measured again next time.
void attach_gpu_speeds(kernels::cuda::DeviceQuery& gpus, const std::string& cache_path,
                       const MeasureGpuSpeeds& measure = kernels::cuda::measure_gpu_speeds);

}  // namespace tandem::hw
