// Matmul epilogues (spyre/kernels/matmul.h): C = act(alpha * A @ B + beta *
// bias) computed on the output tile in the scratchpad before the store, on
// the emulator, against a double-precision reference of the rounded inputs.
// fp16 and bf16, ragged shapes, both lowerings, transposed operands.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_library_util.h"
#include "spyre/kernels/matmul.h"

namespace spyre::sim::test {
namespace {

using kernels::Activation;
using kernels::MatmulLowering;
using kernels::MatmulShape;
using kernels::Matrix;
using rt::DType;

constexpr int64_t kStick = rt::kStickBytes;

double activate(Activation act, double x) {
  switch (act) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh: {
      const double inner = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1 + std::tanh(inner));
    }
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
  }
  return x;
}

// Dense [batch][rows][cols] doubles of a matrix image.
std::vector<double> dense(Image& image, const Matrix& m) {
  std::vector<double> out;
  out.reserve(m.batch_count() * m.rows * m.cols);
  for (uint64_t b = 0; b < m.batch_count(); ++b) {
    for (uint64_t r = 0; r < m.rows; ++r) {
      for (uint64_t c = 0; c < m.cols; ++c)
        out.push_back(image.get(m, b, r, c));
    }
  }
  return out;
}

// Runs the shape with `lowering` and checks every element of C.
void check_epilogue(const MatmulShape& s,
                    MatmulLowering lowering = MatmulLowering::kPlanned,
                    uint32_t max_cores = 0) {
  kernels::MatmulOptions options;
  options.target = sim_target(max_cores);
  options.lowering = lowering;
  const kernels::MatmulPlan plan = kernels::plan_matmul(s, options);
  SCOPED_TRACE(plan.describe());
  SCOPED_TRACE(kernels::activation_name(s.activation));
  const rt::Program program = kernels::build_matmul(s, plan, options);
  auto device = small_device();
  std::mt19937 rng(11);
  std::vector<Image> images;
  images.emplace_back(s.a.bytes());
  images.emplace_back(s.b.bytes());
  images.emplace_back(s.c.bytes());
  images[0].fill(s.a, rng, -1.5, 1.5);
  images[1].fill(s.b, rng, -1, 1);
  if (s.bias) {
    images.emplace_back(s.bias->bytes());
    images[3].fill(*s.bias, rng, -2, 2);
  }
  const std::vector<double> a = dense(images[0], s.a);
  const std::vector<double> b = dense(images[1], s.b);
  std::vector<Image> before = images;
  run_images(*device, program, images);
  const uint64_t M = s.m(), N = s.n(), K = s.k();
  const double u = unit_roundoff(s.c.dtype);
  for (uint64_t batch = 0; batch < s.batch_count(); ++batch) {
    const double* ab = a.data() + batch * s.a.rows * s.a.cols;
    const double* bb = b.data() + batch * s.b.rows * s.b.cols;
    for (uint64_t m = 0; m < M; ++m) {
      for (uint64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (uint64_t k = 0; k < K; ++k) {
          const double x =
              s.a_transposed ? ab[k * s.a.cols + m] : ab[m * s.a.cols + k];
          const double y =
              s.b_transposed ? bb[n * s.b.cols + k] : bb[k * s.b.cols + n];
          acc += x * y;
        }
        double pre = s.alpha * acc;
        if (s.bias && s.beta != 0) {
          pre += s.beta * before[3].get(*s.bias, batch, m, n);
        }
        const double want = activate(s.activation, pre);
        const double got = images[2].get(s.c, batch, m, n);
        // One rounding of the output; fp32 accumulation and fp32 activation
        // (slope at most ~1.13 for gelu, 1.1 for silu) before it.
        const double tol =
            u * std::fabs(want) + 1.2 * (2e-6 * static_cast<double>(K) + 4e-6) *
                                      std::max(1.0, std::fabs(pre));
        ASSERT_NEAR(got, want, tol)
            << "batch " << batch << " C[" << m << ", " << n << "]";
      }
    }
  }
}

struct Param {
  DType dtype;
  Activation act;
};

class MatmulEpilogue : public ::testing::TestWithParam<Param> {};

// A linear layer over ragged sizes: x [77, 150] @ W^T (W stored [130, 150])
// + b[130] broadcast over the rows, then the activation.
TEST_P(MatmulEpilogue, LinearBiasActivationRagged) {
  const auto [t, act] = GetParam();
  MatmulShape s{Matrix::stick_columns(77, 150, t),
                Matrix::stick_columns(130, 150, t),
                Matrix::stick_columns(77, 130, t)};
  s.b_transposed = true;
  s.bias = Matrix::strided(t, 0, {{77, 0}}, 130, kStick);
  s.activation = act;
  check_epilogue(s);
}

// Several output tiles and epilogue chunks per core (few cores, tall
// blocks), row-major operands, no bias: the activation alone.
TEST_P(MatmulEpilogue, ActivationOnlyManyChunksFewCores) {
  const auto [t, act] = GetParam();
  MatmulShape s{Matrix::row_major(300, 70, t), Matrix::row_major(70, 200, t),
                Matrix::row_major(300, 200, t)};
  s.activation = act;
  check_epilogue(s, MatmulLowering::kPlanned, 2);
}

