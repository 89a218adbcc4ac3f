// The kernel library's program builders (kernels/) run end to end on
// the emulator device and match double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "sim_test_util.h"
#include "spyre/kernels/matmul.h"
#include "spyre/kernels/softmax.h"
#include "spyre/runtime/half.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using kernels::MatrixKind;
using rt::DType;

// Unit roundoff of a floating dtype: the relative error of one rounding.
double unit_roundoff(DType t) {
  switch (t) {
    case DType::kFloat16:
      return std::ldexp(1.0, -11);
    case DType::kBFloat16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

// Half the smallest subnormal: the absolute error of rounding a value too
// small for the dtype (softmax tails underflow in fp16).
double underflow_error(DType t) {
  switch (t) {
    case DType::kFloat16:
      return std::ldexp(1.0, -25);
    case DType::kBFloat16:
      return std::ldexp(1.0, -134);
    default:
      return std::ldexp(1.0, -150);
  }
}

// A matrix's values on the host and its bytes in the device layout.
struct HostMatrix {
  Matrix m;
  std::vector<double> values;  // rows x cols, exactly representable

  explicit HostMatrix(const Matrix& matrix)
      : m(matrix), values(matrix.rows * matrix.cols, 0) {}

  uint64_t byte_offset(uint64_t r, uint64_t c) const {
    const uint64_t e = m.elements_per_stick();
    const uint64_t size = rt::element_size(m.dtype);
    if (m.kind == MatrixKind::kStickColumns) {
      return ((c / e) * m.rows + r) * rt::kStickBytes + (c % e) * size;
    }
    return r * m.pitch() + c * size;
  }

  // Fills with uniform values in [lo, hi), rounded to the dtype.
  void randomize(uint32_t seed, double lo, double hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(static_cast<float>(lo),
                                               static_cast<float>(hi));
    for (double& v : values) v = decode(encode(dist(gen)));
  }

  uint32_t encode(float v) const {
    if (m.dtype == DType::kFloat16) return rt::float_to_fp16(v);
    if (m.dtype == DType::kBFloat16) return rt::float_to_bf16(v);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return bits;
  }
  double decode(uint32_t bits) const {
    if (m.dtype == DType::kFloat16) {
      return rt::fp16_to_float(static_cast<uint16_t>(bits));
    }
    if (m.dtype == DType::kBFloat16) {
      return rt::bf16_to_float(static_cast<uint16_t>(bits));
    }
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }

  std::vector<uint8_t> device_bytes() const {
    std::vector<uint8_t> out(m.bytes(), 0);
    const uint32_t size = rt::element_size(m.dtype);
    for (uint64_t r = 0; r < m.rows; ++r) {
      for (uint64_t c = 0; c < m.cols; ++c) {
        uint32_t bits = encode(static_cast<float>(values[r * m.cols + c]));
        std::memcpy(out.data() + byte_offset(r, c), &bits, size);
      }
    }
    return out;
  }

  void read_device_bytes(const std::vector<uint8_t>& bytes) {
    const uint32_t size = rt::element_size(m.dtype);
    for (uint64_t r = 0; r < m.rows; ++r) {
      for (uint64_t c = 0; c < m.cols; ++c) {
        uint32_t bits = 0;
        std::memcpy(&bits, bytes.data() + byte_offset(r, c), size);
        values[r * m.cols + c] = decode(bits);
      }
    }
  }
  double at(uint64_t r, uint64_t c) const { return values[r * m.cols + c]; }
};

size_t count_accumulating_matmuls(const rt::Program& p) {
  size_t n = 0;
  for (const rt::CoreProgram& core : p.cores) {
    for (const rt::Instruction& inst : core.instructions) {
      if (auto* mm = std::get_if<rt::MatMul>(&inst); mm && mm->accumulate) ++n;
    }
  }
  return n;
}

// ---- matmul
// ------------------------------------------------------------------

struct MatmulCase {
  const char* name;
  uint64_t m, k, n;
  DType dtype;
  MatrixKind kind;
  uint32_t max_cores;
  uint64_t tile_k;  // 0: the planner's choice
};

void PrintTo(const MatmulCase& c, std::ostream* os) { *os << c.name; }

class SimLaunchMatmul : public ::testing::TestWithParam<MatmulCase> {};

// C = A @ B against a double reference of the same (rounded) inputs. Bound:
// fp32 accumulation of K products, |err| <= (K + 1) u32 sum_k |a b|, plus
// one rounding of C to its dtype, u_c |ref|.
TEST_P(SimLaunchMatmul, MatchesDoubleReference) {
  const MatmulCase& tc = GetParam();
  auto make = [&](uint64_t rows, uint64_t cols) {
    Matrix m{rows, cols, tc.dtype, tc.kind, 0};
    return m;
  };
  kernels::MatmulShape shape{make(tc.m, tc.k), make(tc.k, tc.n),
                             make(tc.m, tc.n)};
  kernels::MatmulOptions options;
  options.target = sim_target(tc.max_cores);
  kernels::MatmulPlan plan = kernels::plan_matmul(shape, options);
  if (tc.tile_k != 0) plan.tile_k = tc.tile_k;
  rt::Program program = kernels::build_matmul(shape, plan, options);
  if (tc.k > plan.tile_k) {
    // Regression: an accumulating MatMul reads and writes C; it once
    // depended on itself and every such program deadlocked at prepare.
    EXPECT_GT(count_accumulating_matmuls(program), 0u) << plan.describe();
  }

  HostMatrix a(shape.a), b(shape.b), c(shape.c);
  a.randomize(1, -1, 1);
  b.randomize(2, -1, 1);
  auto device = small_device();
  Buffers buffers(*device, program);
  buffers.upload(0, a.device_bytes());
  buffers.upload(1, b.device_bytes());
  rt::LaunchStats stats = run(*device, program, buffers);
  c.read_device_bytes(buffers.download<uint8_t>(2));

  const double u32 = std::ldexp(1.0, -24);
  const double uc = unit_roundoff(tc.dtype);
  double worst = 0;  // error / allowed, over all elements
  for (uint64_t i = 0; i < tc.m; ++i) {
    for (uint64_t j = 0; j < tc.n; ++j) {
      double ref = 0, mag = 0;
      for (uint64_t k = 0; k < tc.k; ++k) {
        ref += a.at(i, k) * b.at(k, j);
        mag += std::abs(a.at(i, k) * b.at(k, j));
      }
      double allowed = (tc.k + 1) * u32 * mag + uc * std::abs(ref);
      double err = std::abs(c.at(i, j) - ref);
      worst = std::max(worst, err / allowed);
      ASSERT_LE(err, allowed)
          << "C[" << i << ", " << j << "] = " << c.at(i, j) << ", reference "
          << ref << "; " << plan.describe();
    }
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
  EXPECT_EQ(stats.dma_bytes > 0, true);
  EXPECT_GT(stats.matrix_utilization, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SimLaunchMatmul,
    ::testing::Values(
        // Ragged everywhere, K in four tiles of 64 (the last one 8 deep).
        MatmulCase{"fp16_ragged_ktiles", 77, 200, 130, DType::kFloat16,
                   MatrixKind::kRowMajor, 32, 64},
        // The planner's own tiles: K = 300 is two tiles (256 + 44).
        MatmulCase{"bf16_ragged_planned", 130, 300, 70, DType::kBFloat16,
                   MatrixKind::kRowMajor, 32, 0},
        MatmulCase{"fp32_stick_columns", 64, 96, 200, DType::kFloat32,
                   MatrixKind::kStickColumns, 32, 32},
        MatmulCase{"fp16_stick_columns_one_core", 45, 129, 65, DType::kFloat16,
                   MatrixKind::kStickColumns, 1, 64},
        MatmulCase{"fp16_multiples_of_64", 128, 128, 192, DType::kFloat16,
                   MatrixKind::kRowMajor, 4, 64},
        MatmulCase{"fp16_deep_k_32_cores", 256, 640, 384, DType::kFloat16,
                   MatrixKind::kRowMajor, 32, 0}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- softmax
// -----------------------------------------------------------------

struct SoftmaxCase {
  const char* name;
  uint64_t rows, cols;
  DType dtype;
  uint32_t max_cores;
};

void PrintTo(const SoftmaxCase& c, std::ostream* os) { *os << c.name; }

using SoftmaxParam =
    std::tuple<SoftmaxCase, kernels::SoftmaxSchedule, bool /*log*/>;

class SimLaunchSoftmax : public ::testing::TestWithParam<SoftmaxParam> {};

// Against a double reference of the same rounded inputs. The device works
// in fp32 and rounds once to the output dtype: allowed error is that one
// rounding, u_out |ref| (or half a subnormal where it underflows), plus
// the fp32 work: a sum of `cols` terms (cols u32 relative, the worst case of
// a recursive sum) and exp, divide or log (64 u32), relative to the
// magnitudes involved (|ref| for softmax; 1 + |ref| for log-softmax, whose
// x - max and log(sum) terms are O(1)).
TEST_P(SimLaunchSoftmax, MatchesDoubleReference) {
  const auto& [tc, schedule, log] = GetParam();
  const Matrix m = Matrix::row_major(tc.rows, tc.cols, tc.dtype);
  kernels::SoftmaxOptions options;
  options.target = sim_target(tc.max_cores);
  options.schedule = schedule;
  options.log = log;
  rt::Program program = kernels::build_softmax(m, m, options);

  HostMatrix in(m), out(m);
  in.randomize(7, -8, 8);
  auto device = small_device();
  Buffers buffers(*device, program);
  buffers.upload(0, in.device_bytes());
  rt::LaunchStats stats = run(*device, program, buffers);
  out.read_device_bytes(buffers.download<uint8_t>(1));

  const double u32 = std::ldexp(1.0, -24);
  const double uo = unit_roundoff(tc.dtype);
  double worst = 0;  // error / allowed, over all elements
  for (uint64_t r = 0; r < tc.rows; ++r) {
    double mx = -INFINITY, sum = 0;
    for (uint64_t c = 0; c < tc.cols; ++c) mx = std::max(mx, in.at(r, c));
    for (uint64_t c = 0; c < tc.cols; ++c) sum += std::exp(in.at(r, c) - mx);
    double row_total = 0;
    for (uint64_t c = 0; c < tc.cols; ++c) {
      double x = in.at(r, c) - mx;
      double ref = log ? x - std::log(sum) : std::exp(x) / sum;
      double scale = log ? 1 + std::abs(ref) : std::abs(ref);
      double allowed =
          uo * std::abs(ref) + underflow_error(tc.dtype) + 64 * u32 * scale;
      double got = out.at(r, c);
      worst = std::max(worst, std::abs(got - ref) / allowed);
      ASSERT_LE(std::abs(got - ref), allowed)
          << "row " << r << ", col " << c << ": got " << got << ", reference "
          << ref;
      row_total += log ? std::exp(got) : got;
    }
    // Each row is a distribution (within the output roundings).
    EXPECT_NEAR(row_total, 1.0, 4 * uo * std::sqrt(double(tc.cols)) + 1e-6)
        << "row " << r;
  }
  RecordProperty("worst_error_over_bound", std::to_string(worst));
  EXPECT_GT(stats.vector_utilization, 0.0);
  const uint64_t io =
      2 * tc.rows * kernels::padded_row_bytes(tc.cols, tc.dtype);
  if (schedule == kernels::SoftmaxSchedule::kStatsThroughDram) {
    EXPECT_GT(stats.dma_bytes, io) << "stats did not go through DRAM";
  } else {
    EXPECT_EQ(stats.dma_bytes, io) << "each input and output byte moves once";
  }
}

std::string softmax_name(const ::testing::TestParamInfo<SoftmaxParam>& info) {
  const auto& [tc, schedule, log] = info.param;
  const char* names[] = {"streamed", "stats_through_dram", "resident"};
  return std::string(tc.name) + "_" + names[static_cast<int>(schedule)] +
         (log ? "_log" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SimLaunchSoftmax,
    ::testing::Combine(
        ::testing::Values(
            // Ragged rows over 8 cores, narrow rows.
            SoftmaxCase{"fp16_70x300_8cores", 70, 300, DType::kFloat16, 8},
            SoftmaxCase{"bf16_33x130_3cores", 33, 130, DType::kBFloat16, 3},
            SoftmaxCase{"fp32_40x257_32cores", 40, 257, DType::kFloat32, 32},
            // Wide rows on one core: several row tiles per core.
            SoftmaxCase{"fp16_150x4000_1core", 150, 4000, DType::kFloat16, 1}),
        ::testing::Values(kernels::SoftmaxSchedule::kStreamed,
                          kernels::SoftmaxSchedule::kStatsThroughDram,
                          kernels::SoftmaxSchedule::kResident),
        ::testing::Bool()),
    softmax_name);

// ---- random fills
// ------------------------------------------------------------

// 4096 fp32 draws as one RandFill on one core, or split over `cores` cores
// with each core's counter offset at its first element.
std::vector<uint8_t> random_draws(rt::RandDist dist, uint32_t cores) {
  constexpr uint32_t kCount = 4096;
  const uint32_t per_core = kCount / cores;
  rt::Program p;
  p.name = "rand";
  p.args = {slot("out", kCount * 4, DType::kFloat32, true)};
  for (uint32_t c = 0; c < cores; ++c) {
    rt::RandFill fill;
    fill.dst = tile(0, DType::kFloat32, per_core * 4);
    fill.rows = 1;
    fill.cols = per_core;
    fill.dist = dist;
    fill.seed = 0x5eed0000feedULL;
    fill.offset = 1000 + uint64_t{c} * per_core;
    fill.a = dist == rt::RandDist::kNormal ? 1.0 : -3.0;
    fill.b = dist == rt::RandDist::kNormal ? 2.0 : 5.0;
    p.cores.push_back(
        core(c * 3, {fill, store(xfer(0, c * per_core * 4, 0, per_core * 4))}));
  }
  auto device = small_device();
  Buffers buffers(*device, p);
  run(*device, p, buffers);
  return buffers.download<uint8_t>(0);
}

TEST(SimLaunchRandom, DrawsDoNotDependOnHowCoresSplitTheWork) {
  for (rt::RandDist dist : {rt::RandDist::kUniform, rt::RandDist::kNormal}) {
    SCOPED_TRACE(static_cast<int>(dist));
    const std::vector<uint8_t> one = random_draws(dist, 1);
    EXPECT_EQ(random_draws(dist, 4), one);
    EXPECT_EQ(random_draws(dist, 8), one);
    // And they are draws from the asked distribution, not a constant.
    std::vector<float> v(one.size() / 4);
    std::memcpy(v.data(), one.data(), one.size());
    double mean = 0, sq = 0;
    for (float x : v) mean += x / v.size();
    for (float x : v) sq += (x - mean) * (x - mean) / v.size();
    if (dist == rt::RandDist::kUniform) {
      for (float x : v) ASSERT_TRUE(x >= -3.0f && x < 5.0f) << x;
      EXPECT_NEAR(mean, 1.0, 0.15);                 // (a + b) / 2, 4096 draws
      EXPECT_NEAR(sq, 64.0 / 12, 64.0 / 12 * 0.1);  // (b - a)^2 / 12
    } else {
      EXPECT_NEAR(mean, 1.0, 0.1);  // std 2 / sqrt(4096) = 0.03
      EXPECT_NEAR(std::sqrt(sq), 2.0, 0.1);
    }
  }
}

}  // namespace
}  // namespace spyre::sim::test
