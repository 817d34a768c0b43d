// exp16's portable path with FMA (see exp16_builds.cpp).
#include "exp16_builds.cpp"  // NOLINT(bugprone-suspicious-include): the same source, other flags
