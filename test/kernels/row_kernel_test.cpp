// RowKernelWriter (row_kernel.h): how eager row-wise kernels map matrices
// onto a loop kernel's iteration space. Their results are checked against
// the CPU by the norm builder tests and test_ops_norm.py.
#include "spyre/kernels/row_kernel.h"

#include <gtest/gtest.h>

#include "spyre/kernels/program_builder.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF16 = rt::DType::kFloat16;

TEST(RowKernelWriter, SplitsAnOperandsRowsToTheSpacesRowDims) {
  // space: 4 x 6 rows of 100 columns; the output's rows are one merged dim
  const Matrix space =
      Matrix::strided(kF16, 0, {{4, 6 * 128}, {6, 128}}, 100, 24 * 128);
  const Matrix out = Matrix::strided(kF16, 0, {{24, 128}}, 100, 24 * 128);
  RowKernelWriter w("test", space);
  w.rows_operand("in", space, false);
  w.rows_operand("out", out, true);
  w.store("out", w.load("in"));
  const LoopKernel k = std::move(w).finish();
  EXPECT_EQ(k.outer, std::vector<int64_t>{4});
  EXPECT_EQ(k.rows, 6);
  EXPECT_EQ(k.cols, 100);
  EXPECT_EQ(k.buffers[1].host_sizes, (std::vector<int64_t>{4, 6, 100}));
  EXPECT_EQ(k.buffers[1].dim_stride_bytes[0], 6 * 128);
  EXPECT_EQ(k.buffers[1].dim_stride_bytes[1], 128);
}

TEST(RowKernelWriter, AViewStartingInsideAStickKeepsItsPlace) {
  // element (0, 0) 3 sticks and 5 elements into the slot
  const Matrix view =
      Matrix::strided(kF16, 3 * 128 + 5 * 2, {{8, 128}}, 40, 8 * 128);
  RowKernelWriter w("test", view);
  w.rows_operand("in", view, false);
  const LoopKernel k = [&] {
    w.store("kept", w.load("in"));
    return std::move(w).finish();
  }();
  EXPECT_EQ(k.buffers[0].offset_bytes, 3u * 128);
  EXPECT_EQ(k.ops[0].access->base.back(), 5);
}

TEST(RowKernelWriter, RejectsRowsThatDoNotFactor) {
  const Matrix space = Matrix::strided(kF16, 0, {{4, 1024}, {6, 128}}, 64, 128);
  // 24 rows in steps that are not one after the other for a split of 4 x 6
  const Matrix odd = Matrix::strided(kF16, 0, {{3, 4096}, {8, 128}}, 64, 128);
  RowKernelWriter w("test", space);
  EXPECT_THROW(w.rows_operand("odd", odd, false), KernelBuildError);
  const Matrix narrow = Matrix::strided(kF16, 0, {{24, 128}}, 32, 128);
  EXPECT_THROW(w.rows_operand("narrow", narrow, false), KernelBuildError);
}

}  // namespace
}  // namespace spyre::kernels
