// The fused MLP builder (spyre/kernels/mlp.h) on the emulator against a
// double-precision reference: y = act(x @ W_up + b_up) @ W_down + b_down,
// with the intermediate rounded to x's dtype as the device keeps it. The
// unfused pair of matmul programs (intermediate in device memory) is checked
// against the same reference.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_library_util.h"
#include "spyre/kernels/mlp.h"

namespace spyre::sim::test {
namespace {

using kernels::Activation;
using kernels::Matrix;
using kernels::MlpShape;
using rt::DType;

double activate(Activation act, double x) {
  switch (act) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:
      return x > 0 ? x : 0;
    case Activation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh:
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::kSilu:
      return x / (1 + std::exp(-x));
  }
  return x;
}

MlpShape make_shape(uint64_t m, uint64_t d, uint64_t h, uint64_t e, DType t,
                    bool transposed_weights, bool biases, Activation act) {
  MlpShape s;
  s.x = Matrix::stick_columns(m, d, t);
  s.w_up = transposed_weights ? Matrix::stick_columns(h, d, t)
                              : Matrix::stick_columns(d, h, t);
  s.w_down = transposed_weights ? Matrix::stick_columns(e, h, t)
                                : Matrix::stick_columns(h, e, t);
  s.w_up_transposed = s.w_down_transposed = transposed_weights;
  s.y = Matrix::stick_columns(m, e, t);
  if (biases) {
    s.b_up = Matrix::row_major(1, h, t);
    s.b_down = Matrix::row_major(1, e, t);
  }
  s.activation = act;
  return s;
}

struct Inputs {
  std::vector<Image> images;  // x, w_up, w_down, y, [b_up], [b_down]
};

Inputs random_inputs(const MlpShape& s) {
  std::mt19937 rng(5);
  Inputs in;
  in.images.emplace_back(s.x.bytes());
  in.images.emplace_back(s.w_up.bytes());
  in.images.emplace_back(s.w_down.bytes());
  in.images.emplace_back(s.y.bytes());
  in.images[0].fill(s.x, rng, -1, 1);
  // Weights scaled like an initialised layer (1/sqrt(fan_in)).
  const double up = 1.5 / std::sqrt(static_cast<double>(s.d()));
  const double down = 1.5 / std::sqrt(static_cast<double>(s.h()));
  in.images[1].fill(s.w_up, rng, -up, up);
  in.images[2].fill(s.w_down, rng, -down, down);
  if (s.b_up) {
    in.images.emplace_back(s.b_up->bytes());
    in.images.back().fill(*s.b_up, rng, -0.5, 0.5);
  }
  if (s.b_down) {
    in.images.emplace_back(s.b_down->bytes());
    in.images.back().fill(*s.b_down, rng, -0.5, 0.5);
  }
  return in;
}

// Checks y (read through `y_image`) against the reference of `in`.
void check_output(const MlpShape& s, Inputs& in, Image& y_image) {
  const DType t = s.x.dtype;
  const double u = unit_roundoff(t);
  Image& x = in.images[0];
  Image& wu = in.images[1];
  Image& wd = in.images[2];
  Image* bu = s.b_up ? &in.images[4] : nullptr;
  Image* bd = s.b_down ? &in.images[s.b_up ? 5 : 4] : nullptr;
  auto w_up = [&](uint64_t k, uint64_t n) {
    return s.w_up_transposed ? wu.get(s.w_up, 0, n, k)
                             : wu.get(s.w_up, 0, k, n);
  };
  auto w_down = [&](uint64_t k, uint64_t n) {
    return s.w_down_transposed ? wd.get(s.w_down, 0, n, k)
                               : wd.get(s.w_down, 0, k, n);
  };
  std::vector<double> h(s.h());
  for (uint64_t m = 0; m < s.m(); ++m) {
    for (uint64_t j = 0; j < s.h(); ++j) {
      double acc = 0;
      for (uint64_t k = 0; k < s.d(); ++k)
        acc += x.get(s.x, 0, m, k) * w_up(k, j);
      if (bu) acc += bu->get(*s.b_up, 0, 0, j);
      h[j] = round_to(t, activate(s.activation, acc));
    }
    for (uint64_t n = 0; n < s.e(); ++n) {
      double want = 0, magnitude = 0;
      for (uint64_t j = 0; j < s.h(); ++j) {
        want += h[j] * w_down(j, n);
        magnitude += std::fabs(h[j] * w_down(j, n));
      }
      if (bd) want += bd->get(*s.b_down, 0, 0, n);
      const double got = y_image.get(s.y, 0, m, n);
      // Output rounding; each h element may sit one rounding away from the
      // reference's (fp32 vs double activation); fp32 accumulation.
      const double tol = u * std::fabs(want) + 1.01 * u * magnitude +
                         2e-6 * static_cast<double>(s.d() + s.h()) + 1e-6;
      ASSERT_NEAR(got, want, tol) << "y[" << m << ", " << n << "]";
    }
  }
}

void check_fused(const MlpShape& s, uint32_t max_cores = 0) {
  kernels::MlpOptions options;
  options.target = sim_target(max_cores);
  const kernels::MlpPlan plan = kernels::plan_mlp(s, options);
  SCOPED_TRACE(plan.describe());
  const rt::Program program = kernels::build_mlp(s, plan, options);
  auto device = small_device();
  Inputs in = random_inputs(s);
  std::vector<Image> run = in.images;
  run_images(*device, program, run);
  check_output(s, in, run[3]);
}

void check_unfused(const MlpShape& s) {
  const kernels::UnfusedMlp u = kernels::unfused_mlp(s);
  auto device = small_device();
  Inputs in = random_inputs(s);
  // Slots of the two programs: up (x, w_up, h, b_up), down (h, w_down, y,
  // b_down); h is one device buffer shared by both.
  const rt::Program up = kernels::build_matmul(
      u.up, kernels::plan_matmul(u.up, {sim_target()}), {sim_target()});
  const rt::Program down = kernels::build_matmul(
      u.down, kernels::plan_matmul(u.down, {sim_target()}), {sim_target()});
  std::vector<Image> up_images = {in.images[0], in.images[1],
                                  Image(u.h.bytes())};
  if (s.b_up) up_images.push_back(in.images[4]);
  run_images(*device, up, up_images);
  std::vector<Image> down_images = {up_images[2], in.images[2], in.images[3]};
  if (s.b_down) down_images.push_back(in.images[s.b_up ? 5 : 4]);
  run_images(*device, down, down_images);
  check_output(s, in, down_images[2]);
}

struct Param {
  DType dtype;
  Activation act;
  bool transposed;
};

class MlpBuilder : public ::testing::TestWithParam<Param> {};

// Ragged everything: 150 rows over 32 cores (16-row blocks, one short),
// D 100, H 200, E 72, with biases.
TEST_P(MlpBuilder, RaggedWithBiases) {
  const auto [t, act, tr] = GetParam();
  check_fused(make_shape(150, 100, 200, 72, t, tr, true, act));
}

// Two cores, several passes per core: the smallest scratchpad that takes
// 16 resident rows forces each core's 48 rows through in passes. No biases.
TEST_P(MlpBuilder, SeveralPassesNoBias) {
  const auto [t, act, tr] = GetParam();
  MlpShape s = make_shape(96, 64, 520, 130, t, tr, false, act);
  kernels::MlpOptions options;
  options.target = sim_target(2);
  kernels::MlpPlan plan;
  // The smallest scratchpad (4 KiB steps above the reserve) a plan fits.
  rt::ChipFigures& chip = options.target.chip;
  for (chip.scratchpad_bytes = chip.scratchpad_reserve + 4096;;
       chip.scratchpad_bytes += 4096) {
    ASSERT_LT(chip.scratchpad_bytes, sim_target().chip.scratchpad_bytes);
    try {
      plan = kernels::plan_mlp(s, options);
      break;
    } catch (const kernels::KernelBuildError&) {
    }
  }
  EXPECT_LT(plan.pass_m, plan.block_m) << plan.describe();
  auto device = small_device();
  Inputs in = random_inputs(s);
  std::vector<Image> run = in.images;
  run_images(*device, kernels::build_mlp(s, plan, options), run);
  check_output(s, in, run[3]);
}

TEST_P(MlpBuilder, UnfusedPairAgrees) {
  const auto [t, act, tr] = GetParam();
  check_unfused(make_shape(70, 100, 130, 64, t, tr, true, act));
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (DType t : {DType::kFloat16, DType::kBFloat16}) {
    for (Activation a : {Activation::kGelu, Activation::kGeluTanh,
                         Activation::kSilu, Activation::kRelu}) {
      out.push_back({t, a, a == Activation::kGelu || a == Activation::kRelu});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    DtypesActivations, MlpBuilder, ::testing::ValuesIn(params()),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(rt::dtype_name(info.param.dtype)) + "_" +
             kernels::activation_name(info.param.act) +
             (info.param.transposed ? "_linear_weights" : "");
    });

TEST(MlpBuilderErrors, ShapesMustAgree) {
  MlpShape s = make_shape(8, 16, 32, 16, DType::kFloat16, false, true,
                          Activation::kGelu);
  s.w_down = Matrix::stick_columns(31, 16, DType::kFloat16);
  EXPECT_THROW(kernels::plan_mlp(s, {sim_target()}), kernels::KernelBuildError);
  s = make_shape(8, 16, 32, 16, DType::kFloat16, false, true,
                 Activation::kGelu);
  s.b_up = Matrix::row_major(2, 32, DType::kFloat16);
  EXPECT_THROW(kernels::plan_mlp(s, {sim_target()}), kernels::KernelBuildError);
}

TEST(MlpBuilderErrors, IntermediateTooWideIsACompileError) {
  // 16 rows of a 65536-wide intermediate need 2 MiB alone.
  MlpShape s = make_shape(16, 64, 65536, 64, DType::kFloat16, false, false,
                          Activation::kRelu);
  try {
    kernels::plan_mlp(s, {sim_target()});
    FAIL() << "a plan was found";
  } catch (const kernels::KernelBuildError& e) {
    EXPECT_NE(std::string(e.what()).find("two matmuls"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace spyre::sim::test
