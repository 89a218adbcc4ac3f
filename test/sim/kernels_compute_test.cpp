// Reduce, RandFill and MatMul kernels against plain references.
#include <cblas.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "kernels_test_util.h"

namespace spyre::sim::test {
namespace {

using rt::DType;
using rt::RedOp;

// ---- Reduce ----------------------------------------------------------------

double ref_reduce(RedOp op, const std::vector<double>& x) {
  double acc = op == RedOp::kProd ? 1 : (op == RedOp::kSum ? 0 : x[0]);
  size_t best = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    switch (op) {
      case RedOp::kSum:
        acc += x[i];
        break;
      case RedOp::kProd:
        acc *= x[i];
        break;
      case RedOp::kMax:
      case RedOp::kArgMax:
        if (x[i] > x[best]) best = i;
        break;
      case RedOp::kMin:
      case RedOp::kArgMin:
        if (x[i] < x[best]) best = i;
        break;
    }
  }
  if (op == RedOp::kArgMax || op == RedOp::kArgMin)
    return static_cast<double>(best);
  if (op == RedOp::kMax || op == RedOp::kMin) return x[best];
  return acc;
}

class ReduceTest : public ::testing::TestWithParam<DType> {};

TEST_P(ReduceTest, EveryOpMatchesReference) {
  DType dt = GetParam();
  const uint32_t rows = 6, cols = 301;
  for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kMin, RedOp::kArgMax,
                   RedOp::kArgMin, RedOp::kProd}) {
    SCOPED_TRACE(static_cast<int>(op));
    Spad spad;
    rt::Reduce red;
    red.op = op;
    red.rows = rows;
    red.cols = cols;
    red.index_base = 1000;
    red.src = row_major(0, dt, cols);
    bool arg = op == RedOp::kArgMax || op == RedOp::kArgMin;
    red.dst = rt::Tile{256 * 1024, arg ? DType::kInt64 : dt, 8, 0};
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        double v = static_cast<int>((c * 37 + r * 11) % 53) - 26;
        if (op == RedOp::kProd) {
          int step = static_cast<int>((c + r) % 5) - 2;
          v = rt::is_floating(dt) ? 1.0 + step * 0.002 : (step == 0 ? -1 : 1);
        }
        if (rt::is_floating(dt) && op != RedOp::kProd) v *= 0.125;
        spad.put(red.src, r, c, v);
      }
    }
    run_reduce(red, spad.span());
    for (uint32_t r = 0; r < rows; ++r) {
      std::vector<double> x(cols);
      for (uint32_t c = 0; c < cols; ++c) x[c] = spad.get(red.src, r, c);
      double want = ref_reduce(op, x);
      if (arg) want += 1000;
      double got = spad.get(red.dst, r, 0);
      // fp32 accumulation: relative error at most about cols * 2^-24.
      double tol = rt::is_floating(dt) ? std::fabs(want) * cols * 6e-8 : 0;
      if (dt != DType::kFloat32 && !arg) want = round_to(dt, want);
      EXPECT_NEAR(got, want, tol) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ReduceTest,
                         ::testing::Values(DType::kFloat32, DType::kFloat16,
                                           DType::kBFloat16, DType::kInt32,
                                           DType::kInt8));

