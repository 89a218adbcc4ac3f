// The norm builder (spyre/kernels/norm.h) on the emulator against a
// double-precision reference: layer norm with and without weight and bias,
// RMS norm, statistics outputs, N-d rows, fp16/bf16/fp32.
#include <gtest/gtest.h>

#include "kernel_library_util.h"
#include "spyre/kernels/norm.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using rt::DType;

constexpr int64_t kStick = rt::kStickBytes;

// [d0, d1, d2] in the default layout, rows (d0, d1).
Matrix default_3d(uint64_t d0, uint64_t d1, uint64_t d2, DType t) {
  const int64_t sticks =
      static_cast<int64_t>(kernels::ceil_div(d2, rt::elements_per_stick(t)));
  return Matrix::strided(
      t, 0, {{d0, kStick}, {d1, sticks * static_cast<int64_t>(d0) * kStick}},
      d2, static_cast<int64_t>(d0) * kStick);
}

Matrix vector_of(uint64_t n, DType t) {
  return Matrix::strided(t, 0, {}, n, kStick);
}

void check_norm(DType t, bool rms, bool weight, bool bias, bool stats) {
  SCOPED_TRACE(rt::str(rms ? "rms" : "layer", weight ? " weight" : "",
                       bias ? " bias" : "", stats ? " stats" : ""));
  const uint64_t d0 = 3, d1 = 21, cols = 201;
  kernels::NormShape s;
  s.in = default_3d(d0, d1, cols, t);
  s.out = default_3d(d0, d1, cols, t);
  if (weight) s.weight = vector_of(cols, t);
  if (bias) s.bias = vector_of(cols, t);
  if (stats) {
    if (!rms) s.mean = Matrix::stick_columns(d0, d1, t);
    s.rstd = Matrix::stick_columns(d0, d1, t);
  }
  kernels::NormOptions o;
  o.target = sim_target();
  o.rms = rms;
  o.eps = 1e-5;
  const rt::Program program = kernels::build_norm(s, o);
  std::vector<Image> images{Image(s.in.bytes()), Image(s.out.bytes())};
  std::mt19937 rng(5);
  images[0].fill(s.in, rng, -3, 5);
  std::vector<double> w(cols, 1), b(cols, 0);
  if (weight) {
    images.emplace_back(s.weight->bytes());
    w = images.back().fill(*s.weight, rng);
  }
  if (bias) {
    images.emplace_back(s.bias->bytes());
    b = images.back().fill(*s.bias, rng);
  }
  const size_t first_stat = images.size();
  if (s.mean) images.emplace_back(s.mean->bytes());
  if (s.rstd) images.emplace_back(s.rstd->bytes());
  const Image input = images[0];
  auto device = small_device();
  run_images(*device, program, images);
  const double u = unit_roundoff(t);
  for (uint64_t r = 0; r < s.in.rows; ++r) {
    double mean = 0, var = 0;
    std::vector<double> x(cols);
    for (uint64_t c = 0; c < cols; ++c) {
      x[c] = const_cast<Image&>(input).get(s.in, 0, r, c);
      mean += x[c];
    }
    mean = rms ? 0 : mean / cols;
    for (double v : x) var += (v - mean) * (v - mean);
    const double rstd = 1 / std::sqrt(var / cols + o.eps);
    for (uint64_t c = 0; c < cols; ++c) {
      const double want = (x[c] - mean) * rstd * w[c] + b[c];
      ASSERT_NEAR(images[1].get(s.out, 0, r, c), want,
                  u * std::fabs(want) + 1e-5)
          << "row " << r << " col " << c;
    }
    // Stats rows are the input's d0, columns its d1 (r = i0 * d1 + i1... in
    // flattened (d0, d1) order: r = i0 * d1 + i1).
    const uint64_t i0 = r / d1, i1 = r % d1;
    size_t at = first_stat;
    if (s.mean) {
      ASSERT_NEAR(images[at++].get(*s.mean, 0, i0, i1), mean,
                  u * std::fabs(mean) + 1e-6);
    }
    if (s.rstd) {
      ASSERT_NEAR(images[at].get(*s.rstd, 0, i0, i1), rstd, u * rstd + 1e-6);
    }
  }
}

class NormBuilder : public ::testing::TestWithParam<DType> {};

TEST_P(NormBuilder, LayerNormAffineWithStats) {
  check_norm(GetParam(), false, true, true, true);
}
TEST_P(NormBuilder, LayerNormPlain) {
  check_norm(GetParam(), false, false, false, false);
}
TEST_P(NormBuilder, LayerNormWeightOnly) {
  check_norm(GetParam(), false, true, false, false);
}
TEST_P(NormBuilder, RmsNormWithWeightAndRstd) {
  check_norm(GetParam(), true, true, false, true);
}
TEST_P(NormBuilder, RmsNormPlain) {
  check_norm(GetParam(), true, false, false, false);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, NormBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(NormBuilderErrors, RmsHasNoBiasAndWeightMustMatch) {
  kernels::NormShape s;
  s.in = s.out = Matrix::stick_columns(4, 10, DType::kFloat16);
  s.bias = vector_of(10, DType::kFloat16);
  kernels::NormOptions o;
  o.target = sim_target();
  o.rms = true;
  EXPECT_THROW(kernels::build_norm(s, o), kernels::KernelBuildError);
  s.bias.reset();
  s.weight = vector_of(9, DType::kFloat16);
  EXPECT_THROW(kernels::build_norm(s, o), kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
