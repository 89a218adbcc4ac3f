// Registers the "sim" backend at static initialisation of libspyre_sim.so.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/registry.h"
#include "spyre/sim/sim.h"

namespace spyre::sim {
namespace {

// Reads an integer in [1, max] from the environment, or `fallback` when
// unset. Digits only: strtoull alone would take "-1" as 2^64 - 1, which
// became a device count of -1.
uint64_t env_count(const char* name, uint64_t fallback, uint64_t max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  bool digits = std::strspn(value, "0123456789") == std::strlen(value);
  errno = 0;
  unsigned long long parsed = digits ? std::strtoull(value, nullptr, 10) : 0;
  rt::check(digits && errno == 0 && parsed >= 1 && parsed <= max,
            rt::ErrorCode::kBackendError, "sim: ", name, "='", value,
            "' is not an integer in [1, ", max, "]");
  return parsed;
}

// Bounds that keep the arithmetic sane; the host's address space is the
// practical memory limit (a reservation that fails says so).
constexpr uint64_t kMaxDevices = 1024;
constexpr uint64_t kMaxMemoryGiB = uint64_t{1} << 20;

class SimBackend : public rt::Backend {
 public:
  std::string name() const override { return "sim"; }
  int device_count() const override {
    return static_cast<int>(env_count("SPYRE_SIM_DEVICES", 2, kMaxDevices));
  }
  std::unique_ptr<rt::Device> create_device(int index) override {
    rt::check(index >= 0 && index < device_count(),
              rt::ErrorCode::kInvalidArgument, "sim: device index ", index,
              " out of range: ", device_count(),
              " devices (set SPYRE_SIM_DEVICES for more)");
    uint64_t gib = env_count("SPYRE_SIM_MEMORY_GB", 128, kMaxMemoryGiB);
    return make_sim_device(index, gib << 30);
  }
};

const rt::BackendRegistration registration("sim", [] {
  return std::make_unique<SimBackend>();
});

}  // namespace

std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes) {
  return std::make_unique<SimDevice>(index, memory_bytes);
}

}  // namespace spyre::sim
