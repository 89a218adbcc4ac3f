// Device memory for tensors: the runtime's caching allocator behind c10's
// DeviceAllocator, with the storage's device layout kept in the DataPtr's
// context (so every view and every storage alias sees the same layout), and
// the pinned host allocator.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>

#include <memory>

#include "device_layout.h"
#include "spyre/runtime/device.h"

namespace spyre::torch_glue {

struct Allocation {
  c10::DeviceIndex device = 0;
  rt::DevicePtr ptr = 0;  // 0 for an empty storage
  std::shared_ptr<const DeviceLayout> layout;
};

// A block holding `layout.device_bytes()` on `device`, for its current stream.
c10::DataPtr allocate_with_layout(c10::DeviceIndex device, DeviceLayout layout);
// The same with a layout other storages may share (layouts are immutable).
c10::DataPtr allocate_with_layout(c10::DeviceIndex device,
                                  std::shared_ptr<const DeviceLayout> layout);
// The allocation behind a spyre storage; raises if it is not one of ours.
// A storage PyTorch wrapped around a spyre address (torch.from_dlpack) may
// be part of one: that of a view starts inside the allocation it shares.
const Allocation& allocation_of(const c10::Storage& storage);
// Where the storage begins in its allocation's host image, in bytes: 0 but
// for a storage PyTorch wrapped around a view of a spyre tensor.
uint64_t storage_window_bytes(const c10::Storage& storage);

void record_stream(const c10::DataPtr& data, const c10::Stream& stream);

c10::DeviceAllocator* device_allocator();
c10::Allocator* pinned_host_allocator();

}  // namespace spyre::torch_glue
