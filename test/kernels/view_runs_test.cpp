// Writing and reading a view by its own device bytes: kernels::view_runs and
// the emulator's Device::copy_runs_to_device / copy_runs_to_host. A view
// written through its runs must give the device buffer that packing the
// whole image with the view written would give, and touch no other byte.
// And kernels::paired_box_runs, a view-to-view copy as byte copies: applied
// to the device buffers, it must give the buffer of the copied image.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "sim_test_util.h"
#include "spyre/kernels/layout.h"
#include "spyre/runtime/error.h"

namespace spyre::sim::test {
namespace {

using kernels::DeviceLayout;

struct View {
  std::vector<int64_t> sizes, strides;
  int64_t offset;
};

// The host elements of `view` in its row-major order.
std::vector<int64_t> elements_of(const View& view) {
  std::vector<int64_t> out = {view.offset};
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    std::vector<int64_t> next;
    for (int64_t base : out) {
      for (int64_t i = 0; i < view.sizes[d]; ++i) {
        next.push_back(base + i * view.strides[d]);
      }
    }
    out = std::move(next);
  }
  // Row-major: the last dim varies fastest, which the loop above gives.
  return out;
}

struct Case {
  std::string name;
  DeviceLayout layout;
  View view;
};

std::vector<Case> cases() {
  using kernels::make_default_layout;
  const std::vector<int64_t> rows = {8, 1000};
  const std::vector<int64_t> cube = {3, 4, 70};
  const std::vector<int64_t> line = {300};
  return {
      {"fp32 row 3 of [8, 1000]",
       make_default_layout(rows, 4),
       {{1000}, {1}, 3000}},
      {"fp32 column 7 of [8, 1000]",
       make_default_layout(rows, 4),
       {{8}, {1000}, 7}},
      {"fp16 [3, 4, 70] strided box",
       make_default_layout(cube, 2),
       {{2, 3, 20}, {280, 70, 3}, 71}},
      {"fp16 [3, 4, 70] sticks along dim 0, transposed",
       make_default_layout(cube, 2, 0),
       {{70, 3}, {1, 280}, 0}},
      {"int8 every 8th of [300]", make_default_layout(line, 1), {{37}, {8}, 5}},
      {"int64 one element", make_default_layout(line, 8), {{}, {}, 299}},
  };
}

TEST(ViewRuns, WritingTheRunsIsPackingTheWrittenImage) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name + " " + c.layout.to_string());
    const size_t es = c.layout.element_size;
    std::vector<uint8_t> image(c.layout.host_bytes());
    std::iota(image.begin(), image.end(), uint8_t{1});
    std::vector<uint8_t> device(c.layout.device_bytes());
    kernels::pack(c.layout, image.data(), device.data());

    const auto elements = elements_of(c.view);
    std::vector<uint8_t> values(elements.size() * es);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<uint8_t>(200 + i % 50);
    }
    for (size_t i = 0; i < elements.size(); ++i) {
      std::copy_n(values.begin() + i * es, es,
                  image.begin() + elements[i] * es);
    }
    std::vector<uint8_t> expected(device.size());
    kernels::pack(c.layout, image.data(), expected.data());

    const auto runs = kernels::view_runs(c.layout, c.view.sizes, c.view.strides,
                                         c.view.offset);
    const uint8_t* from = values.data();
    for (const rt::Device::CopyRun& run : runs) {
      std::copy_n(from, run.bytes, device.begin() + run.offset);
      from += run.bytes;
    }
    EXPECT_EQ(from, values.data() + values.size());
    EXPECT_EQ(device, expected);
  }
}

TEST(ViewRuns, NeighboursMerge) {
  const std::vector<int64_t> rows = {8, 1000};
  const DeviceLayout layout = kernels::make_default_layout(rows, 4);
  // A row: 31 whole sticks and 8 elements, each stick 8 sticks (rows) apart.
  const std::vector<int64_t> size = {1000}, stride = {1};
  EXPECT_EQ(kernels::view_runs(layout, size, stride, 3000).size(), 32u);
  const std::vector<int64_t> out_of_range = {1};
  EXPECT_THROW(kernels::view_runs(layout, out_of_range, stride, 8000),
               std::invalid_argument);
}

