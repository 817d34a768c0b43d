#include "kernels/cpu/isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace tandem::kernels {

const std::array<IsaFeatureInfo, 18> kIsaFeatureTable = {{
    {"sse4_2", "sse4_2", &IsaFeatures::sse42},
    {"avx", "avx", &IsaFeatures::avx},
    {"avx2", "avx2", &IsaFeatures::avx2},
    {"fma", "fma", &IsaFeatures::fma},
    {"f16c", "f16c", &IsaFeatures::f16c},
    {"bmi2", "bmi2", &IsaFeatures::bmi2},
    {"avx_vnni", "avx_vnni", &IsaFeatures::avx_vnni},
    {"avx512f", "avx512f", &IsaFeatures::avx512f},
    {"avx512bw", "avx512bw", &IsaFeatures::avx512bw},
    {"avx512vl", "avx512vl", &IsaFeatures::avx512vl},
    {"avx512dq", "avx512dq", &IsaFeatures::avx512dq},
    {"avx512_vnni", "avx512_vnni", &IsaFeatures::avx512_vnni},
    {"avx512_bf16", "avx512_bf16", &IsaFeatures::avx512_bf16},
    {"avx512_fp16", "avx512_fp16", &IsaFeatures::avx512_fp16},
    {"avx512_vbmi", "avx512vbmi", &IsaFeatures::avx512_vbmi},
    {"amx_tile", "amx_tile", &IsaFeatures::amx_tile},
    {"amx_int8", "amx_int8", &IsaFeatures::amx_int8},
    {"amx_bf16", "amx_bf16", &IsaFeatures::amx_bf16},
}};

namespace {

struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool bit(unsigned value, int index) {
  return (value >> index) & 1u;
}

unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  // xgetbv is only legal when CPUID.1:ECX.OSXSAVE is set; the caller checks.
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// Linux asks each process to request the AMX tile-data state before using it
// (Documentation/arch/x86/xstate.rst).
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

AmxPermission request_amx_permission(std::string& detail) {
  unsigned long bitmask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bitmask) == 0 &&
      (bitmask & (1ul << kXfeatureXtiledata))) {
    return AmxPermission::Granted;
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
    return AmxPermission::Granted;
  }
  detail = std::string("the CPU has AMX but Linux refused to enable it for this process (") +
           std::strerror(errno) + "); a kernel of version 5.16 or newer is needed";
  return AmxPermission::Denied;
}

IsaReport detect_now() {
  IsaReport report;
  Regs r0 = cpuid(0);
  const unsigned max_leaf = r0.eax;
  char vendor[13] = {};
  std::memcpy(vendor + 0, &r0.ebx, 4);
  std::memcpy(vendor + 4, &r0.edx, 4);
  std::memcpy(vendor + 8, &r0.ecx, 4);
  report.identity.vendor = vendor;

  if (cpuid(0x80000000).eax >= 0x80000004) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      Regs r = cpuid(0x80000002 + i);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    std::string b = brand;
    const auto first = b.find_first_not_of(' ');
    const auto last = b.find_last_not_of(' ');
    report.identity.brand = first == std::string::npos ? "" : b.substr(first, last - first + 1);
  }

  IsaFeatures& f = report.cpuid;
  bool osxsave = false;
  if (max_leaf >= 1) {
    Regs r1 = cpuid(1);
    const unsigned base_family = (r1.eax >> 8) & 0xf;
    const unsigned base_model = (r1.eax >> 4) & 0xf;
    report.identity.stepping = static_cast<int>(r1.eax & 0xf);
    report.identity.family =
        static_cast<int>(base_family == 0xf ? base_family + ((r1.eax >> 20) & 0xff) : base_family);
    report.identity.model = static_cast<int>((base_family == 0x6 || base_family == 0xf)
                                                 ? (((r1.eax >> 16) & 0xf) << 4) | base_model
                                                 : base_model);
    f.sse42 = bit(r1.ecx, 20);
    f.fma = bit(r1.ecx, 12);
    osxsave = bit(r1.ecx, 27);
    f.avx = bit(r1.ecx, 28);
    f.f16c = bit(r1.ecx, 29);
  }
  if (max_leaf >= 7) {
    Regs r7 = cpuid(7, 0);
    f.avx2 = bit(r7.ebx, 5);
    f.bmi2 = bit(r7.ebx, 8);
    f.avx512f = bit(r7.ebx, 16);
    f.avx512dq = bit(r7.ebx, 17);
    f.avx512bw = bit(r7.ebx, 30);
    f.avx512vl = bit(r7.ebx, 31);
    f.avx512_vbmi = bit(r7.ecx, 1);
    f.avx512_vnni = bit(r7.ecx, 11);
    f.amx_bf16 = bit(r7.edx, 22);
    f.avx512_fp16 = bit(r7.edx, 23);
    f.amx_tile = bit(r7.edx, 24);
    f.amx_int8 = bit(r7.edx, 25);
    if (r7.eax >= 1) {
      Regs r71 = cpuid(7, 1);
      f.avx_vnni = bit(r71.eax, 4);
      f.avx512_bf16 = bit(r71.eax, 5);
    }
  }

  if (osxsave) {
    const unsigned long long xcr0 = read_xcr0();
    report.os_avx = (xcr0 & 0x6) == 0x6;          // SSE and AVX state
    report.os_avx512 = (xcr0 & 0xe0) == 0xe0;     // opmask, ZMM_Hi256, Hi16_ZMM
    report.os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
  }

  bool amx_permitted = false;
  if (f.amx_tile && report.os_amx) {
    report.amx_permission = request_amx_permission(report.amx_detail);
    amx_permitted = report.amx_permission == AmxPermission::Granted;
  } else if (f.amx_tile) {
    report.amx_detail = "the CPU has AMX but the operating system does not enable its tile state";
  } else {
    report.amx_detail = "this CPU has no AMX units";
  }
  report.usable = usable_features(f, report.os_avx, report.os_avx512, report.os_amx, amx_permitted);
  return report;
}

}  // namespace

