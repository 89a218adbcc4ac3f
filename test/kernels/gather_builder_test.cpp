// The gather builder (spyre/kernels/gather.h) on the emulator: embedding
// lookups with 2-D indices into stick-column and row-major tables,
// index_select along a middle dimension (batches), int32 and int64
// indices, and an out-of-range index reported as a device error; and the
// scatter builder, its reverse, on the same shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kernel_library_util.h"
#include "spyre/kernels/gather.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using rt::DType;

constexpr int64_t kStick = rt::kStickBytes;

int64_t sticks(uint64_t n, DType t) {
  return static_cast<int64_t>(kernels::ceil_div(n, rt::elements_per_stick(t)));
}

// [d0, d1, d2] in the default layout as rows (d0, d1).
Matrix default_3d(uint64_t d0, uint64_t d1, uint64_t d2, DType t) {
  return Matrix::strided(
      t, 0,
      {{d0, kStick}, {d1, sticks(d2, t) * static_cast<int64_t>(d0) * kStick}},
      d2, static_cast<int64_t>(d0) * kStick);
}

void check_gather(const kernels::GatherShape& s, uint64_t table_rows) {
  const rt::Program program = kernels::build_gather(s, {sim_target()});
  std::vector<Image> images{Image(s.table.bytes()), Image(s.index.bytes()),
                            Image(s.out.bytes())};
  std::mt19937 rng(11);
  images[0].fill(s.table, rng);
  std::uniform_int_distribution<int64_t> pick(0, table_rows - 1);
  for (uint64_t r = 0; r < s.index.rows; ++r) {
    for (uint64_t c = 0; c < s.index.cols; ++c) {
      images[1].put(s.index, 0, r, c, static_cast<double>(pick(rng)));
    }
  }
  const std::vector<Image> before = images;
  auto device = small_device();
  run_images(*device, program, images);
  Image table = before[0], index = before[1];
  for (uint64_t b = 0; b < s.table.batch_count(); ++b) {
    for (uint64_t k = 0; k < s.out.rows; ++k) {
      const auto row = static_cast<uint64_t>(
          index.get(s.index, 0, k / s.index.cols, k % s.index.cols));
      for (uint64_t c = 0; c < s.out.cols; ++c) {
        ASSERT_EQ(images[2].get(s.out, b, k, c), table.get(s.table, b, row, c))
            << "batch " << b << " out row " << k << " col " << c;
      }
    }
  }
}

class GatherBuilder : public ::testing::TestWithParam<DType> {};

TEST_P(GatherBuilder, EmbeddingWithTwoDimIndices) {
  const DType t = GetParam();
  for (DType it : {DType::kInt64, DType::kInt32}) {
    kernels::GatherShape s{Matrix::stick_columns(97, 150, t),
                           Matrix::stick_columns(3, 41, it),
                           default_3d(3, 41, 150, t)};
    check_gather(s, 97);
  }
}

TEST_P(GatherBuilder, RowMajorTableOneGatherPerRow) {
  const DType t = GetParam();
  kernels::GatherShape s{Matrix::row_major(50, 300, t),
                         Matrix::strided(DType::kInt64, 0, {}, 77, kStick),
                         Matrix::stick_columns(77, 300, t)};
  check_gather(s, 50);
}

TEST_P(GatherBuilder, IndexSelectAlongMiddleDim) {
  // index_select(x [4, 30, 70], 1, idx [17]) -> [4, 17, 70].
  const DType t = GetParam();
  const int64_t row = sticks(70, t) * 4 * kStick;
  Matrix table = Matrix::strided(t, 0, {{30, row}}, 70, 4 * kStick);
  table.batch_dims = {{4, kStick}};
  Matrix out = Matrix::strided(t, 0, {{17, row}}, 70, 4 * kStick);
  out.batch_dims = {{4, kStick}};
  check_gather({table, Matrix::strided(DType::kInt32, 0, {}, 17, kStick), out},
               30);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GatherBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(GatherBuilderErrors, OutOfRangeIndexIsADeviceError) {
  const DType t = DType::kFloat16;
  kernels::GatherShape s{Matrix::stick_columns(10, 64, t),
                         Matrix::strided(DType::kInt64, 0, {}, 3, kStick),
                         Matrix::stick_columns(3, 64, t)};
  const rt::Program program = kernels::build_gather(s, {sim_target()});
  std::vector<Image> images{Image(s.table.bytes()), Image(s.index.bytes()),
                            Image(s.out.bytes())};
  images[1].put(s.index, 0, 0, 1, 10);
  auto device = small_device();
  try {
    run_images(*device, program, images);
    FAIL() << "an index of 10 into 10 rows launched";
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.code(), rt::ErrorCode::kDeviceError) << e.what();
  }
  s.index.dtype = DType::kFloat32;
  EXPECT_THROW(kernels::build_gather(s, {sim_target()}),
               kernels::KernelBuildError);
}

