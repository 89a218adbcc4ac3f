// The Device's converting copies through their default implementation (a
// chunked bounce buffer over the plain copies), as any backend that does not
// override them gets it: FakeDevice overrides neither.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fake_device.h"

namespace spyre::rt::testing {
namespace {

constexpr uint64_t kChunk = Device::kCopyChunkBytes;

// A byte that depends on its position, so misplaced chunks show.
uint8_t pattern(uint64_t i) { return static_cast<uint8_t>(i * 7 + (i >> 12)); }

// Checks that the ranges tile [0, bytes) exactly once, none above a chunk.
void expect_tiling(std::vector<std::pair<uint64_t, uint64_t>> ranges,
                   uint64_t bytes) {
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = 0;
  for (const auto& [begin, end] : ranges) {
    EXPECT_EQ(begin, next);
    EXPECT_GT(end, begin);
    EXPECT_LE(end - begin, kChunk);
    next = end;
  }
  EXPECT_EQ(next, bytes);
}

TEST(PackedCopy, DefaultToDeviceWritesEveryChunkInPlace) {
  FakeDevice device(64ull << 20);
  const uint64_t bytes = 2 * kChunk + 300;  // a last chunk of 300 bytes
  const DevicePtr ptr = device.allocate(bytes);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const double ns = device.copy_to_device_packed(
      ptr, bytes, [&](uint8_t* out, uint64_t begin, uint64_t end) {
        ranges.emplace_back(begin, end);
        for (uint64_t i = begin; i < end; ++i) out[i - begin] = pattern(i);
      });
  EXPECT_DOUBLE_EQ(ns, static_cast<double>(bytes));  // the chunks' sum
  expect_tiling(ranges, bytes);
  std::vector<uint8_t> back(bytes);
  device.copy_to_host(back.data(), ptr, bytes);
  for (uint64_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(back[i], pattern(i)) << "byte " << i;
  }
  device.free(ptr);
}

TEST(PackedCopy, DefaultToHostReadsEveryChunk) {
  FakeDevice device(64ull << 20);
  const uint64_t bytes = kChunk + 128 * 3 + 5;  // ends inside a stick
  const DevicePtr ptr = device.allocate(bytes);
  std::vector<uint8_t> image(bytes);
  for (uint64_t i = 0; i < bytes; ++i) image[i] = pattern(i);
  device.copy_to_device(ptr, image.data(), bytes);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<uint8_t> back(bytes, 0);
  const double ns = device.copy_to_host_unpacked(
      ptr, bytes, [&](const uint8_t* in, uint64_t begin, uint64_t end) {
        ranges.emplace_back(begin, end);
        std::copy(in, in + (end - begin), back.begin() + begin);
      });
  EXPECT_DOUBLE_EQ(ns, static_cast<double>(bytes));
  expect_tiling(ranges, bytes);
  EXPECT_EQ(back, image);
  device.free(ptr);
}

TEST(PackedCopy, DefaultSmallCopyIsOneChunk) {
  FakeDevice device;
  const DevicePtr ptr = device.allocate(1000);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  device.copy_to_device_packed(ptr, 1000,
                               [&](uint8_t* out, uint64_t begin, uint64_t end) {
                                 ranges.emplace_back(begin, end);
                                 std::fill(out, out + (end - begin), 9);
                               });
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0], std::make_pair(uint64_t{0}, uint64_t{1000}));
  std::vector<uint8_t> back(1000);
  device.copy_to_host(back.data(), ptr, 1000);
  EXPECT_EQ(back, std::vector<uint8_t>(1000, 9));
  device.free(ptr);
}

TEST(PackedCopy, DefaultZeroBytesCallsNothing) {
  FakeDevice device;
  int calls = 0;
  EXPECT_EQ(device.copy_to_device_packed(
                0, 0, [&](uint8_t*, uint64_t, uint64_t) { ++calls; }),
            0.0);
  EXPECT_EQ(device.copy_to_host_unpacked(
                0, 0, [&](const uint8_t*, uint64_t, uint64_t) { ++calls; }),
            0.0);
  EXPECT_EQ(calls, 0);
}

// Error of `f`, or a failure when it does not throw.
Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "no error raised";
  return Error(ErrorCode::kInvalidArgument, "");
}

TEST(PackedCopy, DefaultOverrunFailsBeforeWritingAndSaysWhatToDo) {
  FakeDevice device(64ull << 20);
  const uint64_t bytes = kChunk + 4096;
  const DevicePtr ptr = device.allocate(bytes);
  std::vector<uint8_t> zeros(bytes, 0);
  device.copy_to_device(ptr, zeros.data(), bytes);
  // One stick more than the allocation holds: the last chunk, copied first,
  // fails, so no chunk reaches the device.
  const Error error = error_of([&] {
    device.copy_to_device_packed(
        ptr, bytes + 128, [&](uint8_t* out, uint64_t begin, uint64_t end) {
          std::fill(out, out + (end - begin), 0xAB);
        });
  });
  EXPECT_EQ(error.code(), ErrorCode::kDeviceError);
  const std::string message = error.what();
  EXPECT_NE(message.find("copy_to_device_packed of " +
                         std::to_string(bytes + 128) + " bytes"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("pass a range inside one live allocation"),
            std::string::npos)
      << message;
  std::vector<uint8_t> back(bytes, 1);
  device.copy_to_host(back.data(), ptr, bytes);
  EXPECT_EQ(back, zeros);

  bool read_any = false;
  const Error read_error = error_of([&] {
    device.copy_to_host_unpacked(
        ptr + 128, bytes,
        [&](const uint8_t*, uint64_t, uint64_t) { read_any = true; });
  });
  EXPECT_EQ(read_error.code(), ErrorCode::kDeviceError);
  EXPECT_NE(std::string(read_error.what()).find("copy_to_host_unpacked"),
            std::string::npos);
  EXPECT_FALSE(read_any);
  device.free(ptr);
}

TEST(PeerCopy, DefaultBouncesEveryChunkThroughTheHost) {
  FakeDevice from(64ull << 20), to(64ull << 20);
  const uint64_t bytes = kChunk + 128 * 5 + 3;
  const DevicePtr src = from.allocate(bytes);
  const DevicePtr dst = to.allocate(bytes);
  std::vector<uint8_t> image(bytes);
  for (uint64_t i = 0; i < bytes; ++i) image[i] = pattern(i);
  from.copy_to_device(src, image.data(), bytes);
  // One device-to-host and one host-to-device copy per byte: 2 ns a byte.
  EXPECT_DOUBLE_EQ(from.copy_to_peer(to, dst, src, bytes), 2.0 * bytes);
  std::vector<uint8_t> back(bytes);
  to.copy_to_host(back.data(), dst, bytes);
  EXPECT_EQ(back, image);
  EXPECT_EQ(from.copy_to_peer(to, dst, src, 0), 0.0);

  const Error error =
      error_of([&] { from.copy_to_peer(to, dst + 128, src, bytes); });
  EXPECT_EQ(error.code(), ErrorCode::kDeviceError);
  EXPECT_NE(std::string(error.what()).find("copy_to_peer of"),
            std::string::npos)
      << error.what();
  from.free(src);
  to.free(dst);
}

}  // namespace
}  // namespace spyre::rt::testing
