// Loaded programs of eager ops and compiled kernels, per device.
//
// Building and loading a program (validate, patch plan, prepare) costs far
// more than a launch, so programs are kept, keyed by everything they depend
// on (program_key.h: shapes, dtypes, placements, scalars, as a caller's
// kernels::KeyWriter wrote them). A hit costs one lookup with the key's
// precomputed hash. Two caches:
// - bounded (eager ops): the least recently used programs are evicted beyond
//   program_cache_capacity(); holders of a program (a queued launch) keep it
//   loaded after its eviction;
// - pinned (compiled kernels, which keep a reference): never evicted.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/FunctionRef.h>

#include <cstddef>
#include <memory>
#include <string_view>

#include "ops/program_key.h"
#include "spyre/runtime/patcher.h"

namespace spyre::torch_glue::ops {

using LoadedProgramPtr = std::shared_ptr<const rt::LoadedProgram>;

// The bounded cache's program under `key` (now the most recent), built and
// loaded by `build` on a miss.
LoadedProgramPtr lookup_program(c10::DeviceIndex device, const ProgramKey& key,
                                c10::function_ref<rt::Program()> build);
// The bounded cache's program under `key` (now the most recent), or null.
LoadedProgramPtr find_program(c10::DeviceIndex device, KeyView key);
// `program` loaded on `device`, cached nowhere (a program that never
// repeats).
LoadedProgramPtr load_program(c10::DeviceIndex device, rt::Program program);

// The pinned program of `id` (the caller's name for it, e.g. a compiled
// kernel's digest): loaded for the life of the process.
const rt::LoadedProgram& cached_program(c10::DeviceIndex device,
                                        std::string_view id,
                                        c10::function_ref<rt::Program()> build);

// Programs the bounded cache keeps per device: SPYRE_PROGRAM_CACHE_SIZE, else
// kDefaultProgramCacheCapacity. Setting it evicts down to the new size.
constexpr size_t kDefaultProgramCacheCapacity = 4096;
size_t program_cache_capacity();
void set_program_cache_capacity(size_t capacity);
// Programs now in the bounded caches, all devices.
size_t cached_program_count();

}  // namespace spyre::torch_glue::ops
