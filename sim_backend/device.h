// The emulated device: memory, copies, prepare (decode + static schedule)
// and functional execution of launches on a small pool of host threads.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "memory.h"
#include "spyre/runtime/device.h"
#include "spyre/sim/timing_table.h"

namespace spyre::sim {

class SimExecutable;

// One launch's scratchpads (per physical core, allocated on first use).
struct Scratchpads {
  uint32_t bytes = 0;  // each core's: the device's chip.scratchpad_bytes
  std::vector<std::unique_ptr<uint8_t[]>> cores;
};

class SimDevice : public rt::Device {
 public:
  SimDevice(int index, uint64_t memory_bytes, const rt::ChipFigures& chip);

  const rt::DeviceProperties& properties() const override { return props_; }
  rt::DevicePtr allocate(uint64_t bytes) override;
  void free(rt::DevicePtr ptr) override;
  uint64_t bytes_in_use() const override;

  double copy_to_device(rt::DevicePtr dst, const void* src,
                        uint64_t bytes) override;
  double copy_to_host(void* dst, rt::DevicePtr src, uint64_t bytes) override;
  double copy_on_device(rt::DevicePtr dst, rt::DevicePtr src,
                        uint64_t bytes) override;
  double fill(rt::DevicePtr dst, uint8_t value, uint64_t bytes) override;
  // Directly between two emulated cards' memories, timed by the card link;
  // a peer of another backend goes through the host (the default).
  double copy_to_peer(rt::Device& peer, rt::DevicePtr dst, rt::DevicePtr src,
                      uint64_t bytes) override;
  // In one pass: the conversion writes (reads) emulated device memory
  // directly, with no bounce buffer.
  double copy_to_device_packed(rt::DevicePtr dst, uint64_t bytes,
                               const ChunkWriter& write) override;
  double copy_to_host_unpacked(rt::DevicePtr src, uint64_t bytes,
                               const ChunkReader& read) override;

  // The runs' whole span is checked once, then each run is a masked write
  // (read): a run that covers part of a stick costs that stick's time.
  double copy_runs_to_device(rt::DevicePtr base, std::span<const CopyRun> runs,
                             const void* src) override;
  double copy_runs_to_host(void* dst, rt::DevicePtr base,
                           std::span<const CopyRun> runs) override;

  std::unique_ptr<rt::Executable> prepare(const rt::Program& program,
                                          const rt::PatchPlan& plan) override;
  rt::LaunchStats execute(const rt::Executable& exe,
                          std::span<const rt::DevicePtr> addresses) override;

 private:
  uint8_t* translate_runs(rt::DevicePtr base, std::span<const CopyRun> runs,
                          const char* what) const;
  uint8_t* translate_copy(rt::DevicePtr ptr, uint64_t bytes,
                          const char* what) const;
  void check_accesses(const SimExecutable& exe,
                      std::span<const rt::DevicePtr> addresses) const;
  std::unique_ptr<Scratchpads> take_scratchpads();
  void return_scratchpads(std::unique_ptr<Scratchpads> pads);

  rt::DeviceProperties props_;
  DeviceMemory memory_;
  std::optional<std::string> trace_path_;
  // Launches of less host work (SimExecutable::host_work: unit-busy cycles
  // plus sticks moved) run on one host thread (run_launch). Measured on the
  // 2-core VMs: elementwise launches up to 1M elements gain nothing from a
  // second thread (memory-bound), a 256^3 matmul (33k) gains a third, a
  // 128^3 one (11k) loses, as every launch under ~4k does (the futex wake of
  // the helper costs more than the launch). Those measures had the host
  // thread waiting: a larger launch takes the second thread only while the
  // host has a core to spare (rt::host_core_to_spare(): a compiled decode
  // step queues its launches on one core while the other runs them, and a
  // helper there slowed the step by a third). SPYRE_SIM_INLINE_CYCLES=0 puts
  // every multi-core launch on two threads (the sanitizer runs do, so their
  // thread checks see every program).
  static constexpr uint64_t kDefaultInlineCycles = 16384;
  uint64_t inline_cycles_ = kDefaultInlineCycles;
  // The watchdog (execute): no launch of the modelled chip comes near a
  // second (a 4096^3 matmul models in milliseconds), so 10 s of modelled
  // time is a runaway program; the host budget is far above the longest
  // launch the tests and benchmarks emulate (seconds).
  static constexpr uint64_t kDefaultLaunchLimitUs = 10'000'000;
  static constexpr uint64_t kDefaultWatchdogSeconds = 300;
  uint64_t launch_limit_us_ = kDefaultLaunchLimitUs;
  uint64_t watchdog_seconds_ = kDefaultWatchdogSeconds;
  std::mutex pads_mutex_;
  std::vector<std::unique_ptr<Scratchpads>> free_pads_;
};

}  // namespace spyre::sim
