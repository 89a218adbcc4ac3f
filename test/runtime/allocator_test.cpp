// The caching allocator over a host-memory FakeDevice.
#include "spyre/runtime/allocator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <latch>
#include <random>
#include <thread>
#include <vector>

#include "fake_device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

using testing::FakeDevice;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kSegment = 2 * kMiB;

TEST(CachingAllocator, RoundsToWholeSticks) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr one = alloc.allocate(1);
  DevicePtr sticks = alloc.allocate(129);
  EXPECT_EQ(one % kStickBytes, 0u);
  EXPECT_EQ(alloc.find(one).bytes, 128u);
  EXPECT_EQ(alloc.find(sticks).bytes, 256u);
  AllocatorStats stats = alloc.stats();
  EXPECT_EQ(stats.allocated_bytes, 128u + 256u);
  EXPECT_EQ(stats.requested_bytes, 1u + 129u);
  EXPECT_EQ(stats.reserved_bytes, kSegment);
  EXPECT_EQ(alloc.allocate(0), 0u);
  EXPECT_EQ(alloc.stats().num_allocs, 2u);
  alloc.free(one);
  alloc.free(sticks);
}

TEST(CachingAllocator, SmallRequestsShareSegmentsAndLargeOnesRoundTo2MiB) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr a = alloc.allocate(kMiB);  // the largest small request
  DevicePtr b = alloc.allocate(kMiB);
  EXPECT_EQ(b, a + kMiB);  // same segment, adjacent
  EXPECT_EQ(alloc.stats().segment_count, 1u);
  DevicePtr large = alloc.allocate(3 * kMiB);
  AllocatorStats stats = alloc.stats();
  EXPECT_EQ(stats.segment_count, 2u);
  EXPECT_EQ(stats.reserved_bytes, kSegment + 4 * kMiB);
  EXPECT_EQ(stats.allocated_bytes, 5 * kMiB);
  // The 1 MiB left in the large segment serves only large requests.
  DevicePtr small = alloc.allocate(128);
  EXPECT_EQ(alloc.stats().segment_count, 3u);
  for (DevicePtr p : {a, b, large, small}) alloc.free(p);
}

TEST(CachingAllocator, SplitsAndMergesNeighbours) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr a = alloc.allocate(128);
  DevicePtr b = alloc.allocate(128);
  DevicePtr c = alloc.allocate(128);
  EXPECT_EQ(b, a + 128);
  EXPECT_EQ(c, b + 128);
  const uint64_t tail = kSegment - 384;

  alloc.free(b);  // a hole between two live blocks
  AllocatorStats stats = alloc.stats();
  EXPECT_EQ(stats.inactive_split_bytes, tail + 128);
  EXPECT_DOUBLE_EQ(stats.fragmentation,
                   1.0 - static_cast<double>(tail) / (tail + 128));

  alloc.free(a);  // merges with b's hole into 256 bytes at a
  EXPECT_EQ(alloc.allocate(256), a);
  alloc.free(a);
  alloc.free(c);  // everything merges back into one whole segment
  stats = alloc.stats();
  EXPECT_EQ(stats.inactive_split_bytes, 0u);
  EXPECT_EQ(stats.fragmentation, 0.0);
  EXPECT_EQ(stats.segment_count, 1u);
  DevicePtr whole = alloc.allocate(kMiB);  // needs the merged space
  EXPECT_EQ(whole, a);
  EXPECT_EQ(alloc.stats().num_device_allocs, 1u);
  alloc.free(whole);
}

TEST(CachingAllocator, ReusesAFreedBlockOnTheSameStream) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr p = alloc.allocate(4 * kKiB);
  alloc.free(p);
  for (int i = 0; i < 100; ++i) {
    DevicePtr q = alloc.allocate(4 * kKiB);
    EXPECT_EQ(q, p);
    alloc.free(q);
  }
  EXPECT_EQ(alloc.stats().num_device_allocs, 1u);
  EXPECT_EQ(device.device_allocations(), 1);
}

