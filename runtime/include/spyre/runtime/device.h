// The pluggable device layer: one abstract Device per physical (or emulated)
// device, created by a Backend found through the registry (registry.h).
//
// Device calls are synchronous; asynchrony comes from Queues, which run
// submitted work in FIFO order on their own thread. Streams (stream.h) wrap
// queues with the ordering and timing rules PyTorch expects.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/runtime/chip.h"
#include "spyre/runtime/program.h"

namespace spyre::rt {

struct PatchPlan;

// A device address. Never host-dereferenceable: only the device's own copy
// and launch calls may touch the memory behind it.
using DevicePtr = uint64_t;

struct DeviceProperties {
  std::string name;           // "Spyre (emulated)"
  std::string backend;        // registry name of the backend, "sim"
  int index = 0;              // device ordinal
  uint64_t memory_bytes = 0;  // total device memory
  ChipFigures chip;           // what program planners read (chip.h)
  ProgramLimits limits() const {
    return {chip.num_cores, chip.scratchpad_bytes,
            chip.costs.max_broadcast_cores};
  }
};

// What a launch did, in modelled device time.
struct LaunchStats {
  uint64_t cycles = 0;  // makespan of the launch
  double time_ns = 0;   // cycles / clock plus launch overhead
  std::vector<uint64_t> core_busy_cycles;  // per core, any unit active
  double matrix_utilization = 0;  // busy matrix-unit cycles / (cores x cycles)
  double vector_utilization = 0;
  double core_utilization = 0;  // mean of busy / cycles over used cores
  uint64_t dma_bytes = 0;       // device memory <-> scratchpad
  uint64_t ring_bytes = 0;      // core <-> core
  uint64_t instructions = 0;
};

// A backend's prepared form of a program: decoded instructions, dependency
// graph, per-core queues. Built once at load so launches stay cheap.
class Executable {
 public:
  virtual ~Executable() = default;
};

// Whether a launch may spread over a second host thread without slowing
// the host: true off a queue's worker thread (the caller runs the launch
// itself and waits for it) and while some host thread sleeps in a queue's
// wait_idle(); false on a worker while the host threads are busy (queuing
// the next launches), which a second emulation thread would compete with
// for the host's cores.
bool host_core_to_spare();

// Work run by a queue. Returns the modelled device time it took, in ns.
using Work = std::function<double()>;

class Queue {
 public:
  virtual ~Queue() = default;
  // Runs `work` after everything submitted before it. Never blocks on it.
  virtual void submit(Work work) = 0;
  // Blocks until all submitted work has run.
  virtual void wait_idle() = 0;
  // As wait_idle(), but gives up after `timeout`: true when all work has run
  // (errors rethrown as by wait_idle()), false when some is still running.
  // Waits that must stay interruptible (Ctrl-C) wait in slices of this. The
  // default waits with no timeout.
  virtual bool wait_idle_for(std::chrono::nanoseconds timeout) {
    (void)timeout;
    wait_idle();
    return true;
  }
  virtual bool idle() = 0;
};

// A queue with one worker thread; what most backends need. At most
// kMaxQueuedWork items wait or run at once: submit() from a host thread
// blocks until there is room (work submitted by running work never does).
// The worker never destroys work it ran: the next submit() or wait_idle()
// on a host thread does, so releasing what work held (a tensor's storage
// whose Python object needs the GIL) never happens on the worker.
inline constexpr uint64_t kMaxQueuedWork = 1024;
std::unique_ptr<Queue> make_thread_queue(std::string name);

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceProperties& properties() const = 0;

  // Raw device memory; 128-byte aligned. allocate() throws OutOfMemoryError.
  // The caching allocator (allocator.h) sits on top of these.
  virtual DevicePtr allocate(uint64_t bytes) = 0;
  virtual void free(DevicePtr ptr) = 0;
  virtual uint64_t bytes_in_use() const = 0;

