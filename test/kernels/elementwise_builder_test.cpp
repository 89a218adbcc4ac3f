// The elementwise kernel builder (spyre/kernels/elementwise.h, built as a
// loop kernel) on the emulator, against scalar references: stick-column
// operands, broadcasting, an output view whose sticks it shares with its
// neighbours (read-modify-write), random fills that do not depend on the core
// split, an exact int64 iota over a row cut into chunks, cache keys.
#include <gtest/gtest.h>

#include <cmath>

#include "sim_test_util.h"
#include "spyre/kernels/elementwise.h"

namespace spyre::sim::test {
namespace {

using kernels::ElementwiseKernel;
using kernels::StickOperand;
using rt::DType;
using rt::VecOp;

constexpr int64_t kRows = 5, kCols = 130, kE = 32;  // fp32: 32 per stick

// Byte offset of (r, c) of an fp32 [kRows, kCols] matrix in the default
// layout [ceil(cols / E), rows, E].
uint64_t at(int64_t r, int64_t c) {
  return static_cast<uint64_t>(((c / kE) * kRows + r) * 128 + (c % kE) * 4);
}

StickOperand matrix_operand() {
  StickOperand op;
  op.dtype = DType::kFloat32;
  op.strides = {128};  // rows
  op.stick_stride = kRows * 128;
  return op;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// An fp32 matrix's device bytes from row-major values (as far as `bytes`,
// the slot's extent, reaches).
std::vector<uint8_t> to_device(const std::vector<float>& values,
                               uint64_t bytes) {
  std::vector<uint8_t> out(bytes, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      if (at(r, c) + 4 > bytes) continue;
      std::memcpy(out.data() + at(r, c), &values[r * kCols + c], 4);
    }
  }
  return out;
}

// Runs `k` built for `cores` cores on a fresh device after uploading
// images[i] (row-major kRows x kCols values) into slot i; returns the last
// slot's (the output's) bytes.
std::vector<uint8_t> run_kernel(ElementwiseKernel k, uint32_t cores,
                                const std::vector<std::vector<float>>& images) {
  k.target = sim_target(cores);
  const rt::Program program = kernels::build_elementwise(k);
  auto device = small_device();
  Buffers buffers(*device, program);
  for (size_t i = 0; i < images.size(); ++i) {
    buffers.upload(i, to_device(images[i], buffers.bindings[i].bytes));
  }
  run(*device, program, buffers);
  return buffers.download<uint8_t>(buffers.bindings.size() - 1);
}

float read(const std::vector<uint8_t>& bytes, int64_t r, int64_t c) {
  float v;
  std::memcpy(&v, bytes.data() + at(r, c), 4);
  return v;
}

TEST(ElementwiseKernel, StepsOverStickColumnsMatchReference) {
  // out = a + 2.5 * b[row 3] (b broadcast along rows), in one launch with an
  // fp32 temporary.
  ElementwiseKernel k;
  k.target = sim_target();
  k.name = "axpy";
  k.shape = {kRows, kCols};
  k.inputs = {matrix_operand(), matrix_operand()};
  k.inputs[1].strides = {0};
  k.inputs[1].offset = 3 * 128;  // row 3's first stick
  k.output = matrix_operand();
  k.steps = {kernels::scalar_step(VecOp::kMul, 1, 2.5, DType::kFloat32),
             kernels::binary_step(VecOp::kAdd, 0, 2, DType::kFloat32)};
  for (uint32_t cores : {1u, 7u, 32u}) {
    SCOPED_TRACE(cores);
    const auto a = random_floats(kRows * kCols, 1);
    const auto b = random_floats(kRows * kCols, 2);
    const auto out = run_kernel(k, cores, {a, b});
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        const float want = a[r * kCols + c] + 2.5f * b[3 * kCols + c];
        ASSERT_EQ(read(out, r, c), want) << r << "," << c;
      }
    }
  }
}

