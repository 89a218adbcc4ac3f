// The emulator's settings from the environment.
#pragma once

#include <cstdint>

namespace spyre::sim {

// An integer in [min, max] from environment variable `name`, or `fallback`
// when it is unset or empty. Anything else (a sign, a suffix, out of range)
// raises kBackendError naming the variable and the accepted range.
uint64_t env_integer(const char* name, uint64_t fallback, uint64_t min,
                     uint64_t max);

}  // namespace spyre::sim