  // Synchronous copies; each returns its modelled device time in ns.
  // A range outside any live allocation raises kDeviceError; a zero-byte
  // copy does nothing (its pointers may be null).
  virtual double copy_to_device(DevicePtr dst, const void* src,
                                uint64_t bytes) = 0;
  virtual double copy_to_host(void* dst, DevicePtr src, uint64_t bytes) = 0;
  virtual double copy_on_device(DevicePtr dst, DevicePtr src,
                                uint64_t bytes) = 0;
  virtual double fill(DevicePtr dst, uint8_t value, uint64_t bytes) = 0;

  // Copies that convert while they copy, so a layout change costs one pass
  // over the data instead of a conversion into a host buffer plus a copy.
  // `write(out, begin, end)` must fill out[0, end - begin) with bytes
  // [begin, end) of the `bytes`-byte image that lands at `dst`; `read(in,
  // begin, end)` gets bytes [begin, end) of the image at `src`. Either may be
  // called several times, for ranges that tile [0, bytes) in any order and
  // split anywhere (even inside a stick or an element). Errors as the plain
  // copies; each returns its modelled device time in ns.
  //
  // The defaults work for any backend: they convert through a host bounce
  // buffer of at most kCopyChunkBytes, one plain copy per chunk (summing the
  // chunks' times). A backend that can reach its memory from the host
  // overrides them to convert in place, in one pass.
  using ChunkWriter =
      std::function<void(uint8_t* out, uint64_t begin, uint64_t end)>;
  using ChunkReader =
      std::function<void(const uint8_t* in, uint64_t begin, uint64_t end)>;
  static constexpr uint64_t kCopyChunkBytes = uint64_t{4} << 20;
  virtual double copy_to_device_packed(DevicePtr dst, uint64_t bytes,
                                       const ChunkWriter& write);
  virtual double copy_to_host_unpacked(DevicePtr src, uint64_t bytes,
                                       const ChunkReader& read);

  // Copies between consecutive host bytes and pieces ("runs") of device
  // memory from `base`: run i holds the host bytes that follow those of run
  // i - 1. Only the runs' bytes are written; the bytes around them, even in
  // the same stick, stay as they are (device memory has write masks), so
  // writing a view of a tensor leaves the rest of its storage, which other
  // streams or threads may be writing, alone. A run outside every live
  // allocation raises kDeviceError. The defaults make one plain copy per run
  // (runs before a bad one are copied); a backend that reaches its memory
  // from the host overrides them to check the whole span once, up front.
  struct CopyRun {
    uint64_t offset = 0;  // bytes from `base`
    uint64_t bytes = 0;
    bool operator==(const CopyRun&) const = default;
  };
  virtual double copy_runs_to_device(DevicePtr base,
                                     std::span<const CopyRun> runs,
                                     const void* src);
  virtual double copy_runs_to_host(void* dst, DevicePtr base,
                                   std::span<const CopyRun> runs);

  // Copies `bytes` from `src` on this device to `dst` on `peer` (another
  // device of the same backend) over the card-to-card link; returns the
  // modelled time in ns. The default works for any backend: it bounces
  // through host memory in kCopyChunkBytes pieces (a device-to-host plus a
  // host-to-device copy each, their times summed). A backend whose cards
  // reach each other directly overrides it with one peer transfer.
  virtual double copy_to_peer(Device& peer, DevicePtr dst, DevicePtr src,
                              uint64_t bytes);

  // Program load: build everything a launch needs, once. The program is
  // already validated; `plan` numbers its device accesses (see patcher.h).
  virtual std::unique_ptr<Executable> prepare(const Program& program,
                                              const PatchPlan& plan) = 0;
  // Runs a prepared program with `addresses[i]` the real address of
  // relocation i of the plan (already verified by the patcher). Synchronous.
  virtual LaunchStats execute(const Executable& exe,
                              std::span<const DevicePtr> addresses) = 0;

  // A new in-order queue. The default is a thread queue.
  virtual std::unique_ptr<Queue> create_queue();
};

// A backend creates devices. One backend is active per process.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int device_count() const = 0;
  virtual std::unique_ptr<Device> create_device(int index) = 0;
};

}  // namespace spyre::rt