TEST(ElementwiseKernel, BroadcastOperandIsLoadedOncePerCore) {
  // out[b] = a[b] + x[row 3] over 8 batches on 2 cores (4 blocks each): the
  // broadcast row's box is the same in every block, so each core loads it
  // once before its first block and every block reads it from there.
  constexpr int64_t kBatches = 8, kSticks = (kCols + kE - 1) / kE;
  constexpr int64_t kBatchStride = kSticks * kRows * 128;
  ElementwiseKernel k;
  k.target = sim_target(2);
  k.name = "broadcast_once";
  k.shape = {kBatches, kRows, kCols};
  StickOperand full = matrix_operand();
  full.strides = {kBatchStride, 128};
  StickOperand row = matrix_operand();
  row.strides = {0, 0};
  row.offset = 3 * 128;
  k.inputs = {full, row};
  k.output = full;
  k.steps = {kernels::binary_step(VecOp::kAdd, 0, 1, DType::kFloat32)};
  const rt::Program program = kernels::build_elementwise(k);
  ASSERT_EQ(program.cores.size(), 2u);
  for (const rt::CoreProgram& core : program.cores) {
    int64_t row_loads = 0, other_loads = 0;
    for (const rt::Instruction& inst : core.instructions) {
      if (const auto* load = std::get_if<rt::DmaLoad>(&inst)) {
        ++(load->xfer.dram.slot == 1 ? row_loads : other_loads);
      }
    }
    EXPECT_EQ(row_loads, 1) << "core " << core.core;
    EXPECT_GE(other_loads, kBatches / 2) << "core " << core.core;
  }
  // and the sum is right in every block
  const auto a = random_floats(kBatches * kRows * kCols, 5);
  const auto x = random_floats(kRows * kCols, 6);
  auto device = small_device();
  Buffers buffers(*device, program);
  std::vector<uint8_t> a_bytes(buffers.bindings[0].bytes, 0);
  for (int64_t b = 0; b < kBatches; ++b) {
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      const uint64_t at_b = b * kBatchStride + at(i / kCols, i % kCols);
      std::memcpy(a_bytes.data() + at_b, &a[b * kRows * kCols + i], 4);
    }
  }
  buffers.upload(0, a_bytes);
  buffers.upload(1, to_device(x, buffers.bindings[1].bytes));
  run(*device, program, buffers);
  const auto out = buffers.download<uint8_t>(2);
  for (int64_t b = 0; b < kBatches; ++b) {
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        float got;
        std::memcpy(&got, out.data() + b * kBatchStride + at(r, c), 4);
        ASSERT_EQ(got, a[(b * kRows + r) * kCols + c] + x[3 * kCols + c])
            << b << "," << r << "," << c;
      }
    }
  }
}

TEST(ElementwiseKernel, OutputViewKeepsItsNeighboursInSharedSticks) {
  // out[1:4, 3:63] = -x[0:3, 40:100] + col(7): output columns start inside a
  // stick and end inside one, so its sticks are read before being written.
  ElementwiseKernel k;
  k.target = sim_target();
  k.name = "view";
  k.shape = {3, 60};
  StickOperand x = matrix_operand();
  x.offset = (40 / kE) * kRows * 128;  // row 0, stick of column 40
  x.first = 40 % kE;
  StickOperand column = matrix_operand();  // element (r, 7), broadcast
  column.cols = StickOperand::Cols::kBroadcast;
  column.first = 7;
  StickOperand out = matrix_operand();
  out.offset = 1 * 128;  // row 1
  out.first = 3;
  k.inputs = {x, column};
  k.output = out;
  k.output_shares_sticks = true;
  k.steps = {kernels::unary_step(VecOp::kNeg, 0, DType::kFloat32),
             kernels::binary_step(VecOp::kAdd, 2, 1, DType::kFloat32)};
  // the output is never read: its stores are masked to the view's bytes
  k.target = sim_target(32);
  int64_t masked = 0;
  for (const rt::CoreProgram& core : kernels::build_elementwise(k).cores) {
    for (const rt::Instruction& inst : core.instructions) {
      if (const auto* load = std::get_if<rt::DmaLoad>(&inst)) {
        EXPECT_NE(load->xfer.dram.slot, 2u) << "the output was loaded";
      } else if (const auto* store = std::get_if<rt::DmaStore>(&inst)) {
        masked += store->masked() ? 1 : 0;
      }
    }
  }
  EXPECT_GT(masked, 0);
  const auto xs = random_floats(kRows * kCols, 3);
  const auto before = random_floats(kRows * kCols, 4);
  const auto got = run_kernel(k, 32, {xs, xs, before});
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      if (at(r, c) + 4 > got.size()) continue;  // beyond the slot's extent
      const bool inside = r >= 1 && r < 4 && c >= 3 && c < 63;
      const float want =
          inside ? -xs[(r - 1) * kCols + 40 + (c - 3)] + xs[(r - 1) * kCols + 7]
                 : before[r * kCols + c];
      ASSERT_EQ(read(got, r, c), want) << r << "," << c;
    }
  }
}