TEST(Reduce, NanWinsAndFirstIndexOnTies) {
  Spad spad;
  rt::Reduce red;
  red.rows = 2;
  red.cols = 6;
  red.src = row_major(0, DType::kFloat32, 6);
  red.dst = rt::Tile{4096, DType::kInt64, 8, 0};
  const float rows[2][6] = {{1, 5, 5, std::nanf(""), 2, std::nanf("")},
                            {3, 7, 1, 7, 1, 2}};
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 6; ++c) spad.put(red.src, r, c, rows[r][c]);
  }
  red.op = RedOp::kArgMax;
  run_reduce(red, spad.span());
  EXPECT_EQ(spad.get(red.dst, 0, 0), 3);  // first NaN
  EXPECT_EQ(spad.get(red.dst, 1, 0), 1);  // first of the tied maxima
  red.op = RedOp::kArgMin;
  run_reduce(red, spad.span());
  EXPECT_EQ(spad.get(red.dst, 0, 0), 3);
  EXPECT_EQ(spad.get(red.dst, 1, 0), 2);
  red.op = RedOp::kMax;
  red.dst.dtype = DType::kFloat32;
  run_reduce(red, spad.span());
  EXPECT_TRUE(std::isnan(spad.get(red.dst, 0, 0)));
  EXPECT_EQ(spad.get(red.dst, 1, 0), 7);
}

TEST(Reduce, TransposedSourceGivesTheBitsOfItsRowMajorCopy) {
  const uint32_t rows = 37, cols = 45;
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (RedOp op : {RedOp::kSum, RedOp::kMax, RedOp::kMin, RedOp::kArgMax,
                     RedOp::kArgMin, RedOp::kProd}) {
      SCOPED_TRACE(static_cast<int>(op));
      Spad spad;
      const int32_t es = static_cast<int32_t>(rt::element_size(dt));
      const rt::Tile transposed{0, dt, es,
                                static_cast<int32_t>(rt::round_up_to_sticks(
                                    uint64_t{rows} * rt::element_size(dt)))};
      const rt::Tile plain = row_major(256 * 1024, dt, cols);
      for (uint32_t r = 0; r < rows; ++r) {
        for (uint32_t c = 0; c < cols; ++c) {
          double v =
              std::sin(r * 0.7 + c * 1.3) * (op == RedOp::kProd ? 0.01 : 9);
          if (op == RedOp::kProd) v += 1;
          if (r == 5 && c == 17) v = std::nan("");
          spad.put(transposed, r, c, v);
          spad.put(plain, r, c, v);
        }
      }
      const bool arg = op == RedOp::kArgMax || op == RedOp::kArgMin;
      rt::Reduce red;
      red.op = op;
      red.rows = rows;
      red.cols = cols;
      red.src = transposed;
      red.dst = rt::Tile{512 * 1024, arg ? DType::kInt64 : dt, 8, 0};
      run_reduce(red, spad.span());
      red.src = plain;
      red.dst.offset = 600 * 1024;
      run_reduce(red, spad.span());
      for (uint32_t r = 0; r < rows; ++r) {
        EXPECT_EQ(std::memcmp(spad.bytes.data() + 512 * 1024 + r * 8,
                              spad.bytes.data() + 600 * 1024 + r * 8, 8),
                  0)
            << "row " << r;
      }
    }
  }
}

TEST(Reduce, AccumulateFoldsExistingDst) {
  Spad spad;
  rt::Reduce red;
  red.op = RedOp::kSum;
  red.rows = 1;
  red.cols = 100;
  red.accumulate = true;
  red.src = row_major(0, DType::kFloat16, 100);
  red.dst = rt::Tile{4096, DType::kFloat32, 4, 0};
  for (int c = 0; c < 100; ++c) spad.put(red.src, 0, c, 0.5);
  spad.put(red.dst, 0, 0, 10);
  run_reduce(red, spad.span());
  EXPECT_EQ(spad.get(red.dst, 0, 0), 60);
  red.op = RedOp::kMax;
  run_reduce(red, spad.span());
  EXPECT_EQ(spad.get(red.dst, 0, 0), 60);
  red.op = RedOp::kArgMax;
  EXPECT_THROW(run_reduce(red, spad.span()), rt::Error);
  red.op = RedOp::kSum;
  red.src.offset = static_cast<uint32_t>(kSpadBytes - 64);
  try {
    run_reduce(red, spad.span());
    FAIL();
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.code(), rt::ErrorCode::kDeviceError);
    EXPECT_NE(std::string(e.what()).find("reduce src"), std::string::npos);
  }
}

