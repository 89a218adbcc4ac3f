// The matmul builder (spyre/kernels/matmul.h) on the emulator against a
// double-precision reference of the rounded inputs: plain, transposed and
// strided operands, N-d rows, batches with broadcast, bias, alpha and beta.
#include <gtest/gtest.h>

#include "kernel_library_util.h"
#include "spyre/kernels/matmul.h"

namespace spyre::sim::test {
namespace {

using kernels::MatmulShape;
using kernels::Matrix;
using rt::DType;

constexpr int64_t kStick = rt::kStickBytes;

// The default device layout of a 3-D tensor [d0, d1, d2]: device_size
// [d1, ceil(d2 / E), d0, E]. As a batch over d0 of d1 x d2 matrices.
Matrix batched_default(uint64_t d0, uint64_t d1, uint64_t d2, DType t) {
  const int64_t sticks =
      static_cast<int64_t>(kernels::ceil_div(d2, rt::elements_per_stick(t)));
  Matrix m =
      Matrix::strided(t, 0, {{d1, sticks * static_cast<int64_t>(d0) * kStick}},
                      d2, static_cast<int64_t>(d0) * kStick);
  m.batch_dims = {{d0, kStick}};
  return m;
}

// The same tensor as one (d0 * d1) x d2 matrix with two row dimensions.
Matrix flattened_default(uint64_t d0, uint64_t d1, uint64_t d2, DType t) {
  Matrix m = batched_default(d0, d1, d2, t);
  m.row_dims.insert(m.row_dims.begin(), m.batch_dims.front());
  m.rows *= d0;
  m.batch_dims.clear();
  return m;
}

struct Operands {
  std::vector<Image> images;
  std::vector<double> a, b, bias;
};

// Reference C[batch][m][n] of the shape's own operands.
double reference(const MatmulShape& s, Operands& ops, uint64_t batch,
                 uint64_t m, uint64_t n) {
  double acc = 0;
  for (uint64_t k = 0; k < s.k(); ++k) {
    const double a = s.a_transposed ? ops.images[0].get(s.a, batch, k, m)
                                    : ops.images[0].get(s.a, batch, m, k);
    const double b = s.b_transposed ? ops.images[1].get(s.b, batch, n, k)
                                    : ops.images[1].get(s.b, batch, k, n);
    acc += a * b;
  }
  acc *= s.alpha;
  if (s.bias) acc += s.beta * ops.images[3].get(*s.bias, batch, m, n);
  return acc;
}

void check_matmul(const MatmulShape& s, uint32_t max_cores = 0) {
  kernels::MatmulOptions options;
  options.target = sim_target(max_cores);
  const kernels::MatmulPlan plan = kernels::plan_matmul(s, options);
  SCOPED_TRACE(plan.describe());
  const rt::Program program = kernels::build_matmul(s, plan, options);
  auto device = small_device();
  std::mt19937 rng(7);
  Operands ops;
  ops.images.emplace_back(s.a.bytes());
  ops.images.emplace_back(s.b.bytes());
  ops.images.emplace_back(s.c.bytes());
  ops.images[0].fill(s.a, rng);
  ops.images[1].fill(s.b, rng);
  if (s.bias) {
    ops.images.emplace_back(s.bias->bytes());
    ops.images[3].fill(*s.bias, rng);
  }
  std::vector<Image> before = ops.images;
  run_images(*device, program, ops.images);
  const double u = unit_roundoff(s.c.dtype);
  for (uint64_t batch = 0; batch < s.batch_count(); ++batch) {
    for (uint64_t m = 0; m < s.m(); ++m) {
      for (uint64_t n = 0; n < s.n(); ++n) {
        // Reference from the inputs as uploaded (images 0, 1, 3 unchanged).
        Operands in{before, {}, {}, {}};
        const double want = reference(s, in, batch, m, n);
        const double got = ops.images[2].get(s.c, batch, m, n);
        // One rounding of the output plus fp32 accumulation over K.
        const double tol = u * std::fabs(want) + 2e-6 * s.k() + 1e-6;
        ASSERT_NEAR(got, want, tol)
            << "batch " << batch << " C[" << m << ", " << n << "]";
      }
    }
  }
}

class MatmulBuilder : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulBuilder, StickColumnsOddSizes) {
  const DType t = GetParam();
  check_matmul({Matrix::stick_columns(37, 75, t),
                Matrix::stick_columns(75, 101, t),
                Matrix::stick_columns(37, 101, t)});
}

TEST_P(MatmulBuilder, RowMajorSeveralKTiles) {
  const DType t = GetParam();
  check_matmul({Matrix::row_major(40, 300, t), Matrix::row_major(300, 70, t),
                Matrix::row_major(40, 70, t)});
}

TEST_P(MatmulBuilder, TransposedB) {
  // q @ k^T: B is stored as N x K.
  const DType t = GetParam();
  MatmulShape s{Matrix::stick_columns(45, 33, t),
                Matrix::stick_columns(29, 33, t),
                Matrix::stick_columns(45, 29, t)};
  s.b_transposed = true;
  check_matmul(s);
}

TEST_P(MatmulBuilder, TransposedAOnFewCores) {
  const DType t = GetParam();
  MatmulShape s{Matrix::stick_columns(50, 150, t),
                Matrix::stick_columns(50, 70, t),
                Matrix::stick_columns(150, 70, t)};
  s.a_transposed = true;
  check_matmul(s, 3);
  check_matmul(s);
}

TEST_P(MatmulBuilder, LinearOverThreeDimRowsWithBroadcastBias) {
  // x [2, 9, 40] @ W^T (W stored [24, 40]) + b[24], C [2, 9, 24].
  const DType t = GetParam();
  MatmulShape s{flattened_default(2, 9, 40, t),
                Matrix::stick_columns(24, 40, t),
                flattened_default(2, 9, 24, t)};
  s.b_transposed = true;
  s.bias = Matrix::strided(t, 0, {{18, 0}}, 24, kStick);
  check_matmul(s);
}

TEST_P(MatmulBuilder, BatchedWithBroadcastAndScaledBias) {
  const DType t = GetParam();
  // A [5, 13, 20], B broadcast over the batch (stride 0), full bias.
  MatmulShape s{batched_default(5, 13, 20, t), Matrix::stick_columns(20, 17, t),
                batched_default(5, 13, 17, t)};
  s.b.batch_dims = {{5, 0}};
  s.bias = batched_default(5, 13, 17, t);
  s.alpha = 0.5;
  s.beta = -2;
  check_matmul(s);
}

TEST_P(MatmulBuilder, ManyBatchesTransposedB) {
  // Attention scores: [8, 11, 32] @ [8, 11, 32]^T.
  const DType t = GetParam();
  MatmulShape s{batched_default(40, 11, 32, t), batched_default(40, 11, 32, t),
                batched_default(40, 11, 11, t)};
  s.b_transposed = true;
  s.alpha = 0.125;
  check_matmul(s);
}

TEST_P(MatmulBuilder, ViewWithOffsetAndStrides) {
  // Rows 3..30 of every other row of a 64 x 96 row-major matrix.
  const DType t = GetParam();
  const int64_t pitch = kernels::padded_row_bytes(96, t);
  Matrix a = Matrix::strided(t, 6 * pitch, {{14, 2 * pitch}}, 96, kStick);
  check_matmul(
      {a, Matrix::stick_columns(96, 50, t), Matrix::stick_columns(14, 50, t)});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(MatmulBuilderErrors, ShapesAndBiasMustAgree) {
  const DType t = DType::kFloat16;
  kernels::MatmulOptions o;
  o.target = sim_target();
  EXPECT_THROW(kernels::plan_matmul({Matrix::stick_columns(4, 5, t),
                                     Matrix::stick_columns(6, 7, t),
                                     Matrix::stick_columns(4, 7, t)},
                                    o),
               kernels::KernelBuildError);
  MatmulShape s{Matrix::stick_columns(4, 5, t), Matrix::stick_columns(5, 7, t),
                Matrix::stick_columns(4, 7, t)};
  s.bias = Matrix::stick_columns(4, 6, t);
  EXPECT_THROW(kernels::plan_matmul(s, o), kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