TEST(CachingAllocator, PoolsFreedBlocksPerStream) {
  FakeDevice device;
  CachingAllocator alloc(device);
  Stream s1(device, 1);
  Stream s2(device, 2);
  DevicePtr p = alloc.allocate(4 * kKiB, &s1);
  alloc.free(p);
  DevicePtr q = alloc.allocate(4 * kKiB, &s2);
  EXPECT_NE(q, p);
  EXPECT_EQ(alloc.stats().num_device_allocs, 2u);  // s2 has its own segment
  EXPECT_EQ(alloc.allocate(4 * kKiB, &s1), p);
  DevicePtr d = alloc.allocate(4 * kKiB);  // null stream: stream 0's pool
  EXPECT_EQ(alloc.stats().num_device_allocs, 3u);
  for (DevicePtr x : {p, q, d}) alloc.free(x);
}

TEST(CachingAllocator, BlockUsedOnABusyStreamWaitsForThatStream) {
  FakeDevice device;
  CachingAllocator alloc(device);
  Stream owner(device, 1);
  Stream busy(device, 2);
  DevicePtr p = alloc.allocate(4 * kKiB, &owner);
  std::latch gate(1);
  busy.enqueue([&gate] {
    gate.wait();  // stands for a kernel still reading p
    return 0.0;
  });
  alloc.record_stream(p, busy);
  alloc.free(p);
  EXPECT_EQ(alloc.find(p).bytes, 0u);  // no longer a live allocation

  DevicePtr q = alloc.allocate(4 * kKiB, &owner);
  EXPECT_NE(q, p) << "reused memory the busy stream may still use";
  EXPECT_EQ(alloc.stats().allocated_bytes, 8 * kKiB);  // p still held

  gate.count_down();
  busy.synchronize();
  DevicePtr r = alloc.allocate(4 * kKiB, &owner);
  EXPECT_EQ(r, p);
  alloc.free(q);
  alloc.free(r);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
}

TEST(CachingAllocator, BlockUsedOnSeveralStreamsWaitsForAllOfThem) {
  FakeDevice device;
  CachingAllocator alloc(device);
  Stream owner(device, 1);
  Stream first(device, 2);
  Stream second(device, 3);
  DevicePtr p = alloc.allocate(kMiB, &owner);
  std::latch first_gate(1);
  std::latch second_gate(1);
  for (auto [stream, gate] :
       {std::pair{&first, &first_gate}, std::pair{&second, &second_gate}}) {
    stream->enqueue([gate] {
      gate->wait();
      return 0.0;
    });
    alloc.record_stream(p, *stream);
    alloc.record_stream(p, *stream);  // recording twice is harmless
  }
  alloc.free(p);
  first_gate.count_down();
  first.synchronize();
  DevicePtr q = alloc.allocate(kMiB, &owner);
  EXPECT_NE(q, p) << "reused while the second stream may still use it";
  second_gate.count_down();
  second.synchronize();
  EXPECT_EQ(alloc.allocate(kMiB, &owner), p);
  // A new allocation starts with no recorded streams: it frees at once.
  alloc.free(p);
  EXPECT_EQ(alloc.allocate(kMiB, &owner), p);
  alloc.free(p);
  alloc.free(q);
  EXPECT_EQ(alloc.stats().allocation_count, 0u);
}

TEST(CachingAllocator, RecordStreamOnTheOwningStreamFreesAtOnce) {
  FakeDevice device;
  CachingAllocator alloc(device);
  Stream owner(device, 1);
  DevicePtr p = alloc.allocate(256, &owner);
  alloc.record_stream(p + 128, owner);  // interior pointers are accepted
  alloc.free(p);
  EXPECT_EQ(alloc.allocate(256, &owner), p);
  EXPECT_THROW(alloc.record_stream(0x1, owner), Error);
  FakeDevice other_device;
  Stream foreign(other_device, 1);
  EXPECT_THROW(alloc.record_stream(p, foreign), Error);
  alloc.free(p);
}

