#include "env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "spyre/runtime/error.h"

namespace spyre::sim {

uint64_t env_integer(const char* name, uint64_t fallback, uint64_t min,
                     uint64_t max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  // Digits only: strtoull alone would take "-1" as 2^64 - 1.
  const bool digits = std::strspn(value, "0123456789") == std::strlen(value);
  errno = 0;
  const unsigned long long parsed =
      digits ? std::strtoull(value, nullptr, 10) : 0;
  rt::check(digits && errno == 0 && parsed >= min && parsed <= max,
            rt::ErrorCode::kBackendError, "sim: ", name, "='", value,
            "' is not an integer in [", min, ", ", max, "]");
  return parsed;
}

}  // namespace spyre::sim