// ---- RandFill --------------------------------------------------------------

TEST(Philox, Random123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                          {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

std::vector<double> draw(rt::RandDist dist, DType dt, uint32_t count, double a,
                         double b) {
  Spad spad;
  const uint32_t cols = 1000;
  rt::RandFill fill;
  fill.rows = count / cols;
  fill.cols = cols;
  fill.dist = dist;
  fill.seed = 42;
  fill.offset = 7;
  fill.a = a;
  fill.b = b;
  fill.dst = rt::Tile{0, dt, static_cast<int32_t>(cols * rt::element_size(dt)),
                      static_cast<int32_t>(rt::element_size(dt))};
  run_rand(fill, spad.span());
  std::vector<double> out;
  for (uint32_t r = 0; r < fill.rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) out.push_back(spad.get(fill.dst, r, c));
  }
  return out;
}

TEST(RandFill, UniformMomentsAndOpenBound) {
  for (DType dt : {DType::kFloat32, DType::kFloat16}) {
    auto x = draw(rt::RandDist::kUniform, dt, 100000, -1, 3);
    double mean = 0, var = 0;
    for (double v : x) {
      ASSERT_GE(v, -1);
      ASSERT_LT(v, 3);
      mean += v;
    }
    mean /= x.size();
    for (double v : x) var += (v - mean) * (v - mean);
    var /= x.size();
    EXPECT_NEAR(mean, 1.0, 0.02);  // sd of the mean ~0.0037
    EXPECT_NEAR(var, 16.0 / 12.0, 0.03);
  }
}

TEST(RandFill, NormalMoments) {
  auto x = draw(rt::RandDist::kNormal, DType::kFloat32, 100000, 2, 0.5);
  double mean = 0, var = 0, m4 = 0;
  for (double v : x) mean += v;
  mean /= x.size();
  for (double v : x) {
    var += (v - mean) * (v - mean);
    m4 += std::pow((v - mean) / 0.5, 4);
  }
  var /= x.size();
  m4 /= x.size();
  EXPECT_NEAR(mean, 2.0, 0.01);
  EXPECT_NEAR(var, 0.25, 0.006);
  EXPECT_NEAR(m4, 3.0, 0.1);  // normal kurtosis
}

TEST(RandFill, SameValuesWhateverTheTileSplit) {
  Spad whole, parts;
  rt::RandFill fill;
  fill.rows = 4;
  fill.cols = 50;
  fill.dist = rt::RandDist::kNormal;
  fill.seed = 0xdeadbeefcafe;
  fill.offset = 1u << 20;
  fill.dst = rt::Tile{0, DType::kFloat32, 200, 4};
  run_rand(fill, whole.span());
  for (uint32_t r = 0; r < 4; ++r) {  // one row at a time, offsets advanced
    rt::RandFill row = fill;
    row.rows = 1;
    row.offset = fill.offset + r * 50;
    row.dst.offset = r * 200;
    run_rand(row, parts.span());
  }
  EXPECT_EQ(whole.bytes, parts.bytes);
  fill.seed += 1;
  run_rand(fill, parts.span());
  EXPECT_NE(whole.bytes, parts.bytes);
}

// ---- MatMul ----------------------------------------------------------------

struct MatMulCase {
  DType in;
  bool transpose_b;
};

void fill_operand(Spad& spad, const rt::Tile& t, uint32_t rows, uint32_t cols,
                  int seed) {
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t c = 0; c < cols; ++c) {
      int v = static_cast<int>((r * 131 + c * 71 + seed * 17) % 23) - 11;
      spad.put(t, r, c, t.dtype == DType::kInt8 ? v * 11 : v * 0.0625);
    }
  }
}

