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

// A device of the modelled chip (kSpyreChip in timing_table.h), or of a
// variant `chip` (tests plan for a smaller chip this way; its cost table is
// the emulator's own whatever `chip.costs` says).
std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes);
std::unique_ptr<rt::Device> make_sim_device(int index, uint64_t memory_bytes,
                                            const rt::ChipFigures& chip);

}  // namespace spyre::sim