// A full (non-broadcast) bias with alpha and beta, A stored transposed.
TEST_P(MatmulEpilogue, FullBiasScaledTransposedA) {
  const auto [t, act] = GetParam();
  MatmulShape s{Matrix::stick_columns(90, 45, t),
                Matrix::stick_columns(90, 100, t),
                Matrix::stick_columns(45, 100, t)};
  s.a_transposed = true;
  s.bias = Matrix::stick_columns(45, 100, t);
  s.alpha = 0.75;
  s.beta = -1.5;
  s.activation = act;
  check_epilogue(s);
}

// The naive lowering runs the same epilogue code on its own tiles.
TEST_P(MatmulEpilogue, NaiveLoweringSameEpilogue) {
  const auto [t, act] = GetParam();
  MatmulShape s{Matrix::stick_columns(70, 130, t),
                Matrix::stick_columns(100, 130, t),
                Matrix::stick_columns(70, 100, t)};
  s.b_transposed = true;
  s.bias = Matrix::strided(t, 0, {{70, 0}}, 100, kStick);
  s.activation = act;
  check_epilogue(s, MatmulLowering::kNaive);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    for (Activation a :
         {Activation::kNone, Activation::kRelu, Activation::kGelu,
          Activation::kGeluTanh, Activation::kSilu}) {
      out.push_back({t, a});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(DtypesActivations, MatmulEpilogue,
                         ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(
                                      rt::dtype_name(info.param.dtype)) +
                                  "_" +
                                  kernels::activation_name(info.param.act);
                         });

// fp32 operands: the epilogue and the activation in the same program.
TEST(MatmulEpilogueFp32, BatchedBiasGelu) {
  const DType t = DType::kFloat32;
  MatmulShape s{Matrix::stick_columns(33, 40, t),
                Matrix::stick_columns(40, 50, t),
                Matrix::stick_columns(33, 50, t)};
  s.a.batch_dims = {{3, static_cast<int64_t>(s.a.bytes())}};
  s.b.batch_dims = {{3, 0}};
  s.c.batch_dims = {{3, static_cast<int64_t>(s.c.bytes())}};
  Matrix bias = Matrix::strided(t, 0, {{33, 0}}, 50, kStick);
  bias.batch_dims = {{3, 0}};
  s.bias = bias;
  s.activation = Activation::kGelu;
  check_epilogue(s);
}

TEST(MatmulEpilogueErrors, ActivationNeedsFloatingOutput) {
  const DType t = DType::kInt8;
  MatmulShape s{Matrix::stick_columns(4, 5, t), Matrix::stick_columns(5, 7, t),
                Matrix::stick_columns(4, 7, DType::kInt32)};
  s.activation = Activation::kRelu;
  EXPECT_THROW(kernels::plan_matmul(s, {sim_target()}),
               kernels::KernelBuildError);
}

TEST(MatmulEpilogueErrors, ScratchpadTooSmallIsACompileError) {
  const DType t = DType::kFloat16;
  MatmulShape s{Matrix::stick_columns(64, 64, t),
                Matrix::stick_columns(64, 64, t),
                Matrix::stick_columns(64, 64, t)};
  kernels::MatmulOptions o;
  o.target = sim_target();
  o.target.chip.scratchpad_bytes = o.target.chip.scratchpad_reserve + 4096;
  try {
    kernels::plan_matmul(s, o);
    FAIL() << "a plan was found for a 4 KiB scratchpad";
  } catch (const kernels::KernelBuildError& e) {
    EXPECT_NE(std::string(e.what()).find("scratchpad"), std::string::npos)
        << e.what();
  }
}

// The planned lowering is never slower than the naive one in the model's own
// estimate, and the chosen plan fits the scratchpad.
TEST(MatmulPlanner, PlannedEstimateBeatsNaive) {
  const DType t = DType::kFloat16;
  for (auto [m, k, n] : {std::array<uint64_t, 3>{1000, 1000, 1000},
                         {8000, 200, 72},
                         {24, 4096, 4000},
                         {4096, 4096, 4096}}) {
    MatmulShape s{Matrix::stick_columns(m, k, t),
                  Matrix::stick_columns(k, n, t),
                  Matrix::stick_columns(m, n, t)};
    kernels::MatmulOptions naive_options;
    naive_options.target = sim_target();
    naive_options.lowering = MatmulLowering::kNaive;
    const auto planned = kernels::plan_matmul(s, {sim_target()});
    const auto naive = kernels::plan_matmul(s, naive_options);
    EXPECT_LT(planned.estimated_cycles, naive.estimated_cycles)
        << m << "x" << k << "x" << n << ": " << planned.describe() << " vs "
        << naive.describe();
    EXPECT_FALSE(naive.share_reads);
    EXPECT_EQ(naive.grid_n, 1u);
  }
}

}  // namespace
}  // namespace spyre::sim::test