TEST(CachingAllocator, StatsAreExact) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr a = alloc.allocate(100);           // 128
  DevicePtr b = alloc.allocate(5000);          // 5120
  DevicePtr c = alloc.allocate(2 * kMiB + 1);  // large: 2 MiB + 128, seg 4 MiB
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 128 + 5120 + 2 * kMiB + 128);
  EXPECT_EQ(s.requested_bytes, 100 + 5000 + 2 * kMiB + 1);
  EXPECT_EQ(s.reserved_bytes, kSegment + 4 * kMiB);
  EXPECT_EQ(s.peak_allocated_bytes, s.allocated_bytes);
  EXPECT_EQ(s.peak_reserved_bytes, s.reserved_bytes);
  EXPECT_EQ(s.allocation_count, 3u);
  EXPECT_EQ(s.segment_count, 2u);
  EXPECT_EQ(s.num_allocs, 3u);
  EXPECT_EQ(s.num_frees, 0u);
  EXPECT_EQ(s.num_device_allocs, 2u);
  EXPECT_EQ(s.num_device_frees, 0u);
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.num_cache_flushes, 0u);
  const uint64_t small_tail = kSegment - 128 - 5120;
  const uint64_t large_tail = 4 * kMiB - (2 * kMiB + 128);
  EXPECT_EQ(s.inactive_split_bytes, small_tail + large_tail);
  EXPECT_DOUBLE_EQ(s.fragmentation,
                   1.0 - static_cast<double>(large_tail) /
                             static_cast<double>(small_tail + large_tail));
  const uint64_t peak = s.allocated_bytes;

  alloc.free(c);
  alloc.free(a);
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 5120u);
  EXPECT_EQ(s.requested_bytes, 5000u);
  EXPECT_EQ(s.peak_allocated_bytes, peak);
  EXPECT_EQ(s.allocation_count, 1u);
  EXPECT_EQ(s.num_frees, 2u);
  EXPECT_EQ(s.reserved_bytes, kSegment + 4 * kMiB);  // cached, not returned
  // Free now: the whole large segment, and a 128 B hole plus the small tail.
  EXPECT_EQ(s.inactive_split_bytes, 128 + small_tail);
  EXPECT_DOUBLE_EQ(s.fragmentation,
                   1.0 - static_cast<double>(4 * kMiB) /
                             static_cast<double>(4 * kMiB + 128 + small_tail));

  alloc.reset_peak_stats();
  s = alloc.stats();
  EXPECT_EQ(s.peak_allocated_bytes, 5120u);
  EXPECT_EQ(s.peak_reserved_bytes, kSegment + 4 * kMiB);
  alloc.free(b);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0u);
}

TEST(CachingAllocator, EmptyCacheReturnsUnusedSegmentsToTheDevice) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr kept = alloc.allocate(128);
  DevicePtr big = alloc.allocate(8 * kMiB);
  DevicePtr other = alloc.allocate(kMiB + 128);  // second small... large
  alloc.free(big);
  alloc.free(other);
  EXPECT_EQ(device.bytes_in_use(), kSegment + 8 * kMiB + kSegment);
  alloc.empty_cache();
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, kSegment);  // the segment `kept` lives in
  EXPECT_EQ(s.num_device_frees, 2u);
  EXPECT_EQ(s.num_cache_flushes, 1u);
  EXPECT_EQ(s.segment_count, 1u);
  EXPECT_EQ(device.bytes_in_use(), kSegment);
  EXPECT_EQ(alloc.device_free_bytes(),
            device.properties().memory_bytes - kSegment);
  alloc.free(kept);
  alloc.empty_cache();
  EXPECT_EQ(device.bytes_in_use(), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, DestructorReturnsEverySegment) {
  FakeDevice device;
  {
    CachingAllocator alloc(device);
    alloc.allocate(128);
    alloc.allocate(16 * kMiB);
    alloc.free(alloc.allocate(3 * kMiB));
    EXPECT_GT(device.bytes_in_use(), 0u);
  }
  EXPECT_EQ(device.bytes_in_use(), 0u);
}

