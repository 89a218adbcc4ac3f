#include "allocator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <map>
#include <mutex>

#include "device_state.h"
#include "pinned_host.h"
#include "spyre/runtime/allocator.h"

namespace spyre::torch_glue {
namespace {

// Cumulative figures PyTorch's stats expect that the runtime does not keep
// (bytes ever allocated and freed), and baselines for "reset accumulated".
struct DeviceCounters {
  std::atomic<int64_t> allocated_bytes{0};
  std::atomic<int64_t> freed_bytes{0};
  std::atomic<int64_t> alloc_count_base{0};
  std::atomic<int64_t> free_count_base{0};
};

DeviceCounters& counters(c10::DeviceIndex index) {
  static std::array<DeviceCounters, 64> all;
  return all[index];
}

// Every live allocation by (device, address), so that a storage PyTorch
// wrapped around a spyre address with a deleter of its own (a tensor
// imported through DLPack, whose deleter releases the exporting tensor)
// finds the allocation, and its layout, of the memory it shares: ordered,
// since a view's storage starts inside its allocation.
struct LiveAllocations {
  std::mutex mutex;
  std::map<rt::DevicePtr, const Allocation*> by_ptr[kMaxDevices];

  // The allocation whose device memory holds `ptr`, or null.
  const Allocation* containing(c10::DeviceIndex device, rt::DevicePtr ptr) {
    const std::lock_guard<std::mutex> lock(mutex);
    auto after = by_ptr[device].upper_bound(ptr);
    if (after == by_ptr[device].begin()) return nullptr;
    const Allocation* allocation = std::prev(after)->second;
    return ptr < allocation->ptr + allocation->layout->device_bytes()
               ? allocation
               : nullptr;
  }
};

LiveAllocations& live_allocations() {
  static auto* live = new LiveAllocations;  // outlives static destructors
  return *live;
}

void delete_allocation(void* context) {
  auto* allocation = static_cast<Allocation*>(context);
  // A child forked from a process that used the device inherits its tensors
  // but not the device: their memory is the parent's, left alone.
  if (allocation->ptr != 0 && !in_bad_fork()) {
    {
      LiveAllocations& live = live_allocations();
      const std::lock_guard<std::mutex> lock(live.mutex);
      live.by_ptr[allocation->device].erase(allocation->ptr);
    }
    try {
      runtime_allocator(allocation->device).free(allocation->ptr);
      counters(allocation->device).freed_bytes +=
          allocation->layout->device_bytes();
    } catch (const std::exception& error) {
      // A deleter must not throw; a failed free leaks the block, visibly.
      TORCH_WARN("spyre: freeing device memory failed: ", error.what());
    }
  }
  delete allocation;
}

void fill_stat(c10::CachingAllocator::StatArray& stat, int64_t current,
               int64_t peak, int64_t allocated, int64_t freed) {
  auto& aggregate =
      stat[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  aggregate.current = current;
  aggregate.peak = peak;
  aggregate.allocated = allocated;
  aggregate.freed = freed;
}

class SpyreDeviceAllocator final : public c10::DeviceAllocator {
 public:
  // Storage made by generic code (UntypedStorage(n, device="spyre"), storage
  // copies, deserialisation) has no shape: a 1-D byte layout.
  c10::DataPtr allocate(size_t bytes) override {
    const int64_t size = static_cast<int64_t>(bytes);
    return allocate_with_layout(current_device(),
                                make_default_layout({&size, 1}, 1));
  }

  // A copy-on-write materialisation (Allocator::clone): ordered on the
  // current stream of the device holding `src`, after the kernels that may
  // still write it, and finished before it returns (callers use `dest` at
  // once).
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    const c10::DeviceIndex index = at::detail::getPrivateUse1Hooks()
                                       .getDeviceFromPtr(const_cast<void*>(src))
                                       .index();
    rt::Device* device = &runtime_device(index);
    rt::Stream& stream = runtime_stream(current_stream(index));
    const auto to = reinterpret_cast<rt::DevicePtr>(dest);
    const auto from = reinterpret_cast<rt::DevicePtr>(src);
    call_runtime([&] {
      stream.enqueue([device, to, from, count] {
        return device->copy_on_device(to, from, count);
      });
      stream.synchronize();
    });
  }

  bool initialized() override { return device_count() > 0; }

  void emptyCache(c10::MempoolId_t /*pool*/) override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      if (device_initialized(i))
        call_runtime([&] { runtime_allocator(i).empty_cache(); });
    }
  }