IsaFeatures usable_features(const IsaFeatures& c, bool os_avx, bool os_avx512, bool os_amx,
                            bool amx_permitted) {
  IsaFeatures u;
  u.sse42 = c.sse42;
  u.avx = c.avx && os_avx;
  u.avx2 = c.avx2 && u.avx;
  u.fma = c.fma && u.avx;
  u.f16c = c.f16c && u.avx;
  u.bmi2 = c.bmi2;  // general-purpose registers: no state for the OS to enable
  u.avx_vnni = c.avx_vnni && u.avx;
  const bool zmm = u.avx && os_avx512 && c.avx512f;
  u.avx512f = zmm;
  u.avx512bw = zmm && c.avx512bw;
  u.avx512vl = zmm && c.avx512vl;
  u.avx512dq = zmm && c.avx512dq;
  u.avx512_vnni = zmm && c.avx512_vnni;
  u.avx512_bf16 = zmm && c.avx512_bf16;
  u.avx512_fp16 = zmm && c.avx512_fp16;
  u.avx512_vbmi = zmm && c.avx512_vbmi;
  const bool tiles = c.amx_tile && os_amx && amx_permitted;
  u.amx_tile = tiles;
  u.amx_int8 = tiles && c.amx_int8;
  u.amx_bf16 = tiles && c.amx_bf16;
  return u;
}

const IsaReport& detect_isa() {
  static const IsaReport report = detect_now();
  return report;
}

bool variant_supported(CpuVariant variant, const IsaFeatures& u) {
  const bool avx2 = u.avx2 && u.fma && u.f16c;
  // BMI2's PDEP builds the AVX-512 IQ products' grid indices; every AVX-512 CPU has it.
  const bool avx512 =
      avx2 && u.avx512f && u.avx512bw && u.avx512vl && u.avx512dq && u.avx512_vnni && u.bmi2;
  switch (variant) {
    case CpuVariant::Scalar:
      return true;
    case CpuVariant::Avx2:
      return avx2;
    case CpuVariant::Avx512:
      return avx512;
    case CpuVariant::Amx:
      return avx512 && u.amx_tile && u.amx_int8 && u.amx_bf16;
  }
  return false;
}

CpuVariant best_variant(const IsaFeatures& usable) {
  for (CpuVariant v : {CpuVariant::Amx, CpuVariant::Avx512, CpuVariant::Avx2}) {
    if (variant_supported(v, usable)) return v;
  }
  return CpuVariant::Scalar;
}

std::string_view variant_name(CpuVariant variant) {
  switch (variant) {
    case CpuVariant::Scalar:
      return "scalar";
    case CpuVariant::Avx2:
      return "avx2";
    case CpuVariant::Avx512:
      return "avx512";
    case CpuVariant::Amx:
      return "amx";
  }
  return "scalar";
}

bool parse_variant(std::string_view name, CpuVariant& out) {
  for (CpuVariant v : {CpuVariant::Scalar, CpuVariant::Avx2, CpuVariant::Avx512, CpuVariant::Amx}) {
    if (name == variant_name(v)) {
      out = v;
      return true;
    }
  }
  return false;
}

CpuVariant active_variant() {
  return forced_variant().value_or(best_variant(detect_isa().usable));
}

std::optional<CpuVariant> forced_variant() {
  const IsaFeatures& usable = detect_isa().usable;
  const char* forced = std::getenv("TANDEM_CPU_VARIANT");
  if (forced == nullptr || *forced == '\0') return std::nullopt;
  CpuVariant v;
  if (!parse_variant(forced, v)) {
    throw std::runtime_error(std::string("The CPU variant \"") + forced +
                             "\" (from --cpu-variant or TANDEM_CPU_VARIANT) is not one Tandem "
                             "has; use scalar, avx2, avx512 or amx.");
  }
  if (!variant_supported(v, usable)) {
    throw std::runtime_error(
        std::string("The CPU variant \"") + forced +
        "\" (from --cpu-variant or TANDEM_CPU_VARIANT) needs instructions this CPU does not "
        "have; the best it supports is " +
        std::string(variant_name(best_variant(usable))) + ".");
  }
  return v;
}

}  // namespace tandem::kernels
