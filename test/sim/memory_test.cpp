// Device memory: virtual reservation backed on touch, release on free,
// range checks on copies, and addresses the host cannot dereference.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "sim_test_util.h"
#include "spyre/runtime/error.h"

namespace spyre::sim::test {
namespace {

uint64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      uint64_t kib = 0;
      status >> kib;
      return kib << 10;
    }
  }
  return 0;
}

// SPYRE_SIM_MEMORY_GB scales the big-device test down for sanitizer builds,
// whose shadow memory makes a 256 GiB reservation impractical.
uint64_t big_device_bytes() {
  const char* gib = std::getenv("SPYRE_SIM_MEMORY_GB");
  return (gib ? std::stoull(gib) : 128ull) << 30;
}

TEST(SimMemory, HugeDeviceCostsOnlyWhatIsWritten) {
#if defined(__SANITIZE_THREAD__)
  // TSan backs shadow memory for every written byte (several times its
  // size), so RSS measures the sanitizer here; the release and ASan builds
  // run this test.
  GTEST_SKIP() << "RSS is not the device's cost under TSan";
#endif
  uint64_t size = big_device_bytes();
  auto device = make_sim_device(0, size);
  EXPECT_EQ(device->properties().memory_bytes, size);
  // Three 64 MiB buffers a few GiB apart: only the written MiBs cost RSS.
  constexpr uint64_t kChunk = 64ull << 20;
  std::vector<uint8_t> data(kChunk, 0x5a);  // host pages, before the baseline
  uint64_t before = resident_bytes();
  std::vector<rt::DevicePtr> ptrs;
  rt::DevicePtr gap = device->allocate(size / 4);
  for (int i = 0; i < 3; ++i) {
    ptrs.push_back(device->allocate(kChunk));
    rt::DevicePtr spacer = device->allocate(size / 8);
    device->free(spacer);  // leave a hole so the next chunk lands far away
    ptrs.push_back(device->allocate(size / 16));
  }
  for (int i = 0; i < 3; ++i)
    device->copy_to_device(ptrs[2 * i], data.data(), kChunk);
  uint64_t grown = resident_bytes() - before;
  EXPECT_GE(grown, 3 * kChunk * 9 / 10);
  EXPECT_LT(grown, 3 * kChunk + (64ull << 20)) << "untouched memory was backed";

  std::vector<uint8_t> back(kChunk);
  device->copy_to_host(back.data(), ptrs[2], kChunk);
  EXPECT_EQ(back, data);
  back.clear();
  back.shrink_to_fit();

  uint64_t with_data = resident_bytes();
  for (rt::DevicePtr p : ptrs) device->free(p);
  device->free(gap);
  EXPECT_LT(resident_bytes(), with_data - 2 * kChunk) << "free kept the pages";
  EXPECT_EQ(device->bytes_in_use(), 0u);
}

TEST(SimMemory, AllocationsAreStickAlignedAndAccounted) {
  auto device = small_device();
  rt::DevicePtr a = device->allocate(1);
  rt::DevicePtr b = device->allocate(300);
  EXPECT_EQ(a % 128, 0u);
  EXPECT_EQ(b % 128, 0u);
  EXPECT_EQ(device->bytes_in_use(), 128u + 384u);
  device->free(a);
  EXPECT_EQ(device->bytes_in_use(), 384u);
  EXPECT_THROW(device->free(a), rt::Error);
  device->free(b);
}

TEST(SimMemory, OutOfMemoryReportsAskedAndFree) {
  auto device = small_device();
  rt::DevicePtr held = device->allocate(512ull << 20);
  try {
    device->allocate(768ull << 20);
    FAIL() << "allocation beyond the device succeeded";
  } catch (const rt::OutOfMemoryError& e) {
    EXPECT_EQ(e.requested_bytes(), 768ull << 20);
    EXPECT_EQ(e.free_bytes(), 512ull << 20);
    EXPECT_NE(std::string(e.what()).find("768"), std::string::npos);
  }
  device->free(held);
  EXPECT_NO_THROW(device->free(device->allocate(768ull << 20)));
}

rt::ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const rt::Error& e) {
    return e.code();
  }
  return rt::ErrorCode::kInvalidArgument;  // "no error" is never expected here
}

