// Registers the "sim" backend at static initialisation of libspyre_sim.so.
#include <string>

#include "device.h"
#include "env.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/registry.h"
#include "spyre/sim/sim.h"
#include "spyre/sim/timing_table.h"

namespace spyre::sim {
namespace {

// Bounds that keep the arithmetic sane; the host's address space is the
// practical memory limit (a reservation that fails says so).
constexpr uint64_t kMaxDevices = 1024;
constexpr uint64_t kMaxMemoryGiB = uint64_t{1} << 20;
constexpr uint64_t kMaxCores = 256;
constexpr uint64_t kMaxScratchpadKiB = 64 * 1024;

class SimBackend : public rt::Backend {
 public:
  std::string name() const override { return "sim"; }
  int device_count() const override {
    return static_cast<int>(
        env_integer("SPYRE_SIM_DEVICES", 2, 1, kMaxDevices));
  }
  std::unique_ptr<rt::Device> create_device(int index) override {
    rt::check(index >= 0 && index < device_count(),
              rt::ErrorCode::kInvalidArgument, "sim: device index ", index,
              " out of range: ", device_count(),
              " devices (set SPYRE_SIM_DEVICES for more)");
    uint64_t gib = env_integer("SPYRE_SIM_MEMORY_GB", 128, 1, kMaxMemoryGiB);
    return make_sim_device(index, gib << 30, chip_from_environment());
  }

 private:
  // The modelled chip, or a variant with fewer cores or another scratchpad
  // size (SPYRE_SIM_CORES, SPYRE_SIM_SCRATCHPAD_KIB), so that tests can show
  // every planner reads the device's figures.
  static rt::ChipFigures chip_from_environment() {
    rt::ChipFigures chip = kSpyreChip;
    chip.num_cores = static_cast<uint32_t>(
        env_integer("SPYRE_SIM_CORES", chip.num_cores, 1, kMaxCores));
    const uint64_t min_kib = chip.scratchpad_reserve / 1024 + 1;
    chip.scratchpad_bytes = static_cast<uint32_t>(
        env_integer("SPYRE_SIM_SCRATCHPAD_KIB", chip.scratchpad_bytes / 1024,
                    min_kib, kMaxScratchpadKiB) *
        1024);
    return chip;
  }
};

const rt::BackendRegistration registration("sim", [] {
  return std::make_unique<SimBackend>();
});

}  // namespace

std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes) {
  return make_sim_device(index, memory_bytes, kSpyreChip);
}

std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes,
                                            const rt::ChipFigures& chip) {
  return std::make_unique<SimDevice>(index, memory_bytes, chip);
}

}  // namespace spyre::sim