TEST(ViewRuns, TheEmulatorWritesOnlyTheRunsAndChecksTheirSpan) {
  auto device = small_device();
  const rt::DevicePtr ptr = device->allocate(1024);
  std::vector<uint8_t> ones(1024, 1);
  device->copy_to_device(ptr, ones.data(), ones.size());
  const std::vector<rt::Device::CopyRun> runs = {{3, 2}, {130, 1}, {0, 1}};
  const uint8_t values[] = {7, 8, 9, 10};
  EXPECT_GT(device->copy_runs_to_device(ptr, runs, values), 0);
  std::vector<uint8_t> back(1024);
  device->copy_to_host(back.data(), ptr, back.size());
  std::vector<uint8_t> expected = ones;
  expected[3] = 7, expected[4] = 8, expected[130] = 9, expected[0] = 10;
  EXPECT_EQ(back, expected);
  uint8_t read[4] = {};
  device->copy_runs_to_host(read, ptr, runs);
  EXPECT_EQ(std::vector<uint8_t>(read, read + 4),
            std::vector<uint8_t>(values, values + 4));
  // A run past the allocation: a device error, and nothing written.
  const std::vector<rt::Device::CopyRun> bad = {{5, 1}, {1020, 8}};
  EXPECT_THROW(device->copy_runs_to_device(ptr, bad, values), rt::Error);
  device->copy_to_host(back.data(), ptr, back.size());
  EXPECT_EQ(back, expected);
  device->free(ptr);
}

// A view of a layout, for a copy between two of them.
struct Side {
  DeviceLayout layout;
  View view;
};

// Copies `from` into `to` by their paired runs, if they have any, and
// checks the result against packing dst's image with the view's elements
// copied: every byte, padding included. The number of runs, or nullopt.
std::optional<size_t> paired_copy(const Side& from, const Side& to) {
  const auto runs = kernels::paired_box_runs(
      from.layout, {from.view.sizes, from.view.strides, from.view.offset},
      to.layout, {to.view.sizes, to.view.strides, to.view.offset}, 64);
  if (!runs) return std::nullopt;
  const size_t es = from.layout.element_size;
  std::vector<uint8_t> src_image(from.layout.host_bytes());
  std::iota(src_image.begin(), src_image.end(), uint8_t{1});
  std::vector<uint8_t> dst_image(to.layout.host_bytes());
  std::iota(dst_image.begin(), dst_image.end(), uint8_t{101});
  std::vector<uint8_t> src(from.layout.device_bytes());
  std::vector<uint8_t> dst(to.layout.device_bytes());
  kernels::pack(from.layout, src_image.data(), src.data());
  kernels::pack(to.layout, dst_image.data(), dst.data());

  const auto src_elements = elements_of(from.view);
  const auto dst_elements = elements_of(to.view);
  EXPECT_EQ(src_elements.size(), dst_elements.size());
  for (size_t i = 0; i < dst_elements.size(); ++i) {
    std::copy_n(src_image.begin() + src_elements[i] * es, es,
                dst_image.begin() + dst_elements[i] * es);
  }
  std::vector<uint8_t> expected(dst.size());
  kernels::pack(to.layout, dst_image.data(), expected.data());
  for (const kernels::PairedRun& run : *runs) {
    EXPECT_LE(run.src_offset + run.bytes, src.size());
    EXPECT_LE(run.dst_offset + run.bytes, dst.size());
    if (run.src_offset + run.bytes > src.size() ||
        run.dst_offset + run.bytes > dst.size()) {
      return runs->size();
    }
    std::copy_n(src.begin() + run.src_offset, run.bytes,
                dst.begin() + run.dst_offset);
  }
  EXPECT_EQ(dst, expected);
  return runs->size();
}

size_t copy_by_paired_runs(const Side& from, const Side& to) {
  const std::optional<size_t> runs = paired_copy(from, to);
  EXPECT_TRUE(runs.has_value());
  return runs.value_or(0);
}

// Strides of a contiguous tensor of `sizes`.
std::vector<int64_t> contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d];
  }
  return strides;
}

