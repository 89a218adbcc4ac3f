// Functional execution of one launch: each core runs its instructions in
// program order; cores run cooperatively on the launching thread and, for a
// launch of at least `inline_cycles` of host work (SimExecutable::host_work),
// a helper thread; a core parks at a RingRecv whose send has not run
// yet. Small launches stay on one thread: handing work to a second thread
// costs more host time than they take.
//
// Failure atomicity: the only data-dependent failure after validation,
// patching and the device's own access check (SimDevice::execute) is a bad
// DmaGather or DmaScatter index (ring deadlocks are rejected at prepare). A
// program with either therefore keeps an undo log: every DmaStore and every
// scattered row saves the bytes it overwrites, and a failed launch restores
// them in reverse order, so device memory is unchanged. Stores stay direct (not
// buffered), so a later load in the same launch sees them.
#pragma once

#include <chrono>
#include <span>

#include "dataflow/executable.h"
#include "memory.h"

namespace spyre::sim {

struct Scratchpads;

// The host-time watchdog: a launch still running at `deadline` is aborted
// between instructions (and between runs of a long transfer) with a device
// error; what it stored before stays in device memory.
struct Watchdog {
  std::chrono::steady_clock::time_point deadline;
  uint64_t seconds = 0;  // the budget, for the message
};

void run_launch(const SimExecutable& exe,
                std::span<const rt::DevicePtr> addresses, DeviceMemory& memory,
                Scratchpads& pads, uint64_t inline_cycles,
                const Watchdog& watchdog);

}  // namespace spyre::sim
