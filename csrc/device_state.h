// Per-thread device and stream state of the spyre device, and the mapping
// between runtime errors and PyTorch's (c10 only, no ATen).
//
// c10::Stream ids are the runtime's stream ids (dense per device, 0 is the
// default stream), so a c10::Stream converts to a runtime stream with no
// table.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <cstddef>
#include <utility>

#include "spyre/runtime/error.h"
#include "spyre/runtime/runtime.h"
#include "spyre/runtime/stream.h"

namespace spyre::torch_glue {

inline constexpr c10::DeviceType kSpyre = c10::DeviceType::PrivateUse1;
// Devices the glue can index (its per-device tables are this long); a
// backend that reports more is refused with an error saying so.
inline constexpr size_t kMaxDevices = 64;

// Never throws: 0 when the runtime cannot start.
c10::DeviceIndex device_count() noexcept;
// Raises a clear error for an index outside [0, device_count()).
void check_device_index(c10::DeviceIndex index);
// -1 means the current device.
c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);
// True once the runtime of `index` has been used (PyTorch's primary context).
bool device_initialized(c10::DeviceIndex index);

// True in a child forked after this process used a spyre device: the
// device's worker threads did not survive the fork, so the child must not
// touch it (PyTorch's "bad fork", as torch.cuda._is_in_bad_fork()). Every
// use of the runtime raises then; freeing a tensor inherited from the
// parent does nothing.
bool in_bad_fork();

c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);

c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream default_stream(c10::DeviceIndex index);
c10::Stream new_stream(c10::DeviceIndex index);
// One of a fixed set of streams per device and priority, round robin (what
// torch.spyre.Stream() gets, as torch.cuda.Stream() does). The emulator
// schedules both priorities alike.
c10::Stream pool_stream(c10::DeviceIndex index, bool high_priority);
// Sets the thread's current stream of the stream's device; returns the old.
c10::Stream exchange_stream(c10::Stream stream);
rt::Stream& runtime_stream(const c10::Stream& stream);

rt::Runtime& runtime();  // starts the runtime; runtime errors -> c10 errors
rt::Device& runtime_device(c10::DeviceIndex index);
rt::CachingAllocator& runtime_allocator(c10::DeviceIndex index);
// What kernel builders plan for on that device (its properties' chip facts).
const rt::ChipFigures& device_chip(c10::DeviceIndex index);

// Rethrows a runtime error as the matching c10 error: OutOfMemory ->
// c10::OutOfMemoryError (torch.OutOfMemoryError), InvalidArgument ->
// c10::ValueError, anything else -> c10::Error (RuntimeError).
[[noreturn]] void rethrow_as_torch_error(const rt::Error& error);

// What the waits a user may want to end (synchronize, reading a result)
// run every rt::kWaitSlice: the Python module sets it to raise a pending
// Ctrl-C as KeyboardInterrupt, so a wait on a long launch ends at once (the
// launch runs on; the sim watchdog bounds it). Empty until it is set, once,
// when the module loads.
const rt::WaitCheck& interrupt_check();
void set_interrupt_check(rt::WaitCheck check);

template <typename Fn>
decltype(auto) call_runtime(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const rt::Error& error) {
    rethrow_as_torch_error(error);
  }
}

}  // namespace spyre::torch_glue