  void recordStream(const c10::DataPtr& data, c10::Stream stream) override {
    record_stream(data, stream);
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex index) override {
    index = resolve_device_index(index);
    const rt::AllocatorStats s =
        call_runtime([&] { return runtime_allocator(index).stats(); });
    const DeviceCounters& c = counters(index);
    const auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
    c10::CachingDeviceAllocator::DeviceStats stats;
    fill_stat(stats.allocated_bytes, i64(s.allocated_bytes),
              i64(s.peak_allocated_bytes), c.allocated_bytes.load(),
              c.freed_bytes.load());
    fill_stat(stats.active_bytes, i64(s.allocated_bytes),
              i64(s.peak_allocated_bytes), c.allocated_bytes.load(),
              c.freed_bytes.load());
    fill_stat(stats.reserved_bytes, i64(s.reserved_bytes),
              i64(s.peak_reserved_bytes), 0, 0);
    fill_stat(stats.requested_bytes, i64(s.requested_bytes),
              i64(s.requested_bytes), 0, 0);
    fill_stat(stats.inactive_split_bytes, i64(s.inactive_split_bytes),
              i64(s.inactive_split_bytes), 0, 0);
    fill_stat(stats.allocation, i64(s.allocation_count),
              i64(s.allocation_count),
              i64(s.num_allocs) - c.alloc_count_base.load(),
              i64(s.num_frees) - c.free_count_base.load());
    fill_stat(stats.active, i64(s.allocation_count), i64(s.allocation_count),
              i64(s.num_allocs) - c.alloc_count_base.load(),
              i64(s.num_frees) - c.free_count_base.load());
    fill_stat(stats.segment, i64(s.segment_count), i64(s.segment_count),
              i64(s.num_device_allocs), i64(s.num_device_frees));
    stats.num_ooms = i64(s.num_ooms);
    stats.num_alloc_retries = i64(s.num_cache_flushes);
    stats.num_device_alloc = i64(s.num_device_allocs);
    stats.num_device_free = i64(s.num_device_frees);
    return stats;
  }

  void resetAccumulatedStats(c10::DeviceIndex index) override {
    index = resolve_device_index(index);
    const rt::AllocatorStats s =
        call_runtime([&] { return runtime_allocator(index).stats(); });
    DeviceCounters& c = counters(index);
    c.allocated_bytes = 0;
    c.freed_bytes = 0;
    c.alloc_count_base = static_cast<int64_t>(s.num_allocs);
    c.free_count_base = static_cast<int64_t>(s.num_frees);
  }

  void resetPeakStats(c10::DeviceIndex index) override {
    index = resolve_device_index(index);
    call_runtime([&] { runtime_allocator(index).reset_peak_stats(); });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex index) override {
    index = resolve_device_index(index);
    return call_runtime([&] {
      const uint64_t total = runtime_device(index).properties().memory_bytes;
      return std::pair<size_t, size_t>(
          runtime_allocator(index).device_free_bytes(), total);
    });
  }
};

void free_pinned(void* ptr) { PinnedHostMemory::get().free(ptr); }

// Also PyTorch's host allocator of PrivateUse1 (at::getHostAllocator), so
// torch.accelerator.empty_host_cache() and host_memory_stats() work with
// spyre as the accelerator: without one registered they dereference a null
// allocator (vLLM calls empty_host_cache() when it shuts down). Pinned blocks
// are not cached (PinnedHostMemory frees them at once), so there is nothing
// to empty and no event to record.
class PinnedHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t bytes) override {
    void* ptr = nullptr;
    try {
      ptr = PinnedHostMemory::get().allocate(bytes);
    } catch (const std::bad_alloc&) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "spyre: cannot allocate ",
                       bytes, " bytes of pinned host memory");
    }
    return {ptr, ptr, &free_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned; }
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  bool record_event(void* /*ptr*/, void* /*ctx*/,
                    c10::Stream /*stream*/) override {
    return false;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    at::HostStats stats;
    const auto bytes =
        static_cast<int64_t>(PinnedHostMemory::get().bytes_in_use());
    const auto blocks =
        static_cast<int64_t>(PinnedHostMemory::get().block_count());
    stats.active_bytes.current = stats.allocated_bytes.current = bytes;
    stats.active_requests.current = stats.allocations.current = blocks;
    return stats;
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

SpyreDeviceAllocator g_device_allocator;
PinnedHostAllocator g_pinned_allocator;

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);
REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_pinned_allocator);

