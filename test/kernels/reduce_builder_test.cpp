// The reduction builders (spyre/kernels/reduce.h) on the emulator against a
// double-precision reference: along sticks and along rows, every op, odd
// sizes, N-d row dimensions in any order, rows that need several tiles.
#include <gtest/gtest.h>

#include "kernel_library_util.h"
#include "spyre/kernels/reduce.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using kernels::ReduceOp;
using rt::DType;

constexpr int64_t kStick = rt::kStickBytes;

int64_t sticks(uint64_t n, DType t) {
  return static_cast<int64_t>(kernels::ceil_div(n, rt::elements_per_stick(t)));
}

// [d0, d1, d2] in the default layout [d1, ceil(d2/E), d0, E] as a matrix
// whose rows are (d0, d1) (or (d1, d0) when `d1_outer`).
Matrix default_3d(uint64_t d0, uint64_t d1, uint64_t d2, DType t,
                  bool d1_outer = false) {
  const kernels::StridedDim a{d0, kStick};
  const kernels::StridedDim b{
      d1, sticks(d2, t) * static_cast<int64_t>(d0) * kStick};
  return Matrix::strided(t, 0, d1_outer ? std::vector{b, a} : std::vector{a, b},
                         d2, static_cast<int64_t>(d0) * kStick);
}

double reference(ReduceOp op, const std::vector<double>& x) {
  double acc = op == ReduceOp::kProd ? 1 : (op == ReduceOp::kSum ? 0 : x[0]);
  size_t best = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (op == ReduceOp::kSum) acc += x[i];
    if (op == ReduceOp::kProd) acc *= x[i];
    if ((op == ReduceOp::kMax || op == ReduceOp::kArgMax) && x[i] > x[best])
      best = i;
    if ((op == ReduceOp::kMin || op == ReduceOp::kArgMin) && x[i] < x[best])
      best = i;
  }
  if (kernels::is_arg_reduction(op)) return static_cast<double>(best);
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) return x[best];
  return acc;
}

const ReduceOp kOps[] = {ReduceOp::kSum,  ReduceOp::kMax,    ReduceOp::kMin,
                         ReduceOp::kProd, ReduceOp::kArgMax, ReduceOp::kArgMin};

// Runs one reduction of `in` (values in [lo, hi)) and checks every output
// against `reduce(row/column values)`; `along_rows` picks the builder.
void check(const Matrix& in, Matrix out, ReduceOp op, bool along_rows,
           double scale = 1) {
  SCOPED_TRACE(kernels::reduce_op_name(op));
  if (kernels::is_arg_reduction(op)) out.dtype = DType::kInt64;
  kernels::ReduceOptions o;
  o.target = sim_target();
  o.scale = kernels::is_arg_reduction(op) ? 1 : scale;
  const rt::Program program =
      along_rows ? kernels::build_reduce_along_rows(in, out, op, o)
                 : kernels::build_reduce_along_sticks(in, out, op, o);
  std::mt19937 rng(3);
  std::vector<Image> images{Image(in.bytes()), Image(out.bytes())};
  const bool prod = op == ReduceOp::kProd;
  images[0].fill(in, rng, prod ? 0.99 : -2, prod ? 1.01 : 2);
  Image input = images[0];
  auto device = small_device();
  run_images(*device, program, images);
  const double u = unit_roundoff(out.dtype);
  const uint64_t reduced = along_rows ? in.rows / out.rows : in.cols;
  for (uint64_t r = 0; r < out.rows; ++r) {
    for (uint64_t c = 0; c < out.cols; ++c) {
      std::vector<double> x;
      double magnitude = 0;
      for (uint64_t i = 0; i < reduced; ++i) {
        x.push_back(along_rows ? input.get(in, 0, r * reduced + i, c)
                               : input.get(in, 0, r * out.cols + c, i));
        magnitude += std::fabs(x.back());
      }
      const double want = reference(op, x) * o.scale;
      const double got = images[1].get(out, 0, r, c);
      const double tol = kernels::is_arg_reduction(op)
                             ? 0
                             : u * std::fabs(want) + 1e-6 * magnitude * o.scale;
      ASSERT_NEAR(got, want, tol) << "out[" << r << ", " << c << "]";
    }
  }
}

