// Restickify (spyre/kernels/relayout.h) on the emulator: X [rows, cols] with
// cols along sticks to X^T [cols, rows] with rows along sticks, through the
// ring and through device memory. Both paths must write exactly the same
// bytes (padding included), and every element must be X's transpose.
#include <gtest/gtest.h>

#include "kernel_library_util.h"
#include "spyre/kernels/relayout.h"

namespace spyre::sim::test {
namespace {

using kernels::Matrix;
using kernels::RelayoutOptions;
using kernels::RelayoutPath;
using kernels::RingTranspose;
using rt::DType;

struct Result {
  Image out{0};
  rt::LaunchStats stats;
};

Result run_path(const Matrix& in, const Matrix& out, const Image& input,
                RelayoutPath path, uint32_t max_cores, bool barrier = false,
                RingTranspose how = RingTranspose::kFastest) {
  RelayoutOptions o;
  o.path = path;
  o.ring_transpose = how;
  o.target = sim_target(max_cores);
  o.barrier_after_load = barrier;
  const rt::Program program = kernels::build_restickify(in, out, o);
  auto device = small_device();
  std::vector<Image> images = {input, Image(out.bytes())};
  if (path == RelayoutPath::kDeviceMemory) {
    images.emplace_back(
        kernels::relayout_scratch_bytes(in.rows, in.cols, in.dtype));
  }
  Result r;
  r.stats = run_images(*device, program, images);
  r.out = images[1];
  return r;
}

// The ring path both ways it transposes (the transpose pipeline, the
// vector unit) and the device-memory path write the same bytes, and they
// are X's transpose.
void check_restickify(const Matrix& in, const Matrix& out,
                      uint32_t max_cores = 0, bool barrier = false) {
  ASSERT_EQ(in.batch_count(), out.batch_count());
  std::mt19937 rng(3);
  Image input(in.bytes());
  input.fill(in, rng, -100, 100);
  const Result dram =
      run_path(in, out, input, RelayoutPath::kDeviceMemory, max_cores, barrier);
  for (RingTranspose how :
       {RingTranspose::kPipeline, RingTranspose::kVectorUnit}) {
    SCOPED_TRACE(kernels::ring_transpose_name(how));
    Result ring =
        run_path(in, out, input, RelayoutPath::kRing, max_cores, barrier, how);
    ASSERT_EQ(ring.out.bytes.size(), dram.out.bytes.size());
    EXPECT_TRUE(ring.out.bytes == dram.out.bytes)
        << "ring and device-memory paths wrote different bytes";
    Image& got = ring.out;
    for (uint64_t b = 0; b < in.batch_count(); ++b) {
      for (uint64_t r = 0; r < in.rows; ++r) {
        for (uint64_t c = 0; c < in.cols; ++c) {
          ASSERT_EQ(got.get(out, b, c, r), input.get(in, b, r, c))
              << "batch " << b << " X^T[" << c << ", " << r << "]";
        }
      }
    }
    if (max_cores > 1) {
      EXPECT_GT(ring.stats.ring_bytes, 0u);
    }
  }
  const Result columns =
      run_path(in, out, input, RelayoutPath::kColumnLoads, max_cores, barrier);
  EXPECT_TRUE(columns.out.bytes == dram.out.bytes)
      << "column loads and device-memory paths wrote different bytes";
  EXPECT_EQ(columns.stats.ring_bytes, 0u);
}

TEST(RestickifyFewRows, EachCoreLoadsItsColumns) {
  // 64 rows are one row block: the exchange would have one core load all of
  // X. Each core loads its columns instead, no ring traffic, and the load
  // spreads over every core.
  const DType t = DType::kFloat16;
  const Matrix in = Matrix::stick_columns(64, 4096, t);
  const Matrix out = Matrix::stick_columns(4096, 64, t);
  check_restickify(in, out, 32);
  std::mt19937 rng(5);
  Image input(in.bytes());
  input.fill(in, rng);
  const Result fastest = run_path(in, out, input, RelayoutPath::kRing, 32);
  EXPECT_EQ(fastest.stats.ring_bytes, 0u);
  const Result pipeline = run_path(in, out, input, RelayoutPath::kRing, 32,
                                   false, RingTranspose::kPipeline);
  EXPECT_TRUE(fastest.out.bytes == pipeline.out.bytes);
  EXPECT_EQ(std::count_if(fastest.stats.core_busy_cycles.begin(),
                          fastest.stats.core_busy_cycles.end(),
                          [](uint64_t c) { return c > 0; }),
            32);
}

TEST(RestickifyLarge, BenchShapeWithTheTimingBarrier) {
  // relayout_bench's shape: 1024 x 1024 fp16 over 32 cores, 32 x 32 blocks
  // of 32 rows and one stick each.
  const DType t = DType::kFloat16;
  check_restickify(Matrix::stick_columns(1024, 1024, t),
                   Matrix::stick_columns(1024, 1024, t), 32, true);
}

class Restickify : public ::testing::TestWithParam<DType> {};

TEST_P(Restickify, SquareOverAllCores) {
  const DType t = GetParam();
  const uint64_t e = rt::elements_per_stick(t);
  check_restickify(Matrix::stick_columns(32 * e, 32 * e, t),
                   Matrix::stick_columns(32 * e, 32 * e, t));
}

TEST_P(Restickify, RaggedRowMajorIn) {
  // Neither side a multiple of the stick: ragged blocks and padding.
  const DType t = GetParam();
  check_restickify(Matrix::row_major(200, 333, t),
                   Matrix::stick_columns(333, 200, t));
}

TEST_P(Restickify, TallOnFewCores) {
  // More rows than columns: some cores hold rows but no column block.
  const DType t = GetParam();
  check_restickify(Matrix::stick_columns(700, 90, t),
                   Matrix::row_major(90, 700, t), 5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Restickify,
                         ::testing::Values(DType::kFloat16, DType::kBFloat16,
                                           DType::kFloat32, DType::kInt8));

TEST(RestickifyWide, TwoSticksPerColumnBlock) {
  // 4096 columns over 32 cores: each column block is two sticks, so every
  // piece travels as two sends and lands in two staging sticks.
  const DType t = DType::kFloat16;
  check_restickify(Matrix::stick_columns(130, 4096, t),
                   Matrix::stick_columns(4096, 130, t));
}

TEST(RestickifyOddCores, XorPartnersPastTheLastCoreSitOut) {
  // 13 cores: the exchange pairs cores i and i ^ t over 16, so some steps
  // have no partner, and the last transpose group is ragged (cores 12..15
  // of a group of 4 hold only core 12's rows).
  const DType t = DType::kFloat16;
  check_restickify(Matrix::stick_columns(13 * 64, 13 * 64 - 5, t),
                   Matrix::stick_columns(13 * 64 - 5, 13 * 64, t), 13);
}

TEST(RestickifyOddCores, TwoCoresBf16) {
  const DType t = DType::kBFloat16;
  check_restickify(Matrix::stick_columns(128, 100, t),
                   Matrix::row_major(100, 128, t), 2);
}

TEST(RestickifyOneCore, NoExchangeStillTransposes) {
  const DType t = DType::kFloat16;
  check_restickify(Matrix::stick_columns(100, 70, t),
                   Matrix::stick_columns(70, 100, t), 1);
}

TEST(RestickifyBarrier, SameBytesWithTheTimingBarrier) {
  const DType t = DType::kFloat16;
  const Matrix in = Matrix::stick_columns(256, 192, t);
  const Matrix out = Matrix::stick_columns(192, 256, t);
  std::mt19937 rng(9);
  Image input(in.bytes());
  input.fill(in, rng);
  const Result plain = run_path(in, out, input, RelayoutPath::kRing, 32);
  const Result timed = run_path(in, out, input, RelayoutPath::kRing, 32, true);
  EXPECT_TRUE(plain.out.bytes == timed.out.bytes);
}

// The ring path moves the data core to core; the device-memory path moves
// it through DRAM twice more (store + load of the whole tensor).
TEST(RestickifyTraffic, DramPathMovesTheTensorTwiceMore) {
  const DType t = DType::kFloat16;
  const Matrix in = Matrix::stick_columns(512, 512, t);
  const Matrix out = Matrix::stick_columns(512, 512, t);
  Image input(in.bytes());
  const Result ring = run_path(in, out, input, RelayoutPath::kRing, 32);
  const Result dram = run_path(in, out, input, RelayoutPath::kDeviceMemory, 32);
  EXPECT_EQ(ring.stats.dma_bytes, 2 * in.bytes());
  EXPECT_EQ(dram.stats.dma_bytes, 4 * in.bytes());
  // 64-row and 64-column blocks: 8 cores, each keeping 1/8 of its block.
  EXPECT_EQ(ring.stats.ring_bytes, in.bytes() / 8 * 7);
  EXPECT_LT(ring.stats.cycles, dram.stats.cycles);
}

TEST(RestickifyPasses, RowsTooLongForOnePassGoThroughItInPasses) {
  // 9 rows of 60000 fp32 columns (a permuted [3, 3, 60000] made
  // contiguous): one pass would need 2.1 MiB of scratchpad on the core
  // holding the rows, so the columns go in passes of whole sticks, the
  // last one ragged.
  const DType t = DType::kFloat32;
  check_restickify(Matrix::stick_columns(9, 60000, t),
                   Matrix::stick_columns(60000, 9, t));
  check_restickify(Matrix::row_major(9, 60001, t),
                   Matrix::row_major(60001, 9, t), 3);
}

TEST(RestickifyPasses, ManyRowsGoInPassesOfRowsAndColumns) {
  // 20000 x 200 fp16 (x.t().contiguous() of a tall matrix): even one stick
  // of columns with every row overflows a scratchpad, so the rows go in
  // passes too, each pass's columns as wide as fit; ragged on both sides.
  const DType t = DType::kFloat16;
  check_restickify(Matrix::stick_columns(20000, 200, t),
                   Matrix::stick_columns(200, 20000, t));
}

TEST_P(Restickify, BatchesOneAfterAnother) {
  // Attention's keys transposed per (batch, head): small matrices, one
  // program for all of them, over one core and over several.
  const DType t = GetParam();
  for (const auto& [rows, cols] : {std::pair<uint64_t, uint64_t>{16, 32},
                                   std::pair<uint64_t, uint64_t>{300, 70}}) {
    Matrix in = Matrix::row_major(rows, cols, t);
    Matrix out = Matrix::row_major(cols, rows, t);
    in.batch_dims = {{2, static_cast<int64_t>(3 * in.bytes())},
                     {3, static_cast<int64_t>(in.bytes())}};
    out.batch_dims = {{2, static_cast<int64_t>(3 * out.bytes())},
                      {3, static_cast<int64_t>(out.bytes())}};
    check_restickify(in, out);
  }
}

TEST(RestickifyErrors, ShapesAndFit) {
  const DType t = DType::kFloat16;
  EXPECT_THROW(kernels::build_restickify(Matrix::stick_columns(10, 20, t),
                                         Matrix::stick_columns(10, 20, t),
                                         {sim_target()}),
               kernels::KernelBuildError);
  EXPECT_THROW(
      kernels::build_restickify(Matrix::stick_columns(10, 20, t),
                                Matrix::stick_columns(20, 10, DType::kBFloat16),
                                {sim_target()}),
      kernels::KernelBuildError);
  // One stick of rows and of columns needs more than a tiny scratchpad.
  kernels::Target tiny = sim_target();
  tiny.chip.scratchpad_bytes = tiny.chip.scratchpad_reserve + 4096;
  try {
    kernels::build_restickify(Matrix::stick_columns(8192, 8192, t),
                              Matrix::stick_columns(8192, 8192, t), {tiny});
    FAIL() << "built a program that cannot fit";
  } catch (const kernels::KernelBuildError& e) {
    EXPECT_NE(std::string(e.what()).find("scratchpad"), std::string::npos);
  }
}

}  // namespace
}  // namespace spyre::sim::test
