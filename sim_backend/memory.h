// Emulated device memory: a large virtual reservation backed on touch, with
// device addresses that the host cannot dereference.
//
// Two reservations of the same size are made: `backing_` (read/write,
// MAP_NORESERVE, so pages cost host memory only once written) holds the
// bytes; `guard_` (PROT_NONE) only provides the numbers handed out as device
// addresses. An accidental host dereference of a device address lands in
// the guard and faults instead of corrupting memory.
#pragma once

#include <cstdint>
#include <map>
#include <shared_mutex>

namespace spyre::sim {

class DeviceMemory {
 public:
  explicit DeviceMemory(uint64_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  uint64_t size() const { return size_; }

  // 128-byte aligned; throws rt::OutOfMemoryError with asked/free numbers.
  uint64_t allocate(uint64_t bytes);
  // Throws kInvalidArgument for an address that is not a live allocation.
  void free(uint64_t ptr);
  uint64_t bytes_in_use() const;

  // Host pointer to [ptr, ptr + bytes) after checking the range lies inside
  // one live allocation; throws kDeviceError naming `what` otherwise.
  uint8_t* translate(uint64_t ptr, uint64_t bytes, const char* what) const;
  // The same check without translating; false when outside.
  bool inside_allocation(uint64_t ptr, uint64_t bytes) const;
  // Whether [ptr, ptr + bytes) lies inside the live allocation that holds
  // `anchor` (a tensor's first byte), so an access cannot spill from its
  // tensor's allocation into a live neighbour. False when `anchor` is in none.
  bool inside_allocation_of(uint64_t anchor, uint64_t ptr,
                            uint64_t bytes) const;
  // Host pointer without a check, for ranges already checked.
  uint8_t* host(uint64_t ptr) const { return backing_ + (ptr - guard_base()); }

 private:
  uint64_t guard_base() const { return reinterpret_cast<uint64_t>(guard_); }
  bool inside_locked(uint64_t ptr, uint64_t bytes) const;
  void release_pages(uint64_t offset, uint64_t bytes);

  uint64_t size_;
  uint8_t* backing_ = nullptr;
  uint8_t* guard_ = nullptr;
  mutable std::shared_mutex mutex_;
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes, coalesced
  std::map<uint64_t, uint64_t> live_;  // offset -> bytes (rounded)
  uint64_t in_use_ = 0;
};

}  // namespace spyre::sim