TEST(ElementwiseKernel, ColumnsAcrossSticksAreReadElementByElement) {
  // out[i, 0:5] = 2 * x[0:5, 37 + 32 i]: each input element lies in a
  // stick of its own (a column of x), at position 5.
  ElementwiseKernel k;
  k.name = "column";
  k.shape = {2, kRows};
  StickOperand column = matrix_operand();
  column.cols = StickOperand::Cols::kAcrossSticks;
  column.offset = (37 / kE) * kRows * 128;
  column.first = 37 % kE;
  column.stick_stride = 128;       // rows of x are a stick apart
  column.strides = {kRows * 128};  // the next stick column of x
  StickOperand out = matrix_operand();
  k.inputs = {column};
  k.output = out;
  k.output_shares_sticks = true;
  k.steps = {kernels::scalar_step(VecOp::kMul, 0, 2.0, DType::kFloat32)};
  for (uint32_t cores : {1u, 32u}) {
    SCOPED_TRACE(cores);
    const auto xs = random_floats(kRows * kCols, 5);
    const auto before = random_floats(kRows * kCols, 6);
    const auto got = run_kernel(k, cores, {xs, before});
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t c = 0; c < kRows; ++c) {
        ASSERT_EQ(read(got, i, c), 2.0f * xs[c * kCols + 37 + 32 * i])
            << i << "," << c;
      }
      ASSERT_EQ(read(got, i, kRows), before[i * kCols + kRows]);  // kept
    }
  }
}

TEST(ElementwiseKernel, LaneStepsStartEachBatchInsideAStick) {
  // out[r, 32 h + c] = 2 * x[r, 16 h + c] for h < 2, c < 16: the input's
  // batch dim h steps half a stick (heads of 16 fp32 split off a row).
  ElementwiseKernel k;
  k.name = "heads";
  k.shape = {2, kRows, 16};
  StickOperand heads = matrix_operand();
  heads.strides = {0, 128};
  heads.lane_steps = {16, 0};
  StickOperand out = matrix_operand();
  out.strides = {kRows * 128, 128};  // the next stick column
  k.inputs = {heads};
  k.output = out;
  k.output_shares_sticks = true;
  k.steps = {kernels::scalar_step(VecOp::kMul, 0, 2.0, DType::kFloat32)};
  for (uint32_t cores : {1u, 32u}) {
    SCOPED_TRACE(cores);
    const auto xs = random_floats(kRows * kCols, 7);
    const auto before = random_floats(kRows * kCols, 8);
    const auto got = run_kernel(k, cores, {xs, before});
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < 16; ++c) {
          ASSERT_EQ(read(got, r, 32 * h + c), 2.0f * xs[r * kCols + 16 * h + c])
              << h << "," << r << "," << c;
        }
        ASSERT_EQ(read(got, r, 32 * h + 16), before[r * kCols + 32 * h + 16]);
      }
    }
  }
  StickOperand bad = heads;
  bad.lane_steps = {0, 16};  // on the rows dim: rows of one tile differ
  k.inputs = {bad};
  EXPECT_THROW(kernels::build_elementwise(k), rt::Error);
}

