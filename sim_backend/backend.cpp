// Registers the "sim" backend at static initialisation of libspyre_sim.so.
#include <cstdlib>
#include <string>

#include "device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/registry.h"
#include "spyre/sim/sim.h"

namespace spyre::sim {
namespace {

// Reads a positive integer environment variable, or `fallback` when unset.
uint64_t env_count(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  rt::check(end != value && *end == '\0' && parsed > 0,
            rt::ErrorCode::kBackendError, "sim: ", name, "='", value,
            "' is not a positive integer");
  return parsed;
}

class SimBackend : public rt::Backend {
 public:
  std::string name() const override { return "sim"; }
  int device_count() const override {
    return static_cast<int>(env_count("SPYRE_SIM_DEVICES", 2));
  }
  std::unique_ptr<rt::Device> create_device(int index) override {
    rt::check(index >= 0 && index < device_count(),
              rt::ErrorCode::kInvalidArgument, "sim: device index ", index,
              " out of range: ", device_count(),
              " devices (set SPYRE_SIM_DEVICES for more)");
    uint64_t gib = env_count("SPYRE_SIM_MEMORY_GB", 128);
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
