// The caching allocator. Segments come from the device; each is a doubly
// linked list of blocks in address order. Free blocks sit in their stream's
// pool, in a set ordered by size for best fit; live ones in a map by address.
//
// The hot path (a cache hit) allocates no host memory: every Block keeps the
// set and map nodes it was last stored in (C++17 node handles) and moves them
// back in, and blocks merged away are recycled rather than deleted.
#include "spyre/runtime/allocator.h"

#include <algorithm>

#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

constexpr uint64_t kSmallRequestBytes = 1ull << 20;  // <= this: small pool
constexpr uint64_t kSegmentGranule = 2ull << 20;     // segment size unit
// Beyond this, rounding could overflow and no device has that much memory.
constexpr uint64_t kMaxRequestBytes = 1ull << 62;

uint64_t round_up(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

}  // namespace

struct CachingAllocator::Block {
  enum class State : uint8_t { kFree, kLive, kPending, kSpare };

  DevicePtr addr = 0;
  uint64_t size = 0;
  uint64_t asked = 0;  // bytes requested by the live allocation
  Pool* pool = nullptr;
  bool large = false;
  State state = State::kSpare;
  Block* prev = nullptr;  // neighbours in the segment, by address
  Block* next = nullptr;
  std::vector<Stream*> other_streams;  // from record_stream
  FreeSet::node_type free_node;        // kept while out of a free set
  LiveMap::node_type live_node;        // kept while out of live_

  bool whole_segment() const { return !prev && !next; }
};

struct CachingAllocator::Pool {
  explicit Pool(uint64_t id) : stream_id(id) {}
  uint64_t stream_id;
  FreeSet small;
  FreeSet large;
  FreeSet& set(bool is_large) { return is_large ? large : small; }
};

struct CachingAllocator::PendingFree {
  Block* block;
  std::vector<std::unique_ptr<Event>> events;  // one per other stream
};

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a,
                                                     const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}
bool CachingAllocator::BySizeThenAddress::operator()(const Block* a,
                                                     uint64_t size) const {
  return a->size < size;
}
bool CachingAllocator::BySizeThenAddress::operator()(uint64_t size,
                                                     const Block* b) const {
  return size < b->size;
}

CachingAllocator::CachingAllocator(Device& device) : device_(device) {}

CachingAllocator::~CachingAllocator() {
  for (const auto& block : blocks_) {
    if (block->state == Block::State::kSpare || block->prev) continue;
    try {
      device_.free(block->addr);  // a segment head: the device's allocation
    } catch (...) {
      // The device is going away too; nothing useful to do with the error.
    }
  }
}

DevicePtr CachingAllocator::allocate(uint64_t bytes, Stream* stream) {
  if (bytes == 0) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty()) process_pending_frees();
  if (bytes > kMaxRequestBytes) {
    ++stats_.num_ooms;
    throw_out_of_memory(bytes, bytes, bytes);
  }
  const uint64_t size = round_up_to_sticks(bytes);
  const bool large = size > kSmallRequestBytes;
  Pool& pool = pool_for(stream ? stream->id() : 0);
  Block* block = take_free_block(pool, size, large);
  if (!block) block = new_segment(pool, size, large, bytes);
  split(block, size);
  block->asked = bytes;
  mark_live(block);

  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += bytes;
  ++stats_.allocation_count;
  ++stats_.num_allocs;
  stats_.peak_allocated_bytes =
      std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return block->addr;
}

