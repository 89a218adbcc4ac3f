#include "ops/op_stats.h"

#include <mutex>

#include "ops/program_cache.h"
#include "spyre/runtime/runtime.h"

namespace spyre::torch_glue::ops {
namespace {

// Modelled device time of work that ran; added to on the streams' threads.
class DeviceTimeTotals {
 public:
  void add_launch(const rt::LaunchStats& s) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.launches;
    stats_.launch_ns += s.time_ns;
    stats_.launch_dma_bytes += s.dma_bytes;
  }
  void add_copy(double ns, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.copies;
    stats_.copy_ns += ns;
    stats_.copy_bytes += bytes;
  }
  void add_link(double ns, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.link_transfers;
    stats_.link_ns += ns;
    stats_.link_bytes += bytes;
  }
  DeviceTimeStats get() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = DeviceTimeStats{};
  }

 private:
  std::mutex mutex_;
  DeviceTimeStats stats_;
};

DeviceTimeTotals& device_time_totals() {
  static DeviceTimeTotals totals;
  return totals;
}

}  // namespace

OpCounters& op_counters() {
  static OpCounters all;
  return all;
}

OpStats op_stats() {
  const OpCounters& c = op_counters();
  return OpStats{c.launches,
                 c.program_hits,
                 c.program_misses,
                 c.device_materializations,
                 c.host_materializations,
                 c.program_evictions,
                 cached_program_count()};
}

void reset_op_stats() {
  OpCounters& c = op_counters();
  c.launches = 0;
  c.program_hits = 0;
  c.program_misses = 0;
  c.device_materializations = 0;
  c.host_materializations = 0;
  c.program_evictions = 0;
}

DeviceTimeStats device_time_stats() { return device_time_totals().get(); }

void reset_device_time_stats() { device_time_totals().reset(); }

void record_copy_time(double ns, uint64_t bytes) {
  device_time_totals().add_copy(ns, bytes);
}

void record_link_time(double ns, uint64_t bytes) {
  device_time_totals().add_link(ns, bytes);
}

void record_finished_launch(c10::DeviceIndex device,
                            const rt::LaunchStats& stats) {
  rt::Runtime::get().record_launch_stats(device, stats);
  device_time_totals().add_launch(stats);
}

}  // namespace spyre::torch_glue::ops
