// End-to-end DMA on the emulator device: programs loaded through
// rt::LoadedProgram (validate, plan, prepare) and launched through the
// patcher, checked byte for byte.
#include <gtest/gtest.h>

#include "sim_test_util.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

// What a StickTransfer does, on host vectors: the reference the device's
// bytes are compared with. `to_device` false is a load (dram -> spad).
void host_transfer(const rt::StickTransfer& x, std::vector<uint8_t>& dram,
                   std::vector<uint8_t>& spad, bool to_device) {
  for (uint32_t i2 = 0; i2 < x.count2; ++i2) {
    for (uint32_t i1 = 0; i1 < x.count1; ++i1) {
      int64_t d = static_cast<int64_t>(x.dram.offset) + i2 * x.dram_stride2 +
                  i1 * x.dram_stride1;
      uint64_t s = x.spad + uint64_t{i2} * x.spad_stride2 +
                   uint64_t{i1} * x.spad_stride1;
      for (uint32_t b = 0; b < x.run_bytes; ++b) {
        if (to_device) {
          dram.at(d + b) = spad.at(s + b);
        } else {
          spad.at(s + b) = dram.at(d + b);
        }
      }
    }
  }
}

// Loads `in` from slot 0 and stores `out` to slot 1 on core `core_id`;
// checks slot 1 against the host reference and returns the launch's stats.
rt::LaunchStats round_trip(const rt::StickTransfer& in,
                           const rt::StickTransfer& out, uint64_t src_bytes,
                           uint64_t dst_bytes, uint32_t core_id = 0) {
  auto device = small_device();
  rt::Program p;
  p.name = "round_trip";
  p.args = {slot("src", src_bytes), slot("dst", dst_bytes, DType::kFloat16,
                                         /*output=*/true)};
  p.cores = {core(core_id, {load(in), store(out)})};
  Buffers buffers(*device, p);
  const std::vector<uint8_t> src = random_bytes(src_bytes, 11);
  buffers.upload(0, src);

  rt::LaunchStats stats = run(*device, p, buffers);

  std::vector<uint8_t> want_dram = src;
  std::vector<uint8_t> want_spad(kFootprint, 0);
  std::vector<uint8_t> want_dst(dst_bytes, 0);
  host_transfer(in, want_dram, want_spad, false);
  host_transfer(out, want_dst, want_spad, true);
  EXPECT_EQ(buffers.download<uint8_t>(1), want_dst);
  EXPECT_EQ(buffers.download<uint8_t>(0), src) << "a load changed its source";
  uint64_t moved = uint64_t{in.run_bytes} * in.count1 * in.count2 +
                   uint64_t{out.run_bytes} * out.count1 * out.count2;
  EXPECT_EQ(stats.dma_bytes, moved);
  EXPECT_EQ(stats.instructions, 2u);
  return stats;
}

TEST(SimLaunchDma, OneDimensionalRoundTripMovesExactBytes) {
  // 4 KiB from byte 1024 of the source to byte 2048 of the destination.
  rt::LaunchStats stats = round_trip(xfer(0, 1024, 4096, 4096),
                                     xfer(1, 2048, 4096, 4096), 8192, 8192);
  EXPECT_GT(stats.cycles, 0u);
}

TEST(SimLaunchDma, StridedTwoDimensionalRoundTrip) {
  // 16 rows of 3 sticks: source pitch 640, scratchpad pitch 512,
  // destination pitch 1024.
  round_trip(xfer(0, 128, 0, 384, 16, 640, 512),
             xfer(1, 256, 0, 384, 16, 1024, 512), 16 * 640 + 128,
             16 * 1024 + 256);
}