TEST(SimMemory, CopiesOutsideAnAllocationAreDeviceErrors) {
  auto device = small_device();
  rt::DevicePtr p = device->allocate(4096);
  std::vector<uint8_t> host(8192, 1);
  EXPECT_GT(device->copy_to_device(p, host.data(), 4096), 0.0);
  auto device_error = rt::ErrorCode::kDeviceError;
  EXPECT_EQ(code_of([&] { device->copy_to_device(p, host.data(), 4097); }),
            device_error);
  EXPECT_EQ(code_of([&] { device->copy_to_host(host.data(), p + 4096, 1); }),
            device_error);
  EXPECT_EQ(code_of([&] { device->copy_on_device(p, p + 2048, 4096); }),
            device_error);
  EXPECT_EQ(code_of([&] { device->fill(p - 128, 0, 128); }), device_error);
  EXPECT_EQ(code_of([&] { device->fill(12345, 0, 128); }), device_error);
  device->free(p);
  EXPECT_EQ(code_of([&] { device->fill(p, 0, 128); }), device_error)
      << "a freed range must not be accessible";
}

TEST(SimMemory, CopyTimesFollowTheHostLink) {
  auto device = small_device();
  rt::DevicePtr p = device->allocate(64ull << 20);
  std::vector<uint8_t> host(64ull << 20);
  double small = device->copy_to_device(p, host.data(), 4096);
  double big = device->copy_to_device(p, host.data(), host.size());
  const rt::CostTable& t = kTimingTable;
  EXPECT_NEAR(big - small,
              static_cast<double>(host.size() - 4096) / t.host_link_gb_per_s,
              1.0);
  EXPECT_GT(small, t.host_copy_latency_ns);
  device->free(p);
}

TEST(SimMemory, PeerCopiesMoveBytesCardToCardAtTheLinkRate) {
  auto from = make_sim_device(0, 1ull << 30);
  auto to = make_sim_device(1, 1ull << 30);
  const uint64_t bytes = (8ull << 20) + 384;
  const rt::DevicePtr src = from->allocate(bytes);
  const rt::DevicePtr dst = to->allocate(bytes);
  std::vector<uint8_t> image(bytes);
  for (uint64_t i = 0; i < bytes; ++i) image[i] = static_cast<uint8_t>(i * 13);
  from->copy_to_device(src, image.data(), bytes);
  const double ns = from->copy_to_peer(*to, dst, src, bytes);
  const rt::CostTable& t = kTimingTable;
  EXPECT_DOUBLE_EQ(ns, t.card_link_latency_ns +
                           static_cast<double>(bytes) / t.card_link_gb_per_s);
  // One transfer over the link: cheaper than a bounce through the host.
  EXPECT_LT(ns, 2 * from->copy_to_host(image.data(), src, bytes));
  std::vector<uint8_t> back(bytes);
  to->copy_to_host(back.data(), dst, bytes);
  EXPECT_EQ(back, image);
  EXPECT_EQ(code_of([&] { from->copy_to_peer(*to, dst + 4096, src, bytes); }),
            rt::ErrorCode::kDeviceError);
  from->free(src);
  to->free(dst);
}

TEST(SimMemory, ScatteredRunsMoveEachTouchedStickOnce) {
  auto device = small_device();
  const rt::DevicePtr p = device->allocate(64 * rt::kStickBytes);
  std::vector<uint8_t> data(4096, 7);
  // A column of a permuted tensor: 64 runs of 4 bytes, two in each of 32
  // sticks, written in element order (not stick order).
  std::vector<rt::Device::CopyRun> runs;
  for (uint64_t i = 0; i < 32; ++i) runs.push_back({i * 256, 4});
  for (uint64_t i = 0; i < 32; ++i) runs.push_back({i * 256 + 64, 4});
  const double ns = device->copy_runs_to_device(p, runs, data.data());
  const rt::CostTable& t = kTimingTable;
  EXPECT_DOUBLE_EQ(ns, t.host_copy_latency_ns +
                           32.0 * rt::kStickBytes / t.host_link_gb_per_s);
  std::vector<uint8_t> back(64 * rt::kStickBytes);
  device->copy_to_host(back.data(), p, back.size());
  EXPECT_EQ(back[256 * 3 + 64], 7);
  device->free(p);
}

TEST(SimMemoryDeathTest, HostDereferenceOfADeviceAddressFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto device = small_device();
  rt::DevicePtr p = device->allocate(4096);
  std::vector<uint8_t> host(4096, 7);
  device->copy_to_device(p, host.data(), host.size());
  EXPECT_DEATH(
      {
        volatile uint8_t* raw = reinterpret_cast<volatile uint8_t*>(p);
        volatile uint8_t value = *raw;
        (void)value;
      },
      "");
  device->free(p);
}

}  // namespace
}  // namespace spyre::sim::test
