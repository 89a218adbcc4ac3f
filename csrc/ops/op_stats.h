// Counters of the eager launch path (torch.spyre.op_stats()) and the
// modelled device time of the work that ran (torch.spyre.device_time_stats()).
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>

#include "spyre/runtime/device.h"

namespace spyre::torch_glue::ops {

struct OpStats {
  uint64_t launches = 0;
  uint64_t program_hits = 0;
  uint64_t program_misses = 0;  // programs built and loaded
  uint64_t device_materializations = 0;
  uint64_t host_materializations = 0;
  uint64_t program_evictions = 0;  // from the bounded cache
  uint64_t cached_programs = 0;    // now in the bounded caches, all devices
};
OpStats op_stats();
void reset_op_stats();

// The counters behind op_stats(), counted where the events happen (the
// program caches, the launch, materialize).
struct OpCounters {
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> program_hits{0};
  std::atomic<uint64_t> program_misses{0};
  std::atomic<uint64_t> device_materializations{0};
  std::atomic<uint64_t> host_materializations{0};
  std::atomic<uint64_t> program_evictions{0};
};
OpCounters& op_counters();

// Sums over all devices of the work that has run since the last reset
// (queued work counts once it ran: synchronize before reading).
struct DeviceTimeStats {
  uint64_t launches = 0;
  double launch_ns = 0;           // modelled time of kernel launches
  uint64_t launch_dma_bytes = 0;  // device memory <-> scratchpad
  uint64_t copies = 0;            // host<->device and device<->device
  double copy_ns = 0;             // modelled time of those copies
  uint64_t copy_bytes = 0;        // device bytes moved by them
  uint64_t link_transfers = 0;    // card to card (peer copies, collectives)
  double link_ns = 0;             // modelled time of those transfers
  uint64_t link_bytes = 0;        // bytes each transfer put on the link
};
DeviceTimeStats device_time_stats();
void reset_device_time_stats();
// Called by copy work (on the stream's thread) once it ran.
void record_copy_time(double ns, uint64_t bytes);
// Called by card-to-card transfers once they ran.
void record_link_time(double ns, uint64_t bytes);
// Called by a launch (on the stream's thread) once it ran: the last-launch
// figures of its device (torch.spyre.last_launch_stats()) and the totals.
void record_finished_launch(c10::DeviceIndex device,
                            const rt::LaunchStats& stats);

}  // namespace spyre::torch_glue::ops
