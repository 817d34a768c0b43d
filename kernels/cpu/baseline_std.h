// The standard containers' out-of-line code, compiled once for every CPU (baseline_std.cpp)
// and never in the variant files built for AVX2 or AVX-512. Each file that instantiates a
// template emits its own copy under one symbol, and the linker keeps any one of them: a
// variant file's copy of std::vector<float>::resize, say, compiled with AVX-512 instructions,
// would then run on every CPU and stop one without AVX-512 (SIGILL in std::vector<signed
// char>::_M_default_append, seen on a Zen 3 in the sanitizer build). Every variant file
// includes this header first, so that it refers to the copies below instead of making its own.
#pragma once

#include <cstdint>
#include <vector>

extern template class std::vector<float>;
extern template class std::vector<double>;
extern template class std::vector<float*>;
extern template class std::vector<std::int8_t>;
extern template class std::vector<std::uint8_t>;
extern template class std::vector<std::int16_t>;
extern template class std::vector<std::uint16_t>;
extern template class std::vector<std::int32_t>;
extern template class std::vector<std::uint32_t>;
extern template class std::vector<std::int64_t>;
