// A host-memory Device for runtime tests: no emulator, every allocation a
// separate heap buffer, every device address checked. It records launches so
// patcher tests can see exactly which addresses reached the backend. The
// minimal plugin backend (plugin/minimal_backend.cpp) is built from it too.
#pragma once

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "spyre/runtime/device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"

namespace spyre::rt::testing {

// The chip the runtime tests describe: a 32-core, 2 MiB example (the runtime
// layer has no chip of its own; programs are validated against whatever a
// device's properties say).
inline ChipFigures test_chip() {
  ChipFigures chip;
  chip.num_cores = 32;
  chip.scratchpad_bytes = 2u << 20;
  chip.costs.version = "fake-1";
  chip.costs.clock_ghz = 1.0;
  chip.costs.max_broadcast_cores = 8;
  return chip;
}
inline ProgramLimits test_limits() {
  const ChipFigures chip = test_chip();
  return {chip.num_cores, chip.scratchpad_bytes,
          chip.costs.max_broadcast_cores};
}

class FakeDevice : public Device {
 public:
  explicit FakeDevice(uint64_t memory_bytes = 64ull << 20, int index = 0) {
    props_.name = "fake device";
    props_.backend = "fake";
    props_.index = index;
    props_.memory_bytes = memory_bytes;
    props_.chip = test_chip();
  }

  const DeviceProperties& properties() const override { return props_; }

  DevicePtr allocate(uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t rounded = round_up_to_sticks(bytes == 0 ? 1 : bytes);
    if (in_use_ + rounded > props_.memory_bytes) {
      throw OutOfMemoryError(
          str("fake device out of memory: asked ", format_bytes(bytes)), bytes,
          props_.memory_bytes - in_use_, 0);
    }
    DevicePtr ptr = next_;
    next_ += rounded + kStickBytes;  // a gap, so overruns never alias
    buffers_[ptr] = std::vector<uint8_t>(rounded, 0);
    in_use_ += rounded;
    ++allocations_;
    return ptr;
  }

  void free(DevicePtr ptr) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.find(ptr);
    check(it != buffers_.end(), ErrorCode::kInvalidArgument,
          "free of unknown device pointer ", ptr);
    in_use_ -= it->second.size();
    buffers_.erase(it);
  }

  uint64_t bytes_in_use() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_use_;
  }

  double copy_to_device(DevicePtr dst, const void* src,
                        uint64_t bytes) override {
    if (bytes == 0) return 0;  // as the sim: a zero-byte copy does nothing
    std::memcpy(host(dst, bytes), src, bytes);
    return static_cast<double>(bytes);  // 1 ns per byte: easy to assert on
  }
  double copy_to_host(void* dst, DevicePtr src, uint64_t bytes) override {
    if (bytes == 0) return 0;
    std::memcpy(dst, host(src, bytes), bytes);
    return static_cast<double>(bytes);
  }
  double copy_on_device(DevicePtr dst, DevicePtr src, uint64_t bytes) override {
    std::memmove(host(dst, bytes), host(src, bytes), bytes);
    return static_cast<double>(bytes);
  }
  double fill(DevicePtr dst, uint8_t value, uint64_t bytes) override {
    std::memset(host(dst, bytes), value, bytes);
    return static_cast<double>(bytes);
  }

  struct FakeExecutable : Executable {
    size_t relocations = 0;
  };
  std::unique_ptr<Executable> prepare(const Program&,
                                      const PatchPlan& plan) override {
    ++prepares_;
    auto exe = std::make_unique<FakeExecutable>();
    exe->relocations = plan.relocations.size();
    return exe;
  }
  LaunchStats execute(const Executable& exe,
                      std::span<const DevicePtr> addresses) override {
    const auto& fake = dynamic_cast<const FakeExecutable&>(exe);
    check(addresses.size() == fake.relocations, ErrorCode::kDeviceError,
          "wrong relocation count");
    std::lock_guard<std::mutex> lock(mutex_);
    last_addresses_.assign(addresses.begin(), addresses.end());
    ++launches_;
    LaunchStats stats;
    stats.cycles = 1000;
    stats.time_ns = 1000;
    return stats;
  }

  // Host view of [ptr, ptr + bytes); throws kDeviceError outside a buffer.
  uint8_t* host(DevicePtr ptr, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = buffers_.upper_bound(ptr);
    check(it != buffers_.begin(), ErrorCode::kDeviceError,
          "access outside any allocation at ", ptr);
    --it;
    uint64_t offset = ptr - it->first;
    check(offset + bytes <= it->second.size(), ErrorCode::kDeviceError,
          "access of ", bytes, " bytes at ", ptr, " leaves its allocation");
    return it->second.data() + offset;
  }

  std::vector<DevicePtr> last_addresses() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_addresses_;
  }
  int launches() const { return launches_; }
  int prepares() const { return prepares_; }
  int device_allocations() const { return allocations_; }

 private:
  DeviceProperties props_;
  mutable std::mutex mutex_;
  std::map<DevicePtr, std::vector<uint8_t>> buffers_;
  DevicePtr next_ = 0x10000;
  uint64_t in_use_ = 0;
  std::atomic<int> launches_{0};
  std::atomic<int> prepares_{0};
  std::atomic<int> allocations_{0};
  std::vector<DevicePtr> last_addresses_;
};

}  // namespace spyre::rt::testing
