#include "device_state.h"

#include <c10/util/Exception.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

namespace spyre::torch_glue {
namespace {

// Streams per device and priority that torch.spyre.Stream() and
// getStreamFromPool hand out round robin, as CUDA's pools do: creating
// streams never costs more than these (each is a worker thread).
constexpr uint64_t kPoolStreamsPerDevice = 8;
constexpr size_t kPriorities = 2;  // normal, high

std::array<std::atomic<bool>, kMaxDevices>& initialized_flags() {
  static std::array<std::atomic<bool>, kMaxDevices> flags{};
  return flags;
}

thread_local c10::DeviceIndex tls_device = 0;
// Per device: the id of the thread's current stream (default 0).
thread_local std::vector<c10::StreamId> tls_streams;

struct StreamPool {
  std::mutex mutex;
  std::vector<uint64_t> ids;
  std::atomic<uint64_t> next{0};
};

StreamPool& stream_pool(c10::DeviceIndex index, bool high_priority) {
  static std::array<std::array<StreamPool, kPriorities>, kMaxDevices> pools;
  return pools[index][high_priority ? 1 : 0];
}

std::atomic<bool> bad_fork{false};

// Runs in the child of every fork(): a fork after a device was used leaves
// the child a bad fork.
void on_fork_child() {
  for (const std::atomic<bool>& flag : initialized_flags()) {
    if (flag.load()) bad_fork.store(true);
  }
}

const bool fork_handler_registered = [] {
  return pthread_atfork(nullptr, nullptr, &on_fork_child) == 0;
}();

void check_not_in_bad_fork() {
  TORCH_CHECK(!bad_fork.load(),
              "spyre: cannot re-initialize the spyre device in a forked "
              "subprocess: this process used the device before fork(), and "
              "the device's threads do not survive a fork. To use spyre with "
              "multiprocessing, use the 'spawn' start method "
              "(multiprocessing.set_start_method('spawn'), or "
              "torch.multiprocessing.spawn)");
}

c10::Stream make_stream(c10::DeviceIndex index, uint64_t id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kSpyre, index),
                     static_cast<c10::StreamId>(id));
}

}  // namespace

[[noreturn]] void rethrow_as_torch_error(const rt::Error& error) {
  switch (error.code()) {
    case rt::ErrorCode::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "spyre: ", error.what());
    case rt::ErrorCode::kInvalidArgument:
      TORCH_CHECK_VALUE(false, "spyre: ", error.what());
    default:
      TORCH_CHECK(false, "spyre (", rt::error_code_name(error.code()),
                  "): ", error.what());
  }
}

bool in_bad_fork() { return bad_fork.load(); }

rt::Runtime& runtime() {
  check_not_in_bad_fork();
  return call_runtime([]() -> rt::Runtime& { return rt::Runtime::get(); });
}

namespace {
rt::WaitCheck& interrupt_check_slot() {
  static rt::WaitCheck check;
  return check;
}
}  // namespace

const rt::WaitCheck& interrupt_check() { return interrupt_check_slot(); }
void set_interrupt_check(rt::WaitCheck check) {
  interrupt_check_slot() = std::move(check);
}

c10::DeviceIndex device_count() noexcept {
  try {
    const int count = rt::Runtime::get().device_count();
    // More devices than the glue can index are none it can use;
    // check_device_index() says why.
    return count <= static_cast<int>(kMaxDevices)
               ? static_cast<c10::DeviceIndex>(count)
               : 0;
  } catch (...) {
    return 0;  // check_device_index() raises the cause
  }
}

namespace {

// No usable device: raises why, when there is a reason other than a
// backend that has none (a backend that failed to start, too many devices).
void explain_no_devices() {
  rt::Runtime& rt = runtime();  // a start-up failure raises its own error
  TORCH_CHECK(rt.device_count() <= static_cast<int>(kMaxDevices),
              "spyre: backend '", rt.backend_name(), "' reports ",
              rt.device_count(), " devices; at most ", kMaxDevices,
              " are supported (the sim backend takes their number from "
              "SPYRE_SIM_DEVICES)");
}

}  // namespace

void check_device_index(c10::DeviceIndex index) {
  const c10::DeviceIndex count = device_count();
  if (count == 0) explain_no_devices();
  // RuntimeError, as CUDA's "invalid device ordinal".
  TORCH_CHECK(index >= 0 && index < count, "spyre: device index ", int(index),
              " is out of range; this process has ", int(count),
              " spyre device(s) (the sim backend reads their number from "
              "SPYRE_SIM_DEVICES)");
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index < 0) return current_device();
  check_device_index(index);
  return index;
}

bool device_initialized(c10::DeviceIndex index) {
  return index >= 0 && static_cast<size_t>(index) < kMaxDevices &&
         initialized_flags()[index].load();
}

c10::DeviceIndex current_device() { return tls_device; }

void set_current_device(c10::DeviceIndex index) {
  if (index < 0) return;  // "the current device"
  check_device_index(index);
  tls_device = index;
}

rt::Device& runtime_device(c10::DeviceIndex index) {
  check_device_index(index);
  initialized_flags()[index].store(true);
  return call_runtime([&]() -> rt::Device& { return runtime().device(index); });
}

const rt::ChipFigures& device_chip(c10::DeviceIndex index) {
  return runtime_device(index).properties().chip;
}

rt::CachingAllocator& runtime_allocator(c10::DeviceIndex index) {
  check_device_index(index);
  initialized_flags()[index].store(true);
  return call_runtime(
      [&]() -> rt::CachingAllocator& { return runtime().allocator(index); });
}

c10::Stream current_stream(c10::DeviceIndex index) {
  index = resolve_device_index(index);
  if (static_cast<size_t>(index) >= tls_streams.size())
    return make_stream(index, 0);
  return make_stream(index, static_cast<uint64_t>(tls_streams[index]));
}

c10::Stream default_stream(c10::DeviceIndex index) {
  return make_stream(resolve_device_index(index), 0);
}

c10::Stream new_stream(c10::DeviceIndex index) {
  index = resolve_device_index(index);
  initialized_flags()[index].store(true);
  return call_runtime(
      [&] { return make_stream(index, runtime().create_stream(index).id()); });
}

c10::Stream pool_stream(c10::DeviceIndex index, bool high_priority) {
  index = resolve_device_index(index);
  StreamPool& pool = stream_pool(index, high_priority);
  const uint64_t slot = pool.next.fetch_add(1) % kPoolStreamsPerDevice;
  std::lock_guard<std::mutex> lock(pool.mutex);
  while (pool.ids.size() <= slot) {
    pool.ids.push_back(static_cast<uint64_t>(new_stream(index).id()));
  }
  return make_stream(index, pool.ids[slot]);
}

c10::Stream exchange_stream(c10::Stream stream) {
  const c10::DeviceIndex index = stream.device_index();
  check_device_index(index);
  c10::Stream previous = current_stream(index);
  if (tls_streams.size() <= static_cast<size_t>(index)) {
    tls_streams.resize(index + 1, 0);
  }
  tls_streams[index] = stream.id();
  return previous;
}

rt::Stream& runtime_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kSpyre,
              "spyre: expected a spyre stream, got ", stream);
  const c10::DeviceIndex index = stream.device_index();
  check_device_index(index);
  initialized_flags()[index].store(true);
  return call_runtime([&]() -> rt::Stream& {
    return runtime().stream(index, static_cast<uint64_t>(stream.id()));
  });
}

}  // namespace spyre::torch_glue
