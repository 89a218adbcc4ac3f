#include "memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "spyre/runtime/dtype.h"
#include "spyre/runtime/error.h"

namespace spyre::sim {
namespace {

uint8_t* reserve(uint64_t bytes, int protection, const char* what) {
  void* p = mmap(nullptr, bytes, protection,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw rt::Error(
        rt::ErrorCode::kBackendError,
        rt::str("sim: cannot reserve ", rt::format_bytes(bytes),
                " of virtual memory for the ", what, ": ", std::strerror(errno),
                "; set SPYRE_SIM_MEMORY_GB to a smaller size"));
  }
  return static_cast<uint8_t*>(p);
}

uint64_t page_size() {
  static const uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

DeviceMemory::DeviceMemory(uint64_t bytes)
    : size_(bytes / rt::kStickBytes * rt::kStickBytes) {
  rt::check(size_ > 0, rt::ErrorCode::kInvalidArgument,
            "sim: device memory size must be at least one stick");
  backing_ = reserve(size_, PROT_READ | PROT_WRITE, "device memory");
  try {
    guard_ = reserve(size_, PROT_NONE, "device address guard");
  } catch (...) {
    munmap(backing_, size_);
    throw;
  }
  free_[0] = size_;
}

DeviceMemory::~DeviceMemory() {
  munmap(guard_, size_);
  munmap(backing_, size_);
}

uint64_t DeviceMemory::allocate(uint64_t bytes) {
  uint64_t rounded = rt::round_up_to_sticks(bytes == 0 ? 1 : bytes);
  std::unique_lock lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < rounded) continue;
    uint64_t offset = it->first;
    uint64_t remaining = it->second - rounded;
    free_.erase(it);
    if (remaining > 0) free_[offset + rounded] = remaining;
    live_[offset] = rounded;
    in_use_ += rounded;
    return guard_base() + offset;
  }
  uint64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  uint64_t free_bytes = size_ - in_use_;
  throw rt::OutOfMemoryError(
      rt::str("sim device out of memory: asked for ", rt::format_bytes(bytes),
              ", ", rt::format_bytes(free_bytes), " free of ",
              rt::format_bytes(size_), " (largest free block ",
              rt::format_bytes(largest),
              "); free tensors or raise SPYRE_SIM_MEMORY_GB"),
      bytes, free_bytes, 0);
}

void DeviceMemory::free(uint64_t ptr) {
  std::unique_lock lock(mutex_);
  uint64_t offset = ptr - guard_base();
  auto it = ptr >= guard_base() ? live_.find(offset) : live_.end();
  rt::check(it != live_.end(), rt::ErrorCode::kInvalidArgument,
            "sim: free of device address 0x", std::hex, ptr,
            " which is not a live allocation");
  uint64_t bytes = it->second;
  live_.erase(it);
  in_use_ -= bytes;

  // Coalesce with the neighbouring free blocks, then give the whole pages
  // of the merged block back to the host.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      free_.erase(prev);
    }
  }
  free_[offset] = bytes;
  release_pages(offset, bytes);
}

void DeviceMemory::release_pages(uint64_t offset, uint64_t bytes) {
  uint64_t page = page_size();
  uint64_t lo = (offset + page - 1) / page * page;
  uint64_t hi = (offset + bytes) / page * page;
  if (hi > lo) madvise(backing_ + lo, hi - lo, MADV_DONTNEED);
}

uint64_t DeviceMemory::bytes_in_use() const {
  std::shared_lock lock(mutex_);
  return in_use_;
}

bool DeviceMemory::inside_locked(uint64_t ptr, uint64_t bytes) const {
  if (ptr < guard_base()) return false;
  uint64_t offset = ptr - guard_base();
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return false;
  --it;
  uint64_t end = it->first + it->second;
  return offset < end && bytes <= end - offset;
}

bool DeviceMemory::inside_allocation(uint64_t ptr, uint64_t bytes) const {
  std::shared_lock lock(mutex_);
  return inside_locked(ptr, bytes);
}

bool DeviceMemory::inside_allocation_of(uint64_t anchor, uint64_t ptr,
                                        uint64_t bytes) const {
  std::shared_lock lock(mutex_);
  if (anchor < guard_base() || ptr < guard_base()) return false;
  auto it = live_.upper_bound(anchor - guard_base());
  if (it == live_.begin()) return false;
  --it;
  uint64_t begin = it->first, end = it->first + it->second;
  uint64_t offset = ptr - guard_base();
  return anchor - guard_base() < end && offset >= begin && offset <= end &&
         bytes <= end - offset;
}

uint8_t* DeviceMemory::translate(uint64_t ptr, uint64_t bytes,
                                 const char* what) const {
  std::shared_lock lock(mutex_);
  rt::check(inside_locked(ptr, bytes), rt::ErrorCode::kDeviceError,
            "sim: ", what, " of ", bytes, " bytes at device address 0x",
            std::hex, ptr, " is outside every live allocation");
  return host(ptr);
}

}  // namespace spyre::sim