// ---- scatter ----------------------------------------------------------------

// Scatters source rows to distinct random table rows (a permutation's
// prefix, so no row is named twice) and checks every table row: the named
// ones hold their source row, the others are unchanged.
void check_scatter(const kernels::ScatterShape& s, uint64_t table_rows) {
  const rt::Program program = kernels::build_scatter(s, {sim_target()});
  std::vector<Image> images{Image(s.table.bytes()), Image(s.index.bytes()),
                            Image(s.source.bytes())};
  std::mt19937 rng(13);
  images[0].fill(s.table, rng);
  images[2].fill(s.source, rng);
  std::vector<int64_t> rows(table_rows);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng);
  std::vector<int64_t> source_of(table_rows, -1);
  for (uint64_t r = 0; r < s.index.rows; ++r) {
    for (uint64_t c = 0; c < s.index.cols; ++c) {
      const uint64_t k = r * s.index.cols + c;
      images[1].put(s.index, 0, r, c, static_cast<double>(rows[k]));
      source_of[rows[k]] = static_cast<int64_t>(k);
    }
  }
  std::vector<Image> before = images;
  auto device = small_device();
  run_images(*device, program, images);
  for (uint64_t b = 0; b < s.table.batch_count(); ++b) {
    for (uint64_t row = 0; row < table_rows; ++row) {
      for (uint64_t c = 0; c < s.table.cols; ++c) {
        const double want =
            source_of[row] < 0
                ? before[0].get(s.table, b, row, c)
                : before[2].get(s.source, b,
                                static_cast<uint64_t>(source_of[row]), c);
        ASSERT_EQ(images[0].get(s.table, b, row, c), want)
            << "batch " << b << " table row " << row << " col " << c;
      }
    }
  }
}

class ScatterBuilder : public ::testing::TestWithParam<DType> {};

TEST_P(ScatterBuilder, RowsIntoAStickColumnTable) {
  const DType t = GetParam();
  for (DType it : {DType::kInt64, DType::kInt32}) {
    kernels::ScatterShape s{Matrix::stick_columns(97, 150, t),
                            Matrix::strided(it, 0, {}, 41, kStick),
                            Matrix::stick_columns(41, 150, t)};
    check_scatter(s, 97);
  }
}

TEST_P(ScatterBuilder, KvCacheUpdateAlongAMiddleDim) {
  // index_copy_(cache [4, 30, 70], 1, positions [5], new [4, 5, 70]).
  const DType t = GetParam();
  const int64_t row = sticks(70, t) * 4 * kStick;
  Matrix table = Matrix::strided(t, 0, {{30, row}}, 70, 4 * kStick);
  table.batch_dims = {{4, kStick}};
  const int64_t source_row = sticks(70, t) * 4 * kStick;
  Matrix source = Matrix::strided(t, 0, {{5, source_row}}, 70, 4 * kStick);
  source.batch_dims = {{4, kStick}};
  check_scatter(
      {table, Matrix::strided(DType::kInt64, 0, {}, 5, kStick), source}, 30);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ScatterBuilder,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32));

TEST(ScatterBuilderErrors, OutOfRangeIndexIsADeviceErrorAndKeepsTheTable) {
  const DType t = DType::kFloat16;
  kernels::ScatterShape s{Matrix::stick_columns(10, 64, t),
                          Matrix::strided(DType::kInt64, 0, {}, 3, kStick),
                          Matrix::stick_columns(3, 64, t)};
  const rt::Program program = kernels::build_scatter(s, {sim_target()});
  std::vector<Image> images{Image(s.table.bytes()), Image(s.index.bytes()),
                            Image(s.source.bytes())};
  std::mt19937 rng(17);
  images[0].fill(s.table, rng);
  images[2].fill(s.source, rng);
  images[1].put(s.index, 0, 0, 2, 10);
  const std::vector<Image> before = images;
  auto device = small_device();
  try {
    run_images(*device, program, images);
    FAIL() << "an index of 10 into 10 rows launched";
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.code(), rt::ErrorCode::kDeviceError) << e.what();
  }
  s.index.dtype = DType::kFloat32;
  EXPECT_THROW(kernels::build_scatter(s, {sim_target()}),
               kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
