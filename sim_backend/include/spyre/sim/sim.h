// The emulator backend "sim": registered at static initialisation of
// libspyre_sim.so. Devices can also be made directly (tests, benchmarks).
//
// Environment: SPYRE_SIM_DEVICES (device count, default 2),
// SPYRE_SIM_MEMORY_GB (GiB of device memory per device, default 128),
// SPYRE_TRACE=path (append a Chrome trace of every launch to `path`).
#pragma once

#include <cstdint>
#include <memory>

#include "spyre/runtime/device.h"

namespace spyre::sim {

inline constexpr uint32_t kNumCores = 32;
inline constexpr uint32_t kScratchpadBytes = 2u << 20;

std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes);

}  // namespace spyre::sim