class ReduceBuilder : public ::testing::TestWithParam<DType> {};

TEST_P(ReduceBuilder, LastDimOfThreeDim) {
  const DType t = GetParam();
  for (ReduceOp op : kOps) {
    check(default_3d(5, 37, 301, t), Matrix::stick_columns(5, 37, t), op,
          false);
  }
}

TEST_P(ReduceBuilder, MeanOfLastDimAsScale) {
  const DType t = GetParam();
  check(default_3d(3, 70, 129, t), Matrix::stick_columns(3, 70, t),
        ReduceOp::kSum, false, 1.0 / 129);
}

TEST_P(ReduceBuilder, MiddleAndFirstDims) {
  const DType t = GetParam();
  for (ReduceOp op : kOps) {
    // dim 1 of [3, 21, 201] -> [3, 201]; dim 0 -> [21, 201].
    check(default_3d(3, 21, 201, t), Matrix::stick_columns(3, 201, t), op,
          true);
    check(default_3d(3, 21, 201, t, /*d1_outer=*/true),
          Matrix::stick_columns(21, 201, t), op, true);
  }
}

TEST_P(ReduceBuilder, FullReductionOfOneDim) {
  const DType t = GetParam();
  const Matrix in = Matrix::strided(t, 0, {}, 1000, kStick);
  const Matrix scalar = Matrix::strided(t, 0, {}, 1, kStick);
  for (ReduceOp op : kOps) check(in, scalar, op, false);
}

TEST_P(ReduceBuilder, RowsLongerThanATile) {
  const DType t = GetParam();
  // 3 rows of 300000 elements: the columns are cut into tiles.
  check(Matrix::stick_columns(3, 300000, t),
        Matrix::strided(t, 0, {}, 3, kStick), ReduceOp::kSum, false);
  // 12000 rows reduced along rows: several row tiles accumulate.
  check(Matrix::stick_columns(12000, 70, t),
        Matrix::strided(t, 0, {}, 70, kStick), ReduceOp::kMax, true);
}

TEST_P(ReduceBuilder, FewRowsSpreadOverEveryCore) {
  // 64 row sums fill one stick of results (one of fp32's two): blocks of
  // whole result sticks would run on one or two cores, so the cores split
  // the sticks and store their own results masked. 150 rows: blocks of 5
  // cross the sticks' boundaries.
  const DType t = GetParam();
  for (uint64_t rows : {64u, 150u}) {
    SCOPED_TRACE(rows);
    const Matrix in = Matrix::stick_columns(rows, 4096, t);
    const Matrix out = Matrix::strided(t, 0, {}, rows, kStick);
    kernels::ReduceOptions o;
    o.target = sim_target();
    const rt::Program program =
        kernels::build_reduce_along_sticks(in, out, ReduceOp::kSum, o);
    const uint64_t per_core = kernels::ceil_div(rows, 32);  // 2 or 5 rows
    EXPECT_EQ(program.cores.size(), kernels::ceil_div(rows, per_core));
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      check(in, out, op, false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReduceBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(ReduceBuilderErrors, ShapesAndArgDtype) {
  const DType t = DType::kFloat16;
  kernels::ReduceOptions o;
  o.target = sim_target();
  EXPECT_THROW(kernels::build_reduce_along_sticks(
                   Matrix::stick_columns(4, 10, t),
                   Matrix::stick_columns(1, 3, t), ReduceOp::kSum, o),
               kernels::KernelBuildError);
  EXPECT_THROW(kernels::build_reduce_along_sticks(
                   Matrix::stick_columns(4, 10, t),
                   Matrix::stick_columns(1, 4, t), ReduceOp::kArgMax, o),
               kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
