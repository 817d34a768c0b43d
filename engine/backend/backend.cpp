#include "engine/backend/backend.h"

#include "engine/hw/hardware_report.h"

namespace tandem::backend {

std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::Cpu:
      return "cpu";
    case BackendKind::Emulated:
      return "emulated";
    case BackendKind::Cuda:
      return "cuda";
  }
  return "cpu";
}

std::string_view kv_cache_format_name(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::Bf16:
      return "bf16";
    case KvCacheFormat::Int8:
      return "int8";
    case KvCacheFormat::F32:
      break;
  }
  return "f32";
}

kernels::CacheElements cache_elements(KvCacheFormat format) {
  switch (format) {
    case KvCacheFormat::Bf16:
      return kernels::CacheElements::Bf16;
    case KvCacheFormat::Int8:
      return kernels::CacheElements::Int8;
    case KvCacheFormat::F32:
      break;
  }
  return kernels::CacheElements::F32;
}

bool parse_kv_cache_format(std::string_view name, KvCacheFormat& out) {
  for (KvCacheFormat f : {KvCacheFormat::F32, KvCacheFormat::Bf16, KvCacheFormat::Int8}) {
    if (name == kv_cache_format_name(f)) {
      out = f;
      return true;
    }
  }
  return false;
}

DeviceOutOfMemory::DeviceOutOfMemory(const std::string& message, std::uint64_t requested_bytes,
                                     std::uint64_t free_bytes)
    : std::runtime_error(message), requested_(requested_bytes), free_(free_bytes) {}

DeviceOutOfMemory DeviceOutOfMemory::allocation(const std::string& device,
                                                std::uint64_t requested_bytes,
                                                std::uint64_t free_bytes,
                                                std::uint64_t budget_bytes) {
  return DeviceOutOfMemory(device + " is out of memory: " + hw::format_bytes(requested_bytes) +
                               " more were asked for, but only " + hw::format_bytes(free_bytes) +
                               " of its " + hw::format_bytes(budget_bytes) + " are free",
                           requested_bytes, free_bytes);
}

RoutingParams routing_params(const model::ModelSpec& spec) {
  RoutingParams p;
  p.experts = spec.num_experts;
  p.k = spec.experts_per_token;
  p.scoring = spec.scoring;
  p.groups = spec.n_group;
  p.top_groups = spec.topk_group;
  p.normalize = spec.norm_topk_prob;
  p.scaling = static_cast<float>(spec.routed_scaling_factor);
  return p;
}

}  // namespace tandem::backend
