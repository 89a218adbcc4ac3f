// Writing and reading a view by its own device bytes: kernels::view_runs and
// the emulator's Device::copy_runs_to_device / copy_runs_to_host. A view
// written through its runs must give the device buffer that packing the
// whole image with the view written would give, and touch no other byte.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
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

}  // namespace
}  // namespace spyre::sim::test
