// The one copy of the containers' code that baseline_std.h points the variant files to,
// compiled without any instruction-set flags.
#include "kernels/cpu/baseline_std.h"

template class std::vector<float>;
template class std::vector<double>;
template class std::vector<float*>;
template class std::vector<std::int8_t>;
template class std::vector<std::uint8_t>;
template class std::vector<std::int16_t>;
template class std::vector<std::uint16_t>;
template class std::vector<std::int32_t>;
template class std::vector<std::uint32_t>;
template class std::vector<std::int64_t>;
