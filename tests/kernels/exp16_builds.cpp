// exp16 built twice for tst_attention: as the AVX-512 attention kernels compile it (this file
// with their flags) and as the portable code compiles it for a CPU with FMA (exp16_fma.cpp, the
// same source with AVX2 and FMA), so that the two differ only in exp16's own two paths.
// tst_attention calls the AVX-512 build only where the CPU has AVX-512.
#include <cstdint>

#include "kernels/cpu/vec16.h"

namespace tandem::kernels::testing {

#if defined(__AVX512F__)
void exp16_avx512(const float* x, float* y, std::int64_t n) {
#else
void exp16_portable(const float* x, float* y, std::int64_t n) {
#endif
  for (std::int64_t i = 0; i + 16 <= n; i += 16) store16(y + i, exp16(load16(x + i)));
}

}  // namespace tandem::kernels::testing
