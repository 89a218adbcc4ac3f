// The caching device allocator.
//
// Requests are rounded up to whole 128-byte sticks. Small requests (<= 1 MiB)
// are carved from 2 MiB segments, large ones from segments rounded to 2 MiB;
// a block larger than a request is split and the remainder kept, and adjacent
// free blocks of one segment merge again. Free blocks are pooled per stream: a
// block freed on stream S serves later requests on S at once, because S's
// work is ordered. A block that was also used on other streams
// (record_stream) returns to its pool only after those streams' work queued
// before the free has completed, tracked with events.
//
// When device memory runs out the allocator releases its unused cached
// segments and retries once; if the request still cannot be met it raises
// OutOfMemoryError with the request, the free and the cached bytes, and stays
// fully usable.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "spyre/runtime/device.h"
#include "spyre/runtime/error.h"  // OutOfMemoryError, raised by allocate()

namespace spyre::rt {

class Stream;

struct AllocatorStats {
  uint64_t allocated_bytes = 0;  // held by live allocations (rounded)
  uint64_t reserved_bytes = 0;   // obtained from the device (segments)
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  uint64_t requested_bytes = 0;   // as asked, before rounding
  uint64_t allocation_count = 0;  // live allocations
  uint64_t segment_count = 0;     // live segments
  uint64_t num_allocs = 0;        // cumulative
  uint64_t num_frees = 0;
  uint64_t num_device_allocs = 0;  // segments taken from the device
  uint64_t num_device_frees = 0;
  uint64_t num_ooms = 0;
  uint64_t num_cache_flushes = 0;
  uint64_t inactive_split_bytes = 0;  // free bytes inside partly used segments
  // 1 - largest free block / all free cached bytes (0 when nothing is free).
  double fragmentation = 0;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(Device& device);
  ~CachingAllocator();  // returns every segment to the device
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` for use on `stream` (null: the default
  // stream, id 0). Zero bytes gives a null pointer.
  DevicePtr allocate(uint64_t bytes, Stream* stream = nullptr);
  // Returns a block; its memory may be reused by its stream at once and by
  // other streams once it is safe.
  void free(DevicePtr ptr);
  // Marks `ptr` as used by `stream` too, so free() waits for that stream.
  void record_stream(DevicePtr ptr, Stream& stream);

  // The allocation containing `ptr` (any byte inside it): its base and size;
  // {0, 0} when `ptr` is not inside a live allocation.
  struct BlockInfo {
    DevicePtr base = 0;
    uint64_t bytes = 0;
  };
  BlockInfo find(DevicePtr ptr) const;

  // Returns every unused cached segment to the device.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak_stats();
  // Memory the device could still give (total minus what is in use there).
  uint64_t device_free_bytes() const;

 private:
  struct Block;
  struct Pool;
  struct PendingFree;
  // Orders free blocks by (size, address), so lower_bound(size) is the best
  // fit; a bare size compares as (size, 0).
  struct BySizeThenAddress {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const;
    bool operator()(const Block* a, uint64_t size) const;
    bool operator()(uint64_t size, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySizeThenAddress>;
  using LiveMap = std::map<DevicePtr, Block*>;

  Pool& pool_for(uint64_t stream_id);
  Block* take_free_block(Pool& pool, uint64_t size, bool large);
  Block* new_segment(Pool& pool, uint64_t size, bool large, uint64_t asked);
  void split(Block* block, uint64_t size);
  void insert_free(Block* block);
  void return_block(Block* block);
  void mark_live(Block* block);
  Block* block_containing(DevicePtr ptr) const;
  void process_pending_frees();
  uint64_t release_cached_segments();
  Block* new_block();
  void recycle(Block* block);
  [[noreturn]] void throw_out_of_memory(uint64_t asked, uint64_t rounded,
                                        uint64_t segment_bytes);

  Device& device_;
  mutable std::mutex mutex_;
  LiveMap live_;                                     // allocation base -> block
  std::map<uint64_t, std::unique_ptr<Pool>> pools_;  // by stream id
  Pool* last_pool_ = nullptr;         // most pools see runs of one stream
  std::vector<PendingFree> pending_;  // freed, waiting on other streams
  std::vector<std::unique_ptr<Block>> blocks_;  // every block ever made
  std::vector<Block*> spare_blocks_;            // merged away, ready for reuse
  AllocatorStats stats_;
};

}  // namespace spyre::rt