TEST(SimLaunchDma, NegativeDeviceStrideReversesRows) {
  // Stored with a negative row stride: row r lands at row 15 - r.
  round_trip(xfer(0, 0, 0, 256, 16, 256, 256),
             xfer(1, 15 * 512, 0, 256, 16, -512, 256), 16 * 256, 16 * 512);
  // Spot check the reference itself: the first source row is the last
  // destination row.
  auto device = small_device();
  rt::Program p;
  p.name = "reverse";
  p.args = {slot("src", 4096), slot("dst", 4096)};
  p.cores = {core(0, {load(xfer(0, 0, 0, 128, 32, 128, 128)),
                      store(xfer(1, 31 * 128, 0, 128, 32, -128, 128))})};
  Buffers buffers(*device, p);
  std::vector<uint8_t> src(4096);
  for (size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<uint8_t>(i / 128);
  buffers.upload(0, src);
  run(*device, p, buffers);
  std::vector<uint8_t> dst = buffers.download<uint8_t>(1);
  for (size_t row = 0; row < 32; ++row) {
    EXPECT_EQ(dst[row * 128], 31 - row);
    EXPECT_EQ(dst[row * 128 + 127], 31 - row);
  }
}

TEST(SimLaunchDma, StridedThreeDimensionalRoundTrip) {
  // 3 x 4 runs of 2 sticks with different strides on every side and level.
  rt::StickTransfer in = xfer(0, 256, 1024, 256, 4, 512, 256, 3, 4096, 2048);
  rt::StickTransfer out = xfer(1, 0, 1024, 256, 4, 768, 256, 3, 3584, 2048);
  rt::LaunchStats stats =
      round_trip(in, out, 256 + 2 * 4096 + 3 * 512 + 256, 2 * 3584 + 4096);
  // 12 runs each way.
  const rt::CostTable& t = kTimingTable;
  uint64_t one_way = (3 * 4 * 256) / t.dma_bytes_per_cycle +
                     12 * t.dma_cycles_per_run + t.dma_latency_cycles;
  EXPECT_EQ(stats.cycles, 2 * one_way);
}

// Runs back to back in device memory and the scratchpad move as one block
// on the host; the bytes and the modelled time are those of the runs as
// written: adjacent on both levels, on one level only, on one side only.
TEST(SimLaunchDma, AdjacentRunsMoveTheBytesAndTimeOfTheirRuns) {
  const rt::CostTable& t = kTimingTable;
  // 3 x 4 runs of 256 bytes, all back to back: one block of 3 KiB.
  rt::LaunchStats stats = round_trip(
      xfer(0, 128, 512, 256, 4, 256, 256, 3, 1024, 1024),
      xfer(1, 128, 512, 256, 4, 256, 256, 3, 1024, 1024), 4096, 4096);
  const uint64_t one_way = (3 * 4 * 256) / t.dma_bytes_per_cycle +
                           12 * t.dma_cycles_per_run + t.dma_latency_cycles;
  EXPECT_EQ(stats.cycles, 2 * one_way);
  // Adjacent within a row of runs, rows apart in device memory.
  round_trip(xfer(0, 0, 0, 128, 4, 128, 128, 3, 1024, 512),
             xfer(1, 0, 0, 128, 4, 128, 128, 3, 640, 512), 3 * 1024, 3 * 640);
  // Adjacent in the scratchpad only, and in device memory only.
  round_trip(xfer(0, 0, 0, 128, 6, 256, 128), xfer(1, 0, 0, 128, 6, 128, 384),
             6 * 256, 6 * 128);
}

// Two cores store the two halves of the same 8 runs of 2 sticks, each under
// a write mask that ends or starts mid-stick; the bytes neither mask covers
// keep what the destination held. Stores are cost-neutral: same modelled
// DMA bytes as unmasked ones.
TEST(SimLaunchDma, MaskedStoresWriteOnlyTheirBytes) {
  constexpr uint32_t kRun = 256, kRuns = 8, kPitch = 512;
  auto device = small_device();
  rt::Program p;
  p.name = "masked_halves";
  p.args = {slot("src", kRun * kRuns * 2),
            slot("dst", kPitch * kRuns, DType::kFloat16, /*output=*/true)};
  const rt::StickTransfer in0 = xfer(0, 0, 0, kRun, kRuns, kRun, kRun);
  const rt::StickTransfer in1 =
      xfer(0, kRun * kRuns, 0, kRun, kRuns, kRun, kRun);
  const rt::StickTransfer out = xfer(1, 0, 0, kRun, kRuns, kPitch, kRun);
  p.cores = {core(0, {load(in0), rt::DmaStore{out, 6, 130}}),
             core(1, {load(in1), rt::DmaStore{out, 130, 250}})};
  Buffers buffers(*device, p);
  const std::vector<uint8_t> src = random_bytes(kRun * kRuns * 2, 5);
  const std::vector<uint8_t> old = random_bytes(kPitch * kRuns, 6);
  buffers.upload(0, src);
  buffers.upload(1, old);

  rt::LaunchStats stats = run(*device, p, buffers);

  std::vector<uint8_t> want = old;
  for (uint32_t r = 0; r < kRuns; ++r) {
    for (uint32_t b = 6; b < 130; ++b) want[r * kPitch + b] = src[r * kRun + b];
    for (uint32_t b = 130; b < 250; ++b) {
      want[r * kPitch + b] = src[(kRuns + r) * kRun + b];
    }
  }
  EXPECT_EQ(buffers.download<uint8_t>(1), want);
  EXPECT_EQ(stats.dma_bytes, 4u * kRun * kRuns);
}

TEST(SimLaunchDma, StickColumnsGatherIntoRowMajorTile) {
  // A 3-D transfer whose inner run is one stick and whose outer level walks
  // stick columns (the device's default 2-D layout): 8 rows x 3 sticks.
  const uint32_t rows = 8, sticks = 3;
  rt::StickTransfer in =
      xfer(0, 0, 0, 128, rows, 128, sticks * 128, sticks, rows * 128, 128);
  rt::StickTransfer out =
      xfer(1, 0, 0, sticks * 128, rows, sticks * 128, sticks * 128);
  round_trip(in, out, rows * sticks * 128, rows * sticks * 128, 31);
}

// ---- DmaGather --------------------------------------------------------------

constexpr uint64_t kTableRows = 50;
constexpr uint32_t kRowBytes = 256;
constexpr uint64_t kTableStride = 384;

// core 3: load indices (slot 1), gather table rows (slot 0), store (slot 2).
rt::Program gather_program(DType index_dtype, uint32_t count) {
  const uint32_t index_bytes = static_cast<uint32_t>(
      rt::round_up_to_sticks(uint64_t{count} * rt::element_size(index_dtype)));
  rt::DmaGather g;
  g.table = {0, 128};
  g.table_rows = kTableRows;
  g.table_row_stride = kTableStride;
  g.row_bytes = kRowBytes;
  g.index_spad = 0;
  g.index_dtype = index_dtype;
  g.count = count;
  g.spad = 8192;
  g.spad_stride = kRowBytes;
  rt::Program p;
  p.name = "gather";
  p.args = {slot("table", 128 + kTableRows * kTableStride),
            slot("indices", index_bytes, index_dtype),
            slot("rows", uint64_t{count} * kRowBytes, DType::kFloat16, true)};
  p.cores = {core(3, {load(xfer(1, 0, 0, index_bytes)), g,
                      store(xfer(2, 0, 8192, count * kRowBytes))})};
  return p;
}

void upload_indices(Buffers& buffers, DType dtype,
                    const std::vector<int64_t>& indices) {
  if (dtype == DType::kInt64) {
    buffers.upload(1, indices);
    return;
  }
  std::vector<int32_t> narrow(indices.begin(), indices.end());
  buffers.upload(1, narrow);
}

class SimLaunchGather : public ::testing::TestWithParam<DType> {};

TEST_P(SimLaunchGather, RowsFollowTheIndices) {
  const DType dtype = GetParam();
  const std::vector<int64_t> indices = {7, 0, 49, 7, 23, 1, 48, 30, 30, 2};
  auto device = small_device();
  rt::Program p = gather_program(dtype, static_cast<uint32_t>(indices.size()));
  Buffers buffers(*device, p);
  const std::vector<uint8_t> table = random_bytes(p.args[0].bytes, 5);
  buffers.upload(0, table);
  upload_indices(buffers, dtype, indices);

  rt::LaunchStats stats = run(*device, p, buffers);

  std::vector<uint8_t> rows = buffers.download<uint8_t>(2);
  for (size_t r = 0; r < indices.size(); ++r) {
    const uint8_t* want = table.data() + 128 + indices[r] * kTableStride;
    EXPECT_TRUE(std::equal(want, want + kRowBytes, rows.data() + r * kRowBytes))
        << "output row " << r << " is not table row " << indices[r];
  }
  const uint64_t index_bytes = p.args[1].bytes;
  EXPECT_EQ(stats.dma_bytes,
            index_bytes + 2 * indices.size() * uint64_t{kRowBytes});
}

TEST_P(SimLaunchGather, IndexOutOfRangeIsADeviceErrorAndWritesNothing) {
  const DType dtype = GetParam();
  auto device = small_device();
  // Core 3 stores a tile before its gather fails, and core 9 stores
  // independently: both writes must be undone.
  rt::Program p = gather_program(dtype, 4);
  auto& insts = p.cores[0].instructions;
  insts.insert(insts.begin(), store(xfer(2, 0, 8192, 4 * kRowBytes)));
  p.args.push_back(slot("other", 4096, DType::kFloat16, true));
  p.cores.push_back(
      core(9, {load(xfer(0, 0, 0, 4096)), store(xfer(3, 0, 0, 4096))}));
  rt::LoadedProgram loaded(*device, p);
  Buffers buffers(*device, p);
  buffers.upload(0, random_bytes(p.args[0].bytes, 6));
  buffers.upload(2, std::vector<uint8_t>(p.args[2].bytes, 0xab));
  buffers.upload(3, std::vector<uint8_t>(4096, 0xcd));

  for (int64_t bad : {int64_t{kTableRows}, int64_t{-1}, int64_t{1} << 40}) {
    if (dtype == DType::kInt32 && bad > INT32_MAX) continue;
    SCOPED_TRACE(bad);
    upload_indices(buffers, dtype, {3, 4, bad, 5});
    auto before = buffers.snapshot();
    auto error = raised([&] { loaded.run(buffers.bindings); });
    ASSERT_TRUE(error.has_value()) << "an out-of-range index was accepted";
    EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
    EXPECT_TRUE(error->mentions("index " + std::to_string(bad)))
        << error->message;
    EXPECT_TRUE(error->mentions("position 2")) << error->message;
    EXPECT_EQ(buffers.snapshot(), before) << "a failed launch wrote memory";
  }
  // The device stays usable: a good launch on the same program works.
  upload_indices(buffers, dtype, {3, 4, 5, 6});
  loaded.run(buffers.bindings);
  std::vector<uint8_t> rows = buffers.download<uint8_t>(2);
  std::vector<uint8_t> table = buffers.download<uint8_t>(0);
  EXPECT_TRUE(std::equal(rows.begin() + 2 * kRowBytes,
                         rows.begin() + 3 * kRowBytes,
                         table.begin() + 128 + 5 * kTableStride));
  EXPECT_EQ(buffers.download<uint8_t>(3),
            std::vector<uint8_t>(table.begin(), table.begin() + 4096));
}

INSTANTIATE_TEST_SUITE_P(IndexTypes, SimLaunchGather,
                         ::testing::Values(DType::kInt32, DType::kInt64),
                         [](const auto& info) {
                           return std::string(rt::dtype_name(info.param));
                         });

// ---- DmaScatter -------------------------------------------------------------

// core 5: load indices (slot 1) and rows (slot 2), scatter the rows into
// the table (slot 0, written in place).
rt::Program scatter_program(DType index_dtype, uint32_t count) {
  const uint32_t index_bytes = static_cast<uint32_t>(
      rt::round_up_to_sticks(uint64_t{count} * rt::element_size(index_dtype)));
  rt::DmaScatter s;
  s.table = {0, 128};
  s.table_rows = kTableRows;
  s.table_row_stride = kTableStride;
  s.row_bytes = kRowBytes;
  s.index_spad = 0;
  s.index_dtype = index_dtype;
  s.count = count;
  s.spad = 8192;
  s.spad_stride = kRowBytes;
  rt::Program p;
  p.name = "scatter";
  p.args = {
      slot("table", 128 + kTableRows * kTableStride, DType::kFloat16, true),
      slot("indices", index_bytes, index_dtype),
      slot("rows", uint64_t{count} * kRowBytes)};
  p.cores = {core(5, {load(xfer(1, 0, 0, index_bytes)),
                      load(xfer(2, 0, 8192, count * kRowBytes)), s})};
  return p;
}

class SimLaunchScatter : public ::testing::TestWithParam<DType> {};

TEST_P(SimLaunchScatter, RowsLandAtTheirIndicesAndTheRestIsKept) {
  const DType dtype = GetParam();
  // 30 twice: the later row wins.
  const std::vector<int64_t> indices = {7, 0, 49, 30, 23, 30};
  auto device = small_device();
  rt::Program p = scatter_program(dtype, static_cast<uint32_t>(indices.size()));
  Buffers buffers(*device, p);
  const std::vector<uint8_t> table = random_bytes(p.args[0].bytes, 7);
  const std::vector<uint8_t> rows = random_bytes(p.args[2].bytes, 8);
  buffers.upload(0, table);
  upload_indices(buffers, dtype, indices);
  buffers.upload(2, rows);

  rt::LaunchStats stats = run(*device, p, buffers);

  std::vector<uint8_t> expected = table;
  for (size_t r = 0; r < indices.size(); ++r) {
    std::copy(rows.begin() + r * kRowBytes, rows.begin() + (r + 1) * kRowBytes,
              expected.begin() + 128 + indices[r] * kTableStride);
  }
  EXPECT_EQ(buffers.download<uint8_t>(0), expected);
  EXPECT_EQ(stats.dma_bytes, p.args[1].bytes + 2 * indices.size() * kRowBytes);
}

TEST_P(SimLaunchScatter, IndexOutOfRangeIsADeviceErrorAndWritesNothing) {
  const DType dtype = GetParam();
  auto device = small_device();
  // A good scatter runs first on the same core, then the failing one: the
  // first one's rows must be undone too.
  rt::Program p = scatter_program(dtype, 4);
  auto& insts = p.cores[0].instructions;
  rt::DmaScatter first = std::get<rt::DmaScatter>(insts.back());
  first.index_spad = 128;
  insts.insert(insts.end() - 1, first);
  insts.front() = load(xfer(1, 0, 0, 256));  // both scatters' indices
  p.args[1].bytes = 256;
  rt::LoadedProgram loaded(*device, p);
  Buffers buffers(*device, p);
  buffers.upload(0, random_bytes(p.args[0].bytes, 9));
  buffers.upload(2, random_bytes(p.args[2].bytes, 10));
  for (int64_t bad : {int64_t{kTableRows}, int64_t{-1}}) {
    SCOPED_TRACE(bad);
    std::vector<int64_t> indices = {3, 4, bad, 5};
    std::vector<int64_t> padded(128 / rt::element_size(dtype), 0);
    padded.insert(padded.end(), {10, 11, 12, 13});
    std::copy(indices.begin(), indices.end(), padded.begin());
    upload_indices(buffers, dtype, padded);
    auto before = buffers.snapshot();
    auto error = raised([&] { loaded.run(buffers.bindings); });
    ASSERT_TRUE(error.has_value()) << "an out-of-range index was accepted";
    EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
    EXPECT_TRUE(error->mentions("DmaScatter")) << error->message;
    EXPECT_TRUE(error->mentions("index " + std::to_string(bad)))
        << error->message;
    EXPECT_EQ(buffers.snapshot(), before) << "a failed launch wrote memory";
  }
}

INSTANTIATE_TEST_SUITE_P(IndexTypes, SimLaunchScatter,
                         ::testing::Values(DType::kInt32, DType::kInt64),
                         [](const auto& info) {
                           return std::string(rt::dtype_name(info.param));
                         });

}  // namespace
}  // namespace spyre::sim::test