class MatMulTest : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulTest, MatchesReferenceWithAccumulate) {
  auto [in, transpose_b] = GetParam();
  const uint32_t m = 37, n = 45, k = 71;  // odd sizes
  DType out = in == DType::kInt8 ? DType::kInt32 : DType::kFloat32;
  uint32_t es = rt::element_size(in);
  Spad spad;
  rt::MatMul mm;
  mm.m = m;
  mm.n = n;
  mm.k = k;
  mm.a = row_major(0, in, k);
  // B either row-major or column-contiguous (its transpose stored row-major).
  mm.b = transpose_b
             ? rt::Tile{256 * 1024, in, static_cast<int32_t>(es),
                        static_cast<int32_t>(rt::round_up_to_sticks(k * es))}
             : row_major(256 * 1024, in, n);
  mm.c = row_major(512 * 1024, out, n);
  fill_operand(spad, mm.a, m, k, 1);
  fill_operand(spad, mm.b, k, n, 2);
  for (bool accumulate : {false, true}) {
    mm.accumulate = accumulate;
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j)
        spad.put(mm.c, i, j, accumulate ? double(i) - double(j) : 999);
    }
    run_matmul(mm, spad.span());
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        double want = accumulate ? double(i) - double(j) : 0;
        for (uint32_t p = 0; p < k; ++p)
          want += spad.get(mm.a, i, p) * spad.get(mm.b, p, j);
        // Products of these inputs are exact in fp32: the sum must be too.
        ASSERT_EQ(spad.get(mm.c, i, j), want) << i << "," << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatMulTest,
                         ::testing::Values(MatMulCase{DType::kFloat16, false},
                                           MatMulCase{DType::kFloat16, true},
                                           MatMulCase{DType::kBFloat16, false},
                                           MatMulCase{DType::kBFloat16, true},
                                           MatMulCase{DType::kFloat32, false},
                                           MatMulCase{DType::kFloat32, true},
                                           MatMulCase{DType::kInt8, false},
                                           MatMulCase{DType::kInt8, true}));

TEST(MatMul, StridedOutputAndErrors) {
  Spad spad;
  rt::MatMul mm;
  mm.m = 3;
  mm.n = 5;
  mm.k = 4;
  mm.a = row_major(0, DType::kFloat32, 4);
  mm.b = row_major(1024, DType::kFloat32, 5);
  mm.c =
      rt::Tile{4096, DType::kFloat32, 4, 64};  // transposed, non-contiguous C
  fill_operand(spad, mm.a, 3, 4, 3);
  fill_operand(spad, mm.b, 4, 5, 4);
  run_matmul(mm, spad.span());
  for (uint32_t i = 0; i < 3; ++i) {
    for (uint32_t j = 0; j < 5; ++j) {
      double want = 0;
      for (uint32_t p = 0; p < 4; ++p)
        want += spad.get(mm.a, i, p) * spad.get(mm.b, p, j);
      EXPECT_EQ(spad.get(mm.c, i, j), want);
    }
  }
  mm.b.offset = static_cast<uint32_t>(kSpadBytes - 128);
  try {
    run_matmul(mm, spad.span());
    FAIL();
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.code(), rt::ErrorCode::kDeviceError);
    EXPECT_NE(std::string(e.what()).find("matmul B"), std::string::npos);
  }
  mm.b.offset = 1024;
  mm.c.dtype = DType::kFloat16;
  EXPECT_THROW(run_matmul(mm, spad.span()), rt::Error);
}