// What an empty storage wrapped by PyTorch (the DLPack of an empty view)
// has of an allocation: no memory, and an empty byte layout.
const Allocation& empty_allocation(c10::DeviceIndex device) {
  static const auto* empties = [] {
    auto* all = new std::array<Allocation, kMaxDevices>;
    const int64_t none = 0;
    const auto layout = std::make_shared<const DeviceLayout>(
        make_default_layout({&none, 1}, 1));
    for (size_t i = 0; i < all->size(); ++i) {
      (*all)[i].device = static_cast<c10::DeviceIndex>(i);
      (*all)[i].layout = layout;
    }
    return all;
  }();
  return (*empties)[device];
}

}  // namespace

c10::DataPtr allocate_with_layout(c10::DeviceIndex device,
                                  DeviceLayout layout) {
  return allocate_with_layout(
      device, std::make_shared<const DeviceLayout>(std::move(layout)));
}

c10::DataPtr allocate_with_layout(c10::DeviceIndex device,
                                  std::shared_ptr<const DeviceLayout> layout) {
  device = resolve_device_index(device);
  auto allocation = std::make_unique<Allocation>();
  allocation->device = device;
  allocation->layout = std::move(layout);
  const uint64_t bytes = allocation->layout->device_bytes();
  if (bytes > 0) {
    rt::Stream& stream = runtime_stream(current_stream(device));
    allocation->ptr = call_runtime([&] {
      try {
        return runtime_allocator(device).allocate(bytes, &stream);
      } catch (const rt::Error& error) {
        if (error.code() != rt::ErrorCode::kOutOfMemory) throw;
        // Queued work keeps the storages it uses alive until it has run, so
        // memory the program already let go of may only be held by it: wait
        // for the device's work (which releases that memory) and try once
        // more, so the error, if any, counts only what is truly live.
        runtime().synchronize(device);
        return runtime_allocator(device).allocate(bytes, &stream);
      }
    });
    counters(device).allocated_bytes += static_cast<int64_t>(bytes);
    LiveAllocations& live = live_allocations();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.by_ptr[device][allocation->ptr] = allocation.get();
  }
  void* data = reinterpret_cast<void*>(allocation->ptr);
  return {data, allocation.release(), &delete_allocation,
          c10::Device(kSpyre, device)};
}

const Allocation& allocation_of(const c10::Storage& storage) {
  const c10::DataPtr& data = storage.data_ptr();
  TORCH_CHECK(data.device().type() == kSpyre,
              "spyre: expected a spyre storage, got one on ", data.device());
  if (data.get_deleter() == &delete_allocation) {
    return *static_cast<const Allocation*>(data.get_context());
  }
  // A storage wrapped around a spyre address by PyTorch (torch.from_dlpack):
  // the allocation it shares, which the wrapper's deleter keeps alive. A
  // view's storage begins inside it (storage_window_bytes).
  const c10::DeviceIndex device = resolve_device_index(data.device().index());
  if (storage.nbytes() == 0) return empty_allocation(device);
  const auto ptr = reinterpret_cast<rt::DevicePtr>(data.get());
  const Allocation* allocation = live_allocations().containing(device, ptr);
  TORCH_CHECK(allocation != nullptr, "spyre: storage on ", data.device(),
              " was not allocated by the spyre allocator");
  const uint64_t window = ptr - allocation->ptr;
  TORCH_CHECK(window + storage.nbytes() <= allocation->layout->host_bytes(),
              "spyre: a storage of ", storage.nbytes(), " bytes from byte ",
              window, " of a spyre tensor's ", allocation->layout->host_bytes(),
              " reaches past its end; export the tensor itself");
  return *allocation;
}

uint64_t storage_window_bytes(const c10::Storage& storage) {
  if (storage.nbytes() == 0) return 0;
  return reinterpret_cast<rt::DevicePtr>(storage.data()) -
         allocation_of(storage).ptr;
}

void record_stream(const c10::DataPtr& data, const c10::Stream& stream) {
  // A storage PyTorch wrapped around our memory (DLPack) records the
  // allocation it shares.
  const Allocation* allocation =
      data.get_deleter() == &delete_allocation
          ? static_cast<const Allocation*>(data.get_context())
          : live_allocations().containing(
                resolve_device_index(data.device().index()),
                reinterpret_cast<rt::DevicePtr>(data.get()));
  if (allocation == nullptr || allocation->ptr == 0) return;
  TORCH_CHECK_VALUE(stream.device_index() == allocation->device,
                    "spyre: a tensor of device ", int(allocation->device),
                    " cannot be recorded on a stream of device ",
                    int(stream.device_index()));
  rt::Stream& target = runtime_stream(stream);
  call_runtime([&] {
    runtime_allocator(allocation->device)
        .record_stream(allocation->ptr, target);
  });
}

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }
c10::Allocator* pinned_host_allocator() { return &g_pinned_allocator; }

}  // namespace spyre::torch_glue