TEST(ElementwiseKernel, RandomDrawsDoNotDependOnTheCoreSplit) {
  std::vector<uint8_t> first;
  for (uint32_t cores : {1u, 5u, 32u}) {
    ElementwiseKernel k;
    k.target = sim_target();
    k.name = "rand";
    k.shape = {kRows, kCols};
    k.output = matrix_operand();
    k.steps = {kernels::random_step(rt::RandDist::kNormal, 0, 1, 42, 1000,
                                    DType::kFloat32)};
    const auto got = run_kernel(k, cores, {});
    if (first.empty()) {
      first = got;
      double sum = 0;
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kCols; ++c) sum += read(got, r, c);
      EXPECT_LT(std::abs(sum / (kRows * kCols)), 0.2);
    } else {
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t c = 0; c < kCols; ++c)
          ASSERT_EQ(read(got, r, c), read(first, r, c)) << cores;
    }
  }
}

TEST(ElementwiseKernel, Int64IotaIsExactInChunksOfALongRow) {
  // out[c] = 2^40 + 3 c over one row of 5000 int64 (16 per stick): the row
  // is cut into chunks over the cores, each starting its own iota, and
  // every value stays exact (far beyond fp32's 2^24).
  constexpr int64_t n = 5000, start = int64_t{1} << 40;
  ElementwiseKernel k;
  k.name = "arange";
  k.shape = {n};
  k.output.dtype = DType::kInt64;
  k.steps = {kernels::index_step(kernels::ElementwiseStep::Kind::kColIndex,
                                 static_cast<double>(start), 3, DType::kInt64),
             kernels::copy_step(0)};
  for (uint32_t cores : {1u, 32u}) {
    SCOPED_TRACE(cores);
    const auto got = run_kernel(k, cores, {});
    for (int64_t c = 0; c < n; ++c) {
      int64_t value;
      std::memcpy(&value, got.data() + c * 8, 8);
      ASSERT_EQ(value, start + 3 * c) << c;
    }
  }
}

TEST(ElementwiseKernel, KeysDifferWhenPlacementsDo) {
  ElementwiseKernel k;
  k.target = sim_target();
  k.shape = {kRows, kCols};
  k.inputs = {matrix_operand()};
  k.output = matrix_operand();
  k.steps = {kernels::copy_step()};
  kernels::KeyWriter a, same, b, c, d;
  k.append_key(a);
  k.append_key(same);
  k.inputs[0].offset = 128;
  k.append_key(b);
  k.inputs[0].offset = 0;
  k.steps[0] =
      kernels::scalar_step(VecOp::kMul, 0, 0.1 + 1e-12, DType::kFloat32);
  k.append_key(c);
  k.steps[0].imm = 0.1;  // equal to c's as text of 6 decimals
  k.append_key(d);
  EXPECT_EQ(a.bytes(), same.bytes());
  EXPECT_NE(a.bytes(), b.bytes());
  EXPECT_NE(a.bytes(), c.bytes());
  EXPECT_NE(c.bytes(), d.bytes());
}

// Strings and lists are written after their length, so a value cannot run
// into the next one.
TEST(KeyWriter, LengthsSeparateValues) {
  kernels::KeyWriter ab_c, a_bc, list12_3, list1_23;
  ab_c.add("ab").add("c");
  a_bc.add("a").add("bc");
  EXPECT_NE(ab_c.bytes(), a_bc.bytes());
  list12_3.add_list(std::vector<int64_t>{1, 2}).add(int64_t{3});
  list1_23.add_list(std::vector<int64_t>{1}).add(int64_t{2}).add(int64_t{3});
  EXPECT_NE(list12_3.bytes(), list1_23.bytes());
}

}  // namespace
}  // namespace spyre::sim::test
