// Where oneDNN 2.6 must take a format's products: INT8 on AVX-512 with VNNI (brg:avx512_core_vnni
// and later), BF16 on AVX-512 (F, BW, VL, DQ). Tests that skip on kernels::onednn_refusal fail
// instead on such a CPU, so a refusal never hides a test where the hardware exists. (CPUs with
// AVX-VNNI alone may go either way: oneDNN's choice there is not relied on.)
#pragma once

#include "kernels/cpu/isa.h"
#include "kernels/cpu/packed/matmul.h"

namespace tandem::test {

inline bool onednn_hardware_for(kernels::PackedFormat format) {
  const kernels::IsaFeatures& u = kernels::detect_isa().usable;
  const bool avx512 = u.avx512f && u.avx512bw && u.avx512vl && u.avx512dq;
  return format == kernels::PackedFormat::Int8   ? avx512 && u.avx512_vnni
         : format == kernels::PackedFormat::Bf16 ? avx512
                                                 : false;
}

}  // namespace tandem::test