Side whole(const std::vector<int64_t>& sizes, uint32_t element_size) {
  return {kernels::make_default_layout(sizes, element_size),
          {sizes, contiguous(sizes), 0}};
}

// `sizes` narrowed along `dim` to [start, start + length).
Side narrow(const std::vector<int64_t>& sizes, uint32_t element_size,
            size_t dim, int64_t start, int64_t length) {
  Side side = whole(sizes, element_size);
  side.view.offset = start * side.view.strides[dim];
  side.view.sizes[dim] = length;
  return side;
}

TEST(PairedBoxRuns, ACatIntoAKvCacheIsOneRunPerSlice) {
  // torch.cat([cache, new], dim=-2) of a [1, 2, L, 64] cache: the sequence
  // is the outermost device dim, so each slice is one run.
  const int64_t L = 33;
  EXPECT_EQ(copy_by_paired_runs(whole({1, 2, L, 64}, 4),
                                narrow({1, 2, L + 1, 64}, 4, 2, 0, L)),
            1u);
  EXPECT_EQ(copy_by_paired_runs(whole({1, 2, 1, 64}, 4),
                                narrow({1, 2, L + 1, 64}, 4, 2, L, 1)),
            1u);
  // A batch of 2: the heads lead on the device, a run per head.
  EXPECT_EQ(copy_by_paired_runs(whole({2, 3, L, 64}, 4),
                                narrow({2, 3, L + 1, 64}, 4, 2, 1, L)),
            3u);
}

TEST(PairedBoxRuns, PaddedSticksCroppedSourcesAndCutsAcrossSticks) {
  // fp16 rows of 50 (sticks of 64, padded): the padding moves along.
  copy_by_paired_runs(whole({2, 40, 50}, 2), narrow({2, 47, 50}, 2, 1, 7, 40));
  // A cropped cache (a narrow of a larger one) into a whole tensor.
  copy_by_paired_runs(narrow({1, 2, 90, 64}, 4, 2, 0, 40),
                      whole({1, 2, 40, 64}, 4));
  // Along dim 0, which the default layout puts beside the sticks: a run
  // of the rows kept per stick column.
  EXPECT_EQ(
      copy_by_paired_runs(narrow({4, 8, 64}, 4, 0, 1, 2), whole({2, 8, 64}, 4)),
      16u);
  // One row of a matrix (a fixed coordinate on a tiled dim).
  copy_by_paired_runs(narrow({8, 1000}, 4, 0, 3, 1), whole({1, 1000}, 4));
}

TEST(PairedBoxRuns, ViewsThatSplitADimWalkItsDigits) {
  // A decode step's value heads, split off the projection's [1, 1, 128]
  // result as a [1, 2, 1, 64] view, into a cache's slot 45 of 46: the heads
  // lead on one side and not on the other, a stick per run.
  const std::vector<int64_t> projection = {1, 1, 128};
  const Side heads{kernels::make_default_layout(projection, 4),
                   {{1, 2, 1, 64}, {128, 64, 128, 1}, 0}};
  EXPECT_EQ(copy_by_paired_runs(heads, narrow({1, 2, 46, 64}, 4, 2, 45, 1)),
            4u);
  // fp16 heads of 128 (two sticks each) of a [3, 512] projection, all rows.
  const std::vector<int64_t> rows = {3, 512};
  const Side split{kernels::make_default_layout(rows, 2),
                   {{3, 4, 128}, {512, 128, 1}, 0}};
  const std::vector<int64_t> cache = {3, 4, 9, 128};
  Side slot = narrow(cache, 2, 2, 5, 1);
  slot.view.sizes = {3, 4, 128};
  slot.view.strides = {4 * 9 * 128, 9 * 128, 1};
  copy_by_paired_runs(split, slot);
  // Every other row (a step of 2 along a dim of the device's rows).
  Side every_other = whole({8, 64}, 4);
  every_other.view = {{4, 64}, {128, 1}, 0};
  copy_by_paired_runs(every_other, whole({4, 64}, 4));
}

