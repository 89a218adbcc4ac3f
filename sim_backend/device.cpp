#include "device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "dataflow/executable.h"
#include "dataflow/launch.h"
#include "env.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/sim/sim.h"
#include "timing.h"
#include "trace.h"

namespace spyre::sim {

SimDevice::SimDevice(int index, uint64_t memory_bytes,
                     const rt::ChipFigures& chip)
    : memory_(memory_bytes) {
  props_.name = "Spyre (emulated)";
  props_.backend = "sim";
  props_.index = index;
  props_.memory_bytes = memory_.size();
  props_.chip = chip;
  if (const char* path = std::getenv("SPYRE_TRACE"); path && *path) {
    trace_path_ = path;
  }
  inline_cycles_ = env_integer("SPYRE_SIM_INLINE_CYCLES", kDefaultInlineCycles,
                               0, UINT64_MAX);
  launch_limit_us_ = env_integer("SPYRE_SIM_LAUNCH_LIMIT_US",
                                 kDefaultLaunchLimitUs, 1, UINT64_MAX / 1000);
  watchdog_seconds_ = env_integer("SPYRE_SIM_WATCHDOG_S",
                                  kDefaultWatchdogSeconds, 1, UINT32_MAX);
}

rt::DevicePtr SimDevice::allocate(uint64_t bytes) {
  return memory_.allocate(bytes);
}
void SimDevice::free(rt::DevicePtr ptr) { memory_.free(ptr); }
uint64_t SimDevice::bytes_in_use() const { return memory_.bytes_in_use(); }

double SimDevice::copy_to_device(rt::DevicePtr dst, const void* src,
                                 uint64_t bytes) {
  if (bytes == 0) return 0;
  std::memcpy(memory_.translate(dst, bytes, "copy_to_device"), src, bytes);
  return host_copy_ns(bytes, props_.chip.costs);
}

double SimDevice::copy_to_host(void* dst, rt::DevicePtr src, uint64_t bytes) {
  if (bytes == 0) return 0;
  std::memcpy(dst, memory_.translate(src, bytes, "copy_to_host"), bytes);
  return host_copy_ns(bytes, props_.chip.costs);
}

double SimDevice::copy_on_device(rt::DevicePtr dst, rt::DevicePtr src,
                                 uint64_t bytes) {
  if (bytes == 0) return 0;
  uint8_t* to = memory_.translate(dst, bytes, "copy_on_device destination");
  const uint8_t* from = memory_.translate(src, bytes, "copy_on_device source");
  std::memmove(to, from, bytes);
  return device_copy_ns(bytes, bytes,
                        props_.chip.costs);  // read + write via DRAM
}

double SimDevice::copy_to_peer(rt::Device& peer, rt::DevicePtr dst,
                               rt::DevicePtr src, uint64_t bytes) {
  auto* sim_peer = dynamic_cast<SimDevice*>(&peer);
  if (sim_peer == this) return copy_on_device(dst, src, bytes);
  if (sim_peer == nullptr) {
    return rt::Device::copy_to_peer(peer, dst, src, bytes);
  }
  if (bytes == 0) return 0;
  const uint8_t* from = memory_.translate(src, bytes, "copy_to_peer source");
  uint8_t* to =
      sim_peer->memory_.translate(dst, bytes, "copy_to_peer destination");
  std::memcpy(to, from, bytes);
  return props_.chip.costs.card_link_ns(bytes);
}

double SimDevice::fill(rt::DevicePtr dst, uint8_t value, uint64_t bytes) {
  if (bytes == 0) return 0;
  std::memset(memory_.translate(dst, bytes, "fill"), value, bytes);
  return device_copy_ns(0, bytes, props_.chip.costs);
}

// The host view of a converting copy's range, checked as a whole before
// anything is converted, so a bad range leaves both sides untouched.
uint8_t* SimDevice::translate_copy(rt::DevicePtr ptr, uint64_t bytes,
                                   const char* what) const {
  rt::check(memory_.inside_allocation(ptr, bytes), rt::ErrorCode::kDeviceError,
            "sim: ", what, " of ", bytes, " bytes at device address 0x",
            std::hex, ptr,
            " is outside every live allocation; pass a range "
            "inside one live allocation (allocate at least the image's "
            "device bytes); nothing was copied");
  return memory_.host(ptr);
}

double SimDevice::copy_to_device_packed(rt::DevicePtr dst, uint64_t bytes,
                                        const ChunkWriter& write) {
  if (bytes == 0) return 0;
  write(translate_copy(dst, bytes, "copy_to_device_packed"), 0, bytes);
  return host_copy_ns(bytes, props_.chip.costs);
}

double SimDevice::copy_to_host_unpacked(rt::DevicePtr src, uint64_t bytes,
                                        const ChunkReader& read) {
  if (bytes == 0) return 0;
  read(translate_copy(src, bytes, "copy_to_host_unpacked"), 0, bytes);
  return host_copy_ns(bytes, props_.chip.costs);
}

namespace {

// Distinct sticks the runs touch: what the memory moves for them, each
// stick once as one masked burst (runs inside one stick share its write
// mask; a strided view's elements often do: a column of a permuted tensor).
uint64_t sticks_touched(std::span<const rt::Device::CopyRun> runs) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // [first, last] sticks
  spans.reserve(runs.size());
  for (const rt::Device::CopyRun& run : runs) {
    if (run.bytes == 0) continue;
    spans.emplace_back(run.offset / rt::kStickBytes,
                       (run.offset + run.bytes - 1) / rt::kStickBytes);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t sticks = 0;
  uint64_t next = 0;  // the first stick not yet counted
  for (const auto& [first, last] : spans) {
    const uint64_t from = std::max(first, next);
    if (last >= from) sticks += last - from + 1;
    next = std::max(next, last + 1);
  }
  return sticks;
}

}  // namespace

// The host view of `base`, after checking that the span of all the runs lies
// inside one live allocation.
uint8_t* SimDevice::translate_runs(rt::DevicePtr base,
                                   std::span<const CopyRun> runs,
                                   const char* what) const {
  uint64_t lo = UINT64_MAX;
  uint64_t hi = 0;
  for (const CopyRun& run : runs) {
    if (run.bytes == 0) continue;
    lo = std::min(lo, run.offset);
    hi = std::max(hi, run.offset + run.bytes);
  }
  if (lo >= hi) return nullptr;
  translate_copy(base + lo, hi - lo, what);
  return memory_.host(base);
}

double SimDevice::copy_runs_to_device(rt::DevicePtr base,
                                      std::span<const CopyRun> runs,
                                      const void* src) {
  uint8_t* to = translate_runs(base, runs, "copy_runs_to_device");
  if (to == nullptr) return 0;
  const auto* from = static_cast<const uint8_t*>(src);
  for (const CopyRun& run : runs) {
    std::memcpy(to + run.offset, from, run.bytes);
    from += run.bytes;
  }
  return host_copy_ns(sticks_touched(runs) * rt::kStickBytes,
                      props_.chip.costs);
}

double SimDevice::copy_runs_to_host(void* dst, rt::DevicePtr base,
                                    std::span<const CopyRun> runs) {
  const uint8_t* from = translate_runs(base, runs, "copy_runs_to_host");
  if (from == nullptr) return 0;
  auto* to = static_cast<uint8_t*>(dst);
  for (const CopyRun& run : runs) {
    std::memcpy(to, from + run.offset, run.bytes);
    to += run.bytes;
  }
  return host_copy_ns(sticks_touched(runs) * rt::kStickBytes,
                      props_.chip.costs);
}

std::unique_ptr<rt::Executable> SimDevice::prepare(const rt::Program& program,
                                                   const rt::PatchPlan& plan) {
  auto exe = std::make_unique<SimExecutable>(program, plan);
  schedule(*exe, props_.chip.costs, props_.chip.num_cores);
  // A program whose ring channels can never all complete is one the device
  // cannot run: reject it at load (LoadedProgram's contract), not at every
  // launch, where a stream would only report it asynchronously.
  if (exe->deadlock) {
    throw rt::Error(rt::ErrorCode::kMalformedProgram, *exe->deadlock);
  }
  return exe;
}

std::unique_ptr<Scratchpads> SimDevice::take_scratchpads() {
  std::lock_guard lock(pads_mutex_);
  if (free_pads_.empty()) {
    auto pads = std::make_unique<Scratchpads>();
    pads->bytes = props_.chip.scratchpad_bytes;
    pads->cores.resize(props_.chip.num_cores);
    return pads;
  }
  auto pads = std::move(free_pads_.back());
  free_pads_.pop_back();
  return pads;
}

void SimDevice::return_scratchpads(std::unique_ptr<Scratchpads> pads) {
  std::lock_guard lock(pads_mutex_);
  free_pads_.push_back(std::move(pads));
}

// The patcher checked every access against the bindings' sizes, which the
// caller states. Before anything runs, the device checks each access against
// the real allocation of its tensor's first byte: a binding that overstates
// its allocation, or an allocation freed while the launch waited on its
// stream, is then a device error with nothing written (stores are undone only
// for gathers and scatters, whose indices cannot be checked up front).
void SimDevice::check_accesses(const SimExecutable& exe,
                               std::span<const rt::DevicePtr> addresses) const {
  for (size_t r = 0; r < exe.relocations.size(); ++r) {
    const rt::Relocation& rel = exe.relocations[r];
    rt::DevicePtr base = addresses[r] - rel.offset;
    uint64_t bytes = static_cast<uint64_t>(rel.hi - rel.lo);
    rt::check(memory_.inside_allocation_of(base, base + rel.lo, bytes),
              rt::ErrorCode::kDeviceError, "sim: launch of '", exe.name,
              "': relocation ", r, " (core index ", rel.core_index,
              ", instruction ", rel.instruction, ") of slot ", rel.slot,
              " accesses bytes [", rel.lo, ", ", rel.hi,
              ") of the tensor at device address 0x", std::hex, base,
              ", outside every live allocation holding it; the launch was "
              "abandoned and device memory left unchanged");
  }
}

rt::LaunchStats SimDevice::execute(const rt::Executable& executable,
                                   std::span<const rt::DevicePtr> addresses) {
  const auto* exe = dynamic_cast<const SimExecutable*>(&executable);
  rt::check(exe != nullptr, rt::ErrorCode::kInvalidArgument,
            "sim: execute() got an executable another backend prepared");
  rt::check(addresses.size() == exe->relocations.size(),
            rt::ErrorCode::kInvalidArgument, "sim: execute() of '", exe->name,
            "' got ", addresses.size(), " addresses for ",
            exe->relocations.size(), " relocations");
  check_accesses(*exe, addresses);
  // The watchdog, as a GPU's: a launch of more modelled device time than the
  // limit is refused before it runs (a valid program can repeat a transfer
  // or an op for hours), one that runs too long on the host is aborted.
  const double limit_ns = static_cast<double>(launch_limit_us_) * 1e3;
  rt::check(exe->stats.time_ns <= limit_ns, rt::ErrorCode::kDeviceError,
            "sim: launch of '", exe->name, "' would take ",
            exe->stats.time_ns / 1e3,
            " us of modelled device time, past the watchdog's limit of ",
            launch_limit_us_,
            " us per launch; it was refused and device memory left "
            "unchanged. Split the work into smaller launches, or raise "
            "SPYRE_SIM_LAUNCH_LIMIT_US");
  const Watchdog watchdog{
      std::chrono::steady_clock::now() +
          std::chrono::seconds(static_cast<int64_t>(watchdog_seconds_)),
      watchdog_seconds_};
  // A launch may run on several streams at once: each takes its own set.
  auto pads = take_scratchpads();
  try {
    run_launch(*exe, addresses, memory_, *pads, inline_cycles_, watchdog);
  } catch (...) {
    return_scratchpads(std::move(pads));
    throw;
  }
  return_scratchpads(std::move(pads));
  if (trace_path_)
    append_trace(*trace_path_, *exe, props_.index, props_.chip.costs);
  return exe->stats;
}

}  // namespace spyre::sim