// Runs `call`, which must raise OutOfMemoryError, and returns the error.
template <typename Call>
OutOfMemoryError expect_oom(Call&& call) {
  try {
    call();
  } catch (const OutOfMemoryError& error) {
    return error;
  }
  ADD_FAILURE() << "expected OutOfMemoryError";
  return OutOfMemoryError("none", 0, 0, 0);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CachingAllocator, OutOfMemorySaysAskedFreeAndCached) {
  FakeDevice device(8 * kMiB);
  CachingAllocator alloc(device);
  DevicePtr small = alloc.allocate(128);     // 2 MiB segment
  DevicePtr big = alloc.allocate(5 * kMiB);  // 6 MiB segment: device full
  OutOfMemoryError error =
      expect_oom([&] { alloc.allocate(kMiB + kKiB); });  // needs 2 MiB
  EXPECT_EQ(error.code(), ErrorCode::kOutOfMemory);
  EXPECT_EQ(error.requested_bytes(), kMiB + kKiB);
  EXPECT_EQ(error.free_bytes(), 0u);
  EXPECT_EQ(error.cached_bytes(), kSegment - 128 + kMiB);
  const std::string message = error.what();
  EXPECT_TRUE(
      contains(message, "tried to allocate " + format_bytes(kMiB + kKiB)))
      << message;
  EXPECT_TRUE(
      contains(message, format_bytes(0) + " free of " + format_bytes(8 * kMiB)))
      << message;
  EXPECT_TRUE(
      contains(message, format_bytes(kSegment - 128 + kMiB) + " cached"))
      << message;
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_ooms, 1u);
  EXPECT_EQ(s.allocation_count, 2u);

  // Still fully usable: free, allocate again, stats consistent.
  alloc.free(big);
  DevicePtr again = alloc.allocate(kMiB + kKiB);
  EXPECT_NE(again, 0u);
  alloc.free(again);
  alloc.free(small);
  alloc.empty_cache();
  EXPECT_EQ(device.bytes_in_use(), 0u);
  EXPECT_NO_THROW(alloc.free(alloc.allocate(6 * kMiB)));
}

TEST(CachingAllocator, ReleasesTheCacheAndRetriesBeforeFailing) {
  FakeDevice device(8 * kMiB);
  CachingAllocator alloc(device);
  std::vector<DevicePtr> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(alloc.allocate(kMiB));
  for (DevicePtr p : blocks) alloc.free(p);
  EXPECT_EQ(alloc.stats().reserved_bytes, 8 * kMiB);  // all cached, small
  DevicePtr large = alloc.allocate(4 * kMiB);         // needs the cache back
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.num_ooms, 0u);
  EXPECT_EQ(s.num_cache_flushes, 1u);
  EXPECT_EQ(s.num_device_frees, 4u);
  EXPECT_EQ(s.reserved_bytes, 4 * kMiB);
  alloc.free(large);
}

TEST(CachingAllocator, ImpossibleRequestRaisesAndCounts) {
  FakeDevice device(8 * kMiB);
  CachingAllocator alloc(device);
  expect_oom([&] { alloc.allocate(16 * kMiB); });
  expect_oom([&] { alloc.allocate(~0ull); });
  EXPECT_EQ(alloc.stats().num_ooms, 2u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0u);
}

