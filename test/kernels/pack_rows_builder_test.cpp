// Packing narrow rows (spyre/kernels/pack_rows.h) on the emulator: out row d
// holds in rows d*g .. d*g+g-1 side by side, element for element, whatever
// the stick layouts, the ragged rows and the cores.
#include <gtest/gtest.h>

#include "kernel_library_util.h"
#include "spyre/kernels/pack_rows.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using rt::DType;

void check_pack(const Matrix& in, const Matrix& out, uint32_t max_cores = 0) {
  const rt::Program program =
      kernels::build_pack_rows(in, out, sim_target(max_cores));
  auto device = small_device();
  std::mt19937 rng(5);
  Image input(in.bytes());
  input.fill(in, rng, -100, 100);
  std::vector<Image> images = {input, Image(out.bytes())};
  run_images(*device, program, images);
  const uint64_t g = out.cols / in.cols;
  for (uint64_t r = 0; r < in.rows; ++r) {
    for (uint64_t c = 0; c < in.cols; ++c) {
      ASSERT_EQ(images[1].get(out, 0, r / g, (r % g) * in.cols + c),
                input.get(in, 0, r, c))
          << "in[" << r << ", " << c << "]";
    }
  }
}

class PackRows : public ::testing::TestWithParam<DType> {};

TEST_P(PackRows, TwoPerRowFlattenedIntoSticks) {
  // [tokens, 2] routing indices read as one flat run of sticks.
  const DType t = GetParam();
  const uint64_t e = rt::elements_per_stick(t);
  check_pack(Matrix::stick_columns(4 * e, 2, t), Matrix::row_major(8, e, t));
}

TEST_P(PackRows, RowsStraddlingSticksOverFewCores) {
  // 6 elements a row do not divide a stick: packed rows of whole source
  // rows, each padded; three cores share 37 packed rows.
  const DType t = GetParam();
  check_pack(Matrix::stick_columns(37 * 5, 6, t), Matrix::row_major(37, 30, t),
             3);
}

TEST_P(PackRows, RowsWiderThanAStick) {
  const DType t = GetParam();
  const uint64_t e = rt::elements_per_stick(t);
  check_pack(Matrix::row_major(12, e + 3, t),
             Matrix::row_major(3, 4 * (e + 3), t));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PackRows,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32, DType::kInt8,
                                           DType::kInt64));

TEST(PackRowsShapes, MismatchedShapesAreABuildError) {
  EXPECT_THROW(kernels::build_pack_rows(
                   Matrix::row_major(10, 3, DType::kFloat32),
                   Matrix::row_major(3, 9, DType::kFloat32), sim_target(0)),
               kernels::KernelBuildError);
  EXPECT_THROW(kernels::build_pack_rows(
                   Matrix::row_major(8, 3, DType::kFloat32),
                   Matrix::row_major(2, 12, DType::kFloat16), sim_target(0)),
               kernels::KernelBuildError);
}

}  // namespace
}  // namespace spyre::sim::test