void CachingAllocator::free(DevicePtr ptr) {
  if (ptr == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  check(it != live_.end(), ErrorCode::kInvalidArgument, "free of device ",
        "pointer 0x", std::hex, ptr, std::dec,
        " that is not the start of a live allocation of this allocator ",
        "(freed twice, an interior pointer, or memory from elsewhere)");
  Block* block = it->second;
  block->live_node = live_.extract(it);
  ++stats_.num_frees;
  if (block->other_streams.empty()) {
    return_block(block);  // only its own stream used it: ordered, reuse now
    return;
  }
  // Other streams may still have work queued that uses this memory: mark
  // where their queues are now and keep the block until they pass it.
  PendingFree pending{block, {}};
  for (Stream* other : block->other_streams) {
    auto event = std::make_unique<Event>();
    event->record(*other);
    pending.events.push_back(std::move(event));
  }
  block->other_streams.clear();
  block->state = Block::State::kPending;
  pending_.push_back(std::move(pending));
}

void CachingAllocator::record_stream(DevicePtr ptr, Stream& stream) {
  check(&stream.device() == &device_, ErrorCode::kInvalidArgument,
        "record_stream: stream ", stream.id(),
        " belongs to another device than this allocator's");
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = block_containing(ptr);
  check(block != nullptr, ErrorCode::kInvalidArgument,
        "record_stream: device pointer 0x", std::hex, ptr, std::dec,
        " is not inside a live allocation of this allocator");
  if (stream.id() == block->pool->stream_id) return;
  auto& others = block->other_streams;
  if (std::find(others.begin(), others.end(), &stream) == others.end()) {
    others.push_back(&stream);
  }
}

CachingAllocator::BlockInfo CachingAllocator::find(DevicePtr ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Block* block = block_containing(ptr);
  if (!block) return {};
  return {block->addr, block->size};
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_pending_frees();
  release_cached_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatorStats stats = stats_;
  uint64_t free_bytes = 0;
  uint64_t largest = 0;
  for (const auto& [id, pool] : pools_) {
    for (const FreeSet* set : {&pool->small, &pool->large}) {
      for (const Block* block : *set) {
        free_bytes += block->size;
        largest = std::max(largest, block->size);
        if (!block->whole_segment()) stats.inactive_split_bytes += block->size;
      }
    }
  }
  stats.fragmentation = free_bytes == 0
                            ? 0.0
                            : 1.0 - static_cast<double>(largest) /
                                        static_cast<double>(free_bytes);
  return stats;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

uint64_t CachingAllocator::device_free_bytes() const {
  const uint64_t total = device_.properties().memory_bytes;
  const uint64_t used = device_.bytes_in_use();
  return used >= total ? 0 : total - used;
}

CachingAllocator::Pool& CachingAllocator::pool_for(uint64_t stream_id) {
  if (last_pool_ && last_pool_->stream_id == stream_id) return *last_pool_;
  auto& slot = pools_[stream_id];
  if (!slot) slot = std::make_unique<Pool>(stream_id);
  last_pool_ = slot.get();
  return *slot;
}

CachingAllocator::Block* CachingAllocator::take_free_block(Pool& pool,
                                                           uint64_t size,
                                                           bool large) {
  FreeSet& set = pool.set(large);
  auto it = set.lower_bound(size);
  if (it == set.end()) return nullptr;
  Block* block = *it;
  block->free_node = set.extract(it);
  block->state = Block::State::kLive;  // out of the set: never merge into it
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(Pool& pool,
                                                       uint64_t size,
                                                       bool large,
                                                       uint64_t asked) {
  const uint64_t segment_bytes =
      large ? round_up(size, kSegmentGranule) : kSegmentGranule;
  DevicePtr addr = 0;
  try {
    addr = device_.allocate(segment_bytes);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kOutOfMemory) throw;
    // Cached segments of any pool may be what the device is missing. Frees
    // still waiting on other streams are not waited for: the caller may be
    // the very thread those streams wait on.
    if (release_cached_segments() == 0) {
      ++stats_.num_ooms;
      throw_out_of_memory(asked, size, segment_bytes);
    }
    try {
      addr = device_.allocate(segment_bytes);
    } catch (const Error& retry_error) {
      if (retry_error.code() != ErrorCode::kOutOfMemory) throw;
      ++stats_.num_ooms;
      throw_out_of_memory(asked, size, segment_bytes);
    }
  }
  Block* block = new_block();
  block->addr = addr;
  block->size = segment_bytes;
  block->pool = &pool;
  block->large = large;
  block->prev = block->next = nullptr;
  block->state = Block::State::kLive;
  stats_.reserved_bytes += segment_bytes;
  ++stats_.segment_count;
  ++stats_.num_device_allocs;
  stats_.peak_reserved_bytes =
      std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

void CachingAllocator::split(Block* block, uint64_t size) {
  if (block->size - size < kStickBytes) return;
  Block* rest = new_block();
  rest->addr = block->addr + size;
  rest->size = block->size - size;
  rest->pool = block->pool;
  rest->large = block->large;
  rest->prev = block;
  rest->next = block->next;
  if (block->next) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  insert_free(rest);
}

void CachingAllocator::insert_free(Block* block) {
  FreeSet& set = block->pool->set(block->large);
  if (Block* prev = block->prev; prev && prev->state == Block::State::kFree) {
    prev->free_node = set.extract(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next) block->next->prev = prev;
    recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next && next->state == Block::State::kFree) {
    next->free_node = set.extract(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next) next->next->prev = block;
    recycle(next);
  }
  block->state = Block::State::kFree;
  if (block->free_node) {
    set.insert(std::move(block->free_node));
  } else {
    set.insert(block);
  }
}

void CachingAllocator::return_block(Block* block) {
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->asked;
  --stats_.allocation_count;
  block->asked = 0;
  insert_free(block);
}

void CachingAllocator::mark_live(Block* block) {
  if (block->live_node) {
    block->live_node.key() = block->addr;
    block->live_node.mapped() = block;
    live_.insert(std::move(block->live_node));
  } else {
    live_.emplace(block->addr, block);
  }
}

CachingAllocator::Block* CachingAllocator::block_containing(
    DevicePtr ptr) const {
  auto it = live_.upper_bound(ptr);
  if (it == live_.begin()) return nullptr;
  --it;
  Block* block = it->second;
  return ptr < block->addr + block->size ? block : nullptr;
}

void CachingAllocator::process_pending_frees() {
  for (size_t i = 0; i < pending_.size();) {
    PendingFree& pending = pending_[i];
    const bool safe =
        std::all_of(pending.events.begin(), pending.events.end(),
                    [](const std::unique_ptr<Event>& e) { return e->query(); });
    if (!safe) {
      ++i;
      continue;
    }
    return_block(pending.block);
    if (i + 1 != pending_.size()) pending_[i] = std::move(pending_.back());
    pending_.pop_back();
  }
}

uint64_t CachingAllocator::release_cached_segments() {
  ++stats_.num_cache_flushes;
  uint64_t released = 0;
  for (auto& [id, pool] : pools_) {
    for (FreeSet* set : {&pool->small, &pool->large}) {
      for (auto it = set->begin(); it != set->end();) {
        Block* block = *it;
        if (!block->whole_segment()) {
          ++it;
          continue;
        }
        device_.free(block->addr);
        it = set->erase(it);
        released += block->size;
        stats_.reserved_bytes -= block->size;
        --stats_.segment_count;
        ++stats_.num_device_frees;
        recycle(block);
      }
    }
  }
  return released;
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (spare_blocks_.empty()) {
    blocks_.push_back(std::make_unique<Block>());
    return blocks_.back().get();
  }
  Block* block = spare_blocks_.back();
  spare_blocks_.pop_back();
  return block;
}

void CachingAllocator::recycle(Block* block) {
  block->state = Block::State::kSpare;
  block->prev = block->next = nullptr;
  block->pool = nullptr;
  spare_blocks_.push_back(block);
}

void CachingAllocator::throw_out_of_memory(uint64_t asked, uint64_t rounded,
                                           uint64_t segment_bytes) {
  const uint64_t free_bytes = device_free_bytes();
  const uint64_t cached = stats_.reserved_bytes - stats_.allocated_bytes;
  throw OutOfMemoryError(
      str("spyre device ", device_.properties().index,
          " is out of memory: tried to allocate ", format_bytes(asked), " (",
          format_bytes(rounded), " in whole sticks, a ",
          format_bytes(segment_bytes), " segment); the device has ",
          format_bytes(free_bytes), " free of ",
          format_bytes(device_.properties().memory_bytes),
          "; the caching allocator holds ",
          format_bytes(stats_.allocated_bytes), " in live allocations and ",
          format_bytes(cached),
          " cached in partly used segments (whole free segments were "
          "already returned to the device). Free tensors that are no longer "
          "needed or use smaller sizes."),
      asked, free_bytes, cached);
}

}  // namespace spyre::rt