// 1024^3 fp16 as 32 per-core products (128x256 output tiles, K in two
// 512-deep steps) against cblas_sgemm on the whole fp32 shape. Prints the
// throughputs; asserts the results agree (the figure is a report, not a gate).
TEST(MatMulBench, Fp16ThirtyTwoCoresAgainstSgemm) {
  const int dim = 1024, tm = 128, tn = 256, tk = 512;
  std::vector<float> a(dim * dim), b(dim * dim), c_ref(dim * dim);
  for (int i = 0; i < dim * dim; ++i) {
    a[i] = rt::fp16_to_float(
        rt::float_to_fp16(((int64_t{i} * 7919) % 2001 - 1000) / 1000.0f));
    b[i] = rt::fp16_to_float(
        rt::float_to_fp16(((int64_t{i} * 104729) % 1999 - 999) / 1000.0f));
  }
  // Each core's scratchpad: A block (tm x dim), B block (dim x tn), C tile.
  const int cores = (dim / tm) * (dim / tn);
  std::vector<Spad> spads(cores);
  const uint32_t a_off = 0, b_off = tm * dim * 2, c_off = b_off + dim * tn * 2;
  for (int core = 0; core < cores; ++core) {
    int bi = core / (dim / tn), bj = core % (dim / tn);
    for (int r = 0; r < tm; ++r) {
      float_to_fp16_n(&a[(bi * tm + r) * dim], dim,
                      spads[core].bytes.data() + a_off + r * dim * 2);
    }
    for (int r = 0; r < dim; ++r) {
      float_to_fp16_n(&b[r * dim + bj * tn], tn,
                      spads[core].bytes.data() + b_off + r * tn * 2);
    }
  }
  auto run_core = [&](int core) {
    for (int kk = 0; kk < dim; kk += tk) {
      rt::MatMul mm;
      mm.m = tm;
      mm.n = tn;
      mm.k = tk;
      mm.accumulate = kk > 0;
      mm.a = rt::Tile{a_off + kk * 2, DType::kFloat16, dim * 2, 2};
      mm.b = rt::Tile{static_cast<uint32_t>(b_off + kk * tn * 2),
                      DType::kFloat16, tn * 2, 2};
      mm.c = rt::Tile{c_off, DType::kFloat32, tn * 4, 4};
      run_matmul(mm, spads[core].span());
    }
  };
  using clock = std::chrono::steady_clock;
  auto seconds = [](auto t0, auto t1) {
    return std::chrono::duration<double>(t1 - t0).count();
  };
  const double flop = 2.0 * dim * dim * dim;
  run_core(0);  // warm-up: thread_local buffers, OpenBLAS init
  auto t0 = clock::now();
  for (int core = 0; core < cores; ++core) run_core(core);
  auto t1 = clock::now();
  std::thread worker([&] {
    for (int core = 1; core < cores; core += 2) run_core(core);
  });
  for (int core = 0; core < cores; core += 2) run_core(core);
  worker.join();
  auto t2 = clock::now();
  openblas_set_num_threads(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1,
              a.data(), dim, b.data(), dim, 0, c_ref.data(), dim);
  auto t3 = clock::now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1,
              a.data(), dim, b.data(), dim, 0, c_ref.data(), dim);
  auto t4 = clock::now();
  openblas_set_num_threads(2);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1,
              a.data(), dim, b.data(), dim, 0, c_ref.data(), dim);
  auto t5 = clock::now();
  openblas_set_num_threads(1);
  std::printf(
      "1024^3: run_matmul fp16 x32 cores 1 thread %.1f GFLOP/s, 2 threads "
      "%.1f; "
      "sgemm fp32 1 thread %.1f, 2 threads %.1f\n",
      flop / seconds(t0, t1) * 1e-9, flop / seconds(t1, t2) * 1e-9,
      flop / seconds(t3, t4) * 1e-9, flop / seconds(t4, t5) * 1e-9);
  for (int core = 0; core < cores; ++core) {
    int bi = core / (dim / tn), bj = core % (dim / tn);
    for (int r = 0; r < tm; r += 17) {
      for (int j = 0; j < tn; j += 13) {
        float got =
            load_as<float>(spads[core].bytes.data() + c_off + (r * tn + j) * 4);
        float want = c_ref[(bi * tm + r) * dim + bj * tn + j];
        ASSERT_NEAR(got, want, 1e-4f * (1 + std::fabs(want)));
      }
    }
  }
}

}  // namespace
}  // namespace spyre::sim::test
