// Converting copies: the emulator's one-pass override of the Device calls,
// and the stick layout's range pack/unpack (spyre/kernels/layout.h) they run
// with, for ranges that start and end anywhere, even inside a stick or element.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sim_test_util.h"
#include "spyre/kernels/layout.h"
#include "spyre/runtime/error.h"

namespace spyre::sim::test {
namespace {

using kernels::DeviceLayout;

// The device buffer of `layout` computed element by element from its
// definition (device dim k walks host dim dim_map[k] by dim_step[k]), with
// nothing shared with pack's traversal: the reference for it.
std::vector<uint8_t> reference_pack(const DeviceLayout& layout,
                                    const std::vector<uint8_t>& image) {
  const size_t es = layout.element_size;
  std::vector<uint8_t> device(layout.device_bytes(), 0);
  const size_t dims = layout.device_size.size();
  std::vector<int64_t> host_strides(layout.host_sizes.size(), 1);
  for (int64_t h = static_cast<int64_t>(host_strides.size()) - 2; h >= 0; --h) {
    host_strides[h] = host_strides[h + 1] * layout.host_sizes[h + 1];
  }
  std::vector<int64_t> index(dims, 0);
  for (uint64_t element = 0; element < layout.device_bytes() / es; ++element) {
    std::vector<int64_t> coord(layout.host_sizes.size(), 0);
    for (size_t k = 0; k < dims; ++k) {
      if (layout.dim_map[k] >= 0) {
        coord[layout.dim_map[k]] += index[k] * layout.dim_step[k];
      }
    }
    bool inside = true;
    int64_t host = 0;
    for (size_t h = 0; h < coord.size(); ++h) {
      inside = inside && coord[h] < layout.host_sizes[h];
      host += coord[h] * host_strides[h];
    }
    if (inside) {
      std::copy_n(image.begin() + host * es, es, device.begin() + element * es);
    }
    for (int64_t k = static_cast<int64_t>(dims) - 1; k >= 0; --k) {
      if (++index[k] < layout.device_size[k]) break;
      index[k] = 0;
    }
  }
  return device;
}

std::vector<uint8_t> random_bytes(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng() | 1);  // never 0
  return bytes;
}

// Cut points of [0, bytes): stick and element edges and the bytes just
// around them, plus random ones.
std::vector<uint64_t> cuts(uint64_t bytes, uint32_t seed) {
  std::vector<uint64_t> points = {0, bytes};
  for (uint64_t p : {1ull, 2ull, 127ull, 128ull, 129ull, 255ull, 257ull}) {
    if (p < bytes) points.push_back(p);
    if (p < bytes) points.push_back(bytes - p);
  }
  std::mt19937 rng(seed);
  for (int i = 0; i < 12 && bytes > 0; ++i) points.push_back(rng() % bytes);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

struct Case {
  std::string name;
  DeviceLayout layout;
};

std::vector<Case> layouts() {
  using kernels::make_default_layout;
  using kernels::make_layout;
  const std::vector<int64_t> rows_fp16 = {5, 70};    // tails of padding
  const std::vector<int64_t> wide_fp16 = {3, 200};   // two tiles a row
  const std::vector<int64_t> tall_fp16 = {40, 200};  // blocks of 16 rows
  const std::vector<int64_t> cube_fp32 = {3, 4, 40};
  const std::vector<int64_t> line_int8 = {300};
  const std::vector<int64_t> scalar = {};
  return {
      {"fp16 [5, 70]", make_default_layout(rows_fp16, 2)},
      {"fp16 [3, 200]", make_default_layout(wide_fp16, 2)},
      {"fp16 [40, 200]", make_default_layout(tall_fp16, 2)},
      {"fp32 [3, 4, 40]", make_default_layout(cube_fp32, 4)},
      {"int8 [300]", make_default_layout(line_int8, 1)},
      {"fp64 scalar", make_default_layout(scalar, 8)},
      {"fp16 [70, 5] sticks along dim 0", make_default_layout(rows_fp16, 2, 0)},
      {"fp32 [8, 40] rows tiled by two",
       make_layout({8, 40}, 4, {4, 2, 2, 32}, {0, 1, 0, 1}, {2, 32, 1, 1})},
      {"fp32 [3, 40] an unused row of sticks",
       make_layout({3, 40}, 4, {2, 4, 32}, {1, 0, 1}, {32, 1, 1})},
  };
}

TEST(LayoutRanges, PackRangeOfAnyPieceIsThatPieceOfTheWhole) {
  for (const Case& c : layouts()) {
    SCOPED_TRACE(c.name + " " + c.layout.to_string());
    const uint64_t bytes = c.layout.device_bytes();
    const auto image = random_bytes(c.layout.host_bytes(), 1);
    const auto expected = reference_pack(c.layout, image);
    std::vector<uint8_t> whole(bytes, 0xCD);  // garbage: padding must be set
    kernels::pack(c.layout, image.data(), whole.data());
    ASSERT_EQ(whole, expected);
    const auto points = cuts(bytes, 2);
    for (size_t i = 0; i + 1 < points.size(); ++i) {
      const uint64_t begin = points[i], end = points[i + 1];
      std::vector<uint8_t> piece(end - begin, 0xCD);
      kernels::pack_range(c.layout, image.data(), begin, end, piece.data());
      ASSERT_TRUE(
          std::equal(piece.begin(), piece.end(), expected.begin() + begin))
          << "bytes [" << begin << ", " << end << ")";
    }
  }
}

TEST(LayoutRanges, UnpackRangesRebuildTheImageAndWriteNothingElse) {
  for (const Case& c : layouts()) {
    SCOPED_TRACE(c.name + " " + c.layout.to_string());
    const auto image = random_bytes(c.layout.host_bytes(), 3);
    const auto device = reference_pack(c.layout, image);
    std::vector<uint8_t> whole(image.size(), 0);
    kernels::unpack(c.layout, device.data(), whole.data());
    ASSERT_EQ(whole, image);
    // Pieces in reverse order; a piece writes only bytes it holds, so the
    // image is complete exactly when the last piece is in.
    std::vector<uint8_t> rebuilt(image.size(), 0);
    const auto points = cuts(device.size(), 4);
    for (size_t i = points.size() - 1; i > 0; --i) {
      const uint64_t begin = points[i - 1], end = points[i];
      kernels::unpack_range(c.layout, device.data() + begin, begin, end,
                            rebuilt.data());
    }
    ASSERT_EQ(rebuilt, image);
    // One piece alone: every host byte it writes comes from that piece.
    const uint64_t begin = std::min<uint64_t>(129, device.size());
    const uint64_t end = std::min<uint64_t>(301, device.size());
    std::vector<uint8_t> alone(image.size(), 0);
    kernels::unpack_range(c.layout, device.data() + begin, begin, end,
                          alone.data());
    size_t written = 0;
    for (size_t i = 0; i < alone.size(); ++i) {
      if (alone[i] != 0) {
        ++written;
        ASSERT_EQ(alone[i], image[i]) << "host byte " << i;
      }
    }
    size_t held = 0;  // image bytes are never 0: count the piece's data
    std::vector<uint8_t> marked(device.size(), 0);
    const auto ones = std::vector<uint8_t>(image.size(), 1);
    kernels::pack(c.layout, ones.data(), marked.data());
    for (uint64_t b = begin; b < end; ++b) held += marked[b];
    EXPECT_EQ(written, held);
  }
}

TEST(LayoutRanges, RangeOutsideTheBufferIsRejected) {
  const std::vector<int64_t> sizes = {4, 64};
  const DeviceLayout layout = kernels::make_default_layout(sizes, 2);
  std::vector<uint8_t> image(layout.host_bytes()), out(1024);
  try {
    kernels::pack_range(layout, image.data(), 0, layout.device_bytes() + 1,
                        out.data());
    FAIL() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("is not inside the"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(kernels::unpack_range(layout, out.data(), 10, 5, image.data()),
               std::invalid_argument);
}

TEST(SimPackedCopy, ConvertsInPlaceInOnePassAtTheCopysModelledTime) {
  auto device = small_device();
  const std::vector<int64_t> sizes = {33, 300};  // padded sticks
  const DeviceLayout layout = kernels::make_default_layout(sizes, 2);
  const uint64_t bytes = layout.device_bytes();
  const rt::DevicePtr ptr = device->allocate(bytes);
  const auto image = random_bytes(layout.host_bytes(), 5);

  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const double ns = device->copy_to_device_packed(
      ptr, bytes, [&](uint8_t* out, uint64_t begin, uint64_t end) {
        ranges.emplace_back(begin, end);
        kernels::pack_range(layout, image.data(), begin, end, out);
      });
  ASSERT_EQ(ranges.size(), 1u);  // one pass, straight into device memory
  EXPECT_EQ(ranges[0], std::make_pair(uint64_t{0}, bytes));
  std::vector<uint8_t> plain(bytes);
  EXPECT_DOUBLE_EQ(ns, device->copy_to_host(plain.data(), ptr, bytes));
  EXPECT_EQ(plain, reference_pack(layout, image));

  ranges.clear();
  std::vector<uint8_t> back(image.size(), 0);
  const double back_ns = device->copy_to_host_unpacked(
      ptr, bytes, [&](const uint8_t* in, uint64_t begin, uint64_t end) {
        ranges.emplace_back(begin, end);
        kernels::unpack_range(layout, in, begin, end, back.data());
      });
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_DOUBLE_EQ(back_ns, ns);
  EXPECT_EQ(back, image);
  device->free(ptr);
}

TEST(SimPackedCopy, OutsideAnAllocationConvertsNothingAndSaysWhatToDo) {
  auto device = small_device();
  const rt::DevicePtr ptr = device->allocate(4096);
  bool called = false;
  try {
    device->copy_to_device_packed(
        ptr, 4096 + 128, [&](uint8_t*, uint64_t, uint64_t) { called = true; });
    FAIL() << "no error";
  } catch (const rt::Error& error) {
    EXPECT_EQ(error.code(), rt::ErrorCode::kDeviceError);
    const std::string message = error.what();
    EXPECT_NE(message.find("copy_to_device_packed of 4224 bytes"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("pass a range inside one live allocation"),
              std::string::npos)
        << message;
  }
  try {
    device->copy_to_host_unpacked(
        ptr - 128, 256,
        [&](const uint8_t*, uint64_t, uint64_t) { called = true; });
    FAIL() << "no error";
  } catch (const rt::Error& error) {
    EXPECT_EQ(error.code(), rt::ErrorCode::kDeviceError);
    EXPECT_NE(std::string(error.what()).find("copy_to_host_unpacked"),
              std::string::npos);
  }
  EXPECT_FALSE(called);
  EXPECT_EQ(device->copy_to_device_packed(
                ptr, 0, [&](uint8_t*, uint64_t, uint64_t) { called = true; }),
            0.0);
  EXPECT_FALSE(called);
  device->free(ptr);
}

}  // namespace
}  // namespace spyre::sim::test