TEST(PairedBoxRuns, NoRunsForWhatNeedsAProgram) {
  const auto runs = [](const Side& from, const Side& to, size_t max_runs) {
    return kernels::paired_box_runs(
        from.layout, {from.view.sizes, from.view.strides, from.view.offset},
        to.layout, {to.view.sizes, to.view.strides, to.view.offset}, max_runs);
  };
  // Part of the sticks of a row (a cut inside a tiled dim).
  EXPECT_FALSE(runs(narrow({4, 100}, 4, 1, 3, 50), whole({4, 50}, 4), 64));
  // A transposed view.
  Side transposed = whole({8, 64}, 4);
  transposed.view = {{64, 8}, {1, 64}, 0};
  EXPECT_FALSE(runs(transposed, whole({64, 8}, 4), 64));
  // A broadcast.
  Side broadcast = whole({1, 64}, 4);
  broadcast.view = {{8, 64}, {0, 1}, 0};
  EXPECT_FALSE(runs(broadcast, whole({8, 64}, 4), 64));
  // Other dtypes, other shapes, or too many runs.
  EXPECT_FALSE(runs(whole({8, 64}, 4), whole({8, 64}, 2), 64));
  EXPECT_FALSE(runs(whole({8, 64}, 4), whole({64, 8}, 4), 64));
  EXPECT_FALSE(runs(narrow({4, 8, 64}, 4, 0, 1, 2), whole({2, 8, 64}, 4), 8));
  // Sticks along another dim on one side only: the walks differ.
  const std::vector<int64_t> cube = {3, 4, 70};
  const Side other{kernels::make_default_layout(cube, 2, 0),
                   {cube, contiguous(cube), 0}};
  EXPECT_FALSE(runs(whole(cube, 2), other, 64));
}

// Random boxes and splits of random storages, copied into random slices of
// other storages: whenever paired runs are given, they copy exactly.
TEST(PairedBoxRuns, RandomViewsCopyExactlyWhenTheyPair) {
  std::mt19937 rng(7);
  const auto pick = [&rng](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t lasts[] = {16, 32, 50, 64, 100, 128};
  int paired = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const uint32_t es = pick(0, 1) ? 4 : 2;
    const auto rank = static_cast<size_t>(pick(1, 4));
    // The view's shape, then a storage holding it (a box at a random
    // corner) on each side.
    std::vector<int64_t> shape(rank);
    for (size_t d = 0; d + 1 < rank; ++d) shape[d] = pick(1, 4);
    shape[rank - 1] = lasts[pick(0, 5)];
    const auto side = [&](bool may_split) {
      std::vector<int64_t> storage = shape;
      std::vector<int64_t> corner(rank, 0);
      for (size_t d = 0; d < rank; ++d) {
        if (pick(0, 2) == 0) {
          storage[d] += pick(1, 3);
          corner[d] = pick(0, storage[d] - shape[d]);
        }
      }
      Side s = whole(storage, es);
      int64_t offset = 0;
      for (size_t d = 0; d < rank; ++d) offset += corner[d] * s.view.strides[d];
      s.view = {shape, s.view.strides, offset};
      // The storage's last dim seen as (heads, head) of a view of rank+1:
      // the view keeps the shape, the storage merges its last two dims.
      if (may_split && rank >= 2 && corner[rank - 1] == 0 &&
          storage[rank - 1] == shape[rank - 1] && pick(0, 1)) {
        std::vector<int64_t> merged(storage.begin(), storage.end() - 1);
        merged.back() *= shape[rank - 1];
        if (corner[rank - 2] == 0 && storage[rank - 2] == shape[rank - 2]) {
          const Side m = whole(merged, es);
          std::vector<int64_t> strides = m.view.strides;
          strides.push_back(1);
          strides[rank - 2] = shape[rank - 1];
          int64_t moffset = 0;
          for (size_t d = 0; d + 2 < rank; ++d) {
            moffset += corner[d] * m.view.strides[d];
          }
          s = {m.layout, {shape, strides, moffset}};
        }
      }
      return s;
    };
    const Side from = side(true), to = side(true);
    SCOPED_TRACE(from.layout.to_string() + " -> " + to.layout.to_string());
    if (paired_copy(from, to)) ++paired;
  }
  EXPECT_GT(paired, 300);
}

}  // namespace
}  // namespace spyre::sim::test
