// Chrome trace output (SPYRE_TRACE=path): one JSON array of complete events,
// one row per core engine, times in modelled microseconds. Launches are
// appended back to back; the file stays a valid JSON array after each one.
#pragma once

#include <string>

#include "dataflow/executable.h"
#include "spyre/sim/timing_table.h"

namespace spyre::sim {

// Appends `exe`'s static schedule to `path` as one launch on device `device`.
void append_trace(const std::string& path, const SimExecutable& exe, int device,
                  const rt::CostTable& table);

}  // namespace spyre::sim
