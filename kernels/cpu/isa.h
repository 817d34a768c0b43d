// Instruction-set detection for kernel dispatch: what the CPU reports through CPUID and
// what the operating system has enabled (XGETBV, and for AMX the Linux permission request).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::kernels {

struct IsaFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool bmi2 = false;
  bool avx_vnni = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx512_vbmi = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
};

// One row per feature, so reports, tests and JSON iterate the same list.
struct IsaFeatureInfo {
  std::string_view name;          // stable name used in reports and JSON ("avx512_vnni")
  std::string_view cpuinfo_flag;  // the flag Linux prints in /proc/cpuinfo
  bool IsaFeatures::*member;
};
extern const std::array<IsaFeatureInfo, 18> kIsaFeatureTable;

enum class AmxPermission {
  NotSupported,  // the CPU has no AMX (or the OS does not enable its state)
  Granted,       // arch_prctl(ARCH_REQ_XCOMP_PERM) succeeded for this process
  Denied,        // the CPU has AMX but the kernel refused the request
};

struct CpuIdentity {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string brand;   // "Intel(R) Xeon(R) Platinum 8480+"
  int family = 0;
  int model = 0;
  int stepping = 0;
};

struct IsaReport {
  CpuIdentity identity;
  IsaFeatures cpuid;       // what CPUID advertises
  IsaFeatures usable;      // advertised and enabled by the OS (and AMX permitted)
  bool os_avx = false;     // XCR0 has the SSE and AVX state
  bool os_avx512 = false;  // XCR0 has the opmask and ZMM state
  bool os_amx = false;     // XCR0 has the tile configuration and tile data state
  AmxPermission amx_permission = AmxPermission::NotSupported;
  std::string amx_detail;  // why AMX is not usable, in words; empty when it is
};

// Detects once per process (thread-safe) and caches; the first call that finds AMX
// requests the permission for the whole process.
const IsaReport& detect_isa();

// For tests and recorded hardware descriptions: derive usable features from raw inputs.
IsaFeatures usable_features(const IsaFeatures& cpuid, bool os_avx, bool os_avx512, bool os_amx,
                            bool amx_permitted);

// The CPU kernel variants, best last.
enum class CpuVariant { Scalar = 0, Avx2 = 1, Avx512 = 2, Amx = 3 };

bool variant_supported(CpuVariant variant, const IsaFeatures& usable);
CpuVariant best_variant(const IsaFeatures& usable);
std::string_view variant_name(CpuVariant variant);  // "scalar", "avx2", "avx512", "amx"
bool parse_variant(std::string_view name, CpuVariant& out);

// The variant kernels use: TANDEM_CPU_VARIANT when set and supported, else the best one.
// Throws std::runtime_error with a sentence when the forced variant is unknown or unsupported.
CpuVariant active_variant();
// The variant TANDEM_CPU_VARIANT (--cpu-variant) forces, if it is set; throws as
// active_variant does.
std::optional<CpuVariant> forced_variant();

}  // namespace tandem::kernels