TEST(CachingAllocator, FindResolvesInteriorPointers) {
  FakeDevice device;
  CachingAllocator alloc(device);
  DevicePtr p = alloc.allocate(1000);  // 1024
  DevicePtr q = alloc.allocate(128);
  EXPECT_EQ(alloc.find(p).base, p);
  EXPECT_EQ(alloc.find(p + 500).base, p);
  EXPECT_EQ(alloc.find(p + 1023).bytes, 1024u);
  EXPECT_EQ(alloc.find(p + 1024).base, q);
  EXPECT_EQ(alloc.find(q + 128).bytes, 0u);  // the free tail
  EXPECT_EQ(alloc.find(0).bytes, 0u);
  EXPECT_EQ(alloc.find(p - 1).bytes, 0u);
  alloc.free(p);
  EXPECT_EQ(alloc.find(p + 500).bytes, 0u);
  alloc.free(q);
}

TEST(CachingAllocator, RejectsBadFrees) {
  FakeDevice device;
  CachingAllocator alloc(device);
  EXPECT_NO_THROW(alloc.free(0));
  DevicePtr p = alloc.allocate(512);
  try {
    alloc.free(p + 128);
    FAIL() << "interior free accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(error.what(), "not the start of a live allocation"));
  }
  alloc.free(p);
  EXPECT_THROW(alloc.free(p), Error);  // double free
  EXPECT_EQ(alloc.stats().num_frees, 1u);
}

TEST(CachingAllocator, ManyThreadsNeverShareMemory) {
  FakeDevice device(256 * kMiB);
  CachingAllocator alloc(device);
  constexpr int kThreads = 4;
  constexpr int kIterations = 1500;
  std::vector<std::thread> threads;
  std::atomic<int> corrupt{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::uniform_int_distribution<uint64_t> size_of(1, 3 * kMiB);
      std::vector<std::pair<DevicePtr, uint64_t>> live;
      const auto tag = static_cast<uint8_t>(t + 1);
      auto release = [&](size_t i) {
        auto [ptr, bytes] = live[i];
        uint8_t first = 0;
        uint8_t last = 0;
        device.copy_to_host(&first, ptr, 1);
        device.copy_to_host(&last, ptr + bytes - 1, 1);
        if (first != tag || last != tag) ++corrupt;
        alloc.free(ptr);
        live[i] = live.back();
        live.pop_back();
      };
      for (int i = 0; i < kIterations; ++i) {
        uint64_t bytes = (i % 8 == 0) ? size_of(rng) : size_of(rng) % 8192 + 1;
        DevicePtr ptr = alloc.allocate(bytes);
        device.fill(ptr, tag, 1);
        device.fill(ptr + bytes - 1, tag, 1);
        live.emplace_back(ptr, bytes);
        if (live.size() > 16) release(rng() % live.size());
      }
      while (!live.empty()) release(live.size() - 1);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(corrupt.load(), 0);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0u);
  EXPECT_EQ(s.allocation_count, 0u);
  EXPECT_EQ(s.num_allocs, static_cast<uint64_t>(kThreads * kIterations));
  EXPECT_EQ(s.num_frees, s.num_allocs);
  alloc.empty_cache();
  EXPECT_EQ(device.bytes_in_use(), 0u);
}

TEST(CachingAllocator, CacheHitsNeverReachTheDevice) {
  FakeDevice device;
  CachingAllocator alloc(device);
  for (uint64_t size : {uint64_t{128}, 4 * kKiB, kMiB, 16 * kMiB}) {
    alloc.free(alloc.allocate(size));
  }
  const int device_allocs = device.device_allocations();
  constexpr int kPairs = 100000;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kPairs; ++i) alloc.free(alloc.allocate(4096));
  double ns = std::chrono::duration<double, std::nano>(
                  std::chrono::steady_clock::now() - start)
                  .count() /
              kPairs;
  EXPECT_EQ(device.device_allocations(), device_allocs);
  RecordProperty("ns_per_cache_hit_pair", std::to_string(ns));
  std::printf("cache-hit alloc/free pair: %.1f ns\n", ns);
}

}  // namespace
}  // namespace spyre::rt
