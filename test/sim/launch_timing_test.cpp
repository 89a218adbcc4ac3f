// The timing model seen through launches: dataflow overlap, exact per-core
// figures of small hand-built programs, broadcast reads, scaling across
// cores, and determinism of results and figures.
#include <gtest/gtest.h>

#include <cmath>

#include "sim_test_util.h"
#include "spyre/kernels/matmul.h"
#include "spyre/runtime/half.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

const rt::CostTable& T = kTimingTable;

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// A simple-op vector instruction over rows x cols elements of `width` bytes.
uint64_t vector_cycles(uint64_t rows, uint64_t cols, uint64_t width,
                       double factor = 1.0) {
  uint64_t sticks = rows * ceil_div(cols * width, T.vector_bytes_per_cycle);
  return T.vector_fixed_cycles +
         static_cast<uint64_t>(std::ceil(static_cast<double>(sticks) * factor));
}

// ---- dataflow overlap
// --------------------------------------------------------

constexpr uint32_t kLoadBytes = 256u << 10;   // 64 rows of 4 KiB
constexpr uint32_t kRows = 64, kCols = 1024;  // fp32: the same 256 KiB

rt::Vector exp_at(uint32_t offset) {
  rt::Tile t = tile(offset, DType::kFloat32, kCols * 4);
  return vec(rt::VecOp::kExp, t, t, kRows, kCols);
}

rt::Program one_core(const char* name, std::vector<rt::Instruction> insts) {
  rt::Program p;
  p.name = name;
  p.args = {slot("x", kLoadBytes, DType::kFloat32),
            slot("y", kLoadBytes, DType::kFloat32, true)};
  p.cores = {core(0, std::move(insts))};
  return p;
}

TEST(SimLaunchTiming, IndependentDmaAndComputeOverlap) {
  // The load fills [0, 256 KiB); the exp works on [1 MiB, +256 KiB).
  auto device = small_device();
  rt::LaunchStats stats = modelled(
      *device,
      one_core("overlap", {load(xfer(0, 0, 0, kLoadBytes)), exp_at(1u << 20)}));
  const uint64_t dma = lone_dma_cycles(kLoadBytes);
  const uint64_t compute =
      vector_cycles(kRows, kCols, 4, T.vector_transcendental_factor);
  ASSERT_GT(dma, compute);
  EXPECT_EQ(stats.cycles, std::max(dma, compute));
  EXPECT_EQ(stats.core_busy_cycles[0], dma);
  EXPECT_DOUBLE_EQ(stats.vector_utilization,
                   static_cast<double>(compute) / (dma * 32.0));
  EXPECT_DOUBLE_EQ(stats.core_utilization, 1.0);
  EXPECT_DOUBLE_EQ(stats.time_ns, dma / T.clock_ghz + T.launch_overhead_ns);
}

TEST(SimLaunchTiming, DependentChainTakesTheSum) {
  auto device = small_device();
  const uint64_t dma = lone_dma_cycles(kLoadBytes);
  const uint64_t compute =
      vector_cycles(kRows, kCols, 4, T.vector_transcendental_factor);
  // The exp reads what the load wrote.
  rt::LaunchStats chained = modelled(
      *device, one_core("chain", {load(xfer(0, 0, 0, kLoadBytes)), exp_at(0)}));
  EXPECT_EQ(chained.cycles, dma + compute);
  EXPECT_EQ(chained.core_busy_cycles[0], dma + compute);
  // Load, compute, store: three links.
  rt::LaunchStats three = modelled(
      *device, one_core("chain3", {load(xfer(0, 0, 0, kLoadBytes)), exp_at(0),
                                   store(xfer(1, 0, 0, kLoadBytes))}));
  EXPECT_EQ(three.cycles, dma + compute + store_after_reads_cycles(kLoadBytes));
  EXPECT_EQ(three.dma_bytes, 2u * kLoadBytes);
}

TEST(SimLaunchTiming, DoubleBufferingHidesComputeBehindDma) {
  // Four tiles through two buffers: load i+1 runs while tile i computes,
  // so the launch takes 4 loads + 1 compute, not 4 of each.
  std::vector<rt::Instruction> insts;
  for (uint32_t i = 0; i < 4; ++i) {
    uint32_t buffer = (i % 2) * kLoadBytes;
    insts.push_back(load(xfer(0, 0, buffer, kLoadBytes)));
    insts.push_back(exp_at(buffer));
  }
  auto device = small_device();
  rt::LaunchStats stats = modelled(*device, one_core("pipeline", insts));
  const uint64_t dma = lone_dma_cycles(kLoadBytes);
  const uint64_t compute =
      vector_cycles(kRows, kCols, 4, T.vector_transcendental_factor);
  EXPECT_EQ(stats.cycles, 4 * dma + compute);
  EXPECT_LT(stats.cycles, 4 * (dma + compute));
}

// ---- exact figures of a small multi-core program
// -------------------------------

TEST(SimLaunchTiming, PerCoreFiguresOfAHandBuiltProgramAreExact) {
  // core 0: load 8 KiB, exp on it (fp16 32 x 128), store 8 KiB;
  // core 1: a 32x64x64 fp16 matmul and, independently, a 1 KiB ring send;
  // core 2: receives the 1 KiB and negates it (fp32 1 x 256).
  rt::Program p;
  p.name = "figures";
  p.args = {slot("x", 8192), slot("y", 8192, DType::kFloat16, true)};
  rt::Tile t16 = tile(0, DType::kFloat16, 256);
  rt::MatMul mm;
  mm.a = tile(0, DType::kFloat16, 128);
  mm.b = tile(8192, DType::kFloat16, 128);
  mm.c = tile(16384, DType::kFloat32, 256);
  mm.m = 32;
  mm.n = 64;
  mm.k = 64;
  rt::Tile t32 = tile(0, DType::kFloat32, 1024);
  p.cores = {core(0, {load(xfer(0, 0, 0, 8192)),
                      vec(rt::VecOp::kExp, t16, t16, 32, 128),
                      store(xfer(1, 0, 0, 8192))}),
             core(1, {mm, rt::RingSend{4, 2, 65536, 1024}}),
             core(2, {rt::RingRecv{4, 1, 0, 1024, {}},
                      vec(rt::VecOp::kNeg, t32, t32, 1, 256)})};
  auto device = small_device();
  rt::LaunchStats stats = modelled(*device, p);

  const uint64_t dma = lone_dma_cycles(8192);
  const uint64_t exp16 =
      vector_cycles(32, 128, 2, T.vector_transcendental_factor);
  const uint64_t core0 = dma + exp16 + store_after_reads_cycles(8192);
  // 2 x 1 x 8 array tiles of 16 x 64 x 8 MACs.
  const uint64_t matmul =
      T.matmul_fixed_cycles + (2 * 8 * 16 * 64 * 8) / T.matmul_macs_fp16;
  const uint64_t send =
      T.ring_send_fixed_cycles + 1024 / T.ring_bytes_per_cycle;
  const uint64_t neg = vector_cycles(1, 256, 4);
  const uint64_t core2 = T.ring_recv_cycles + neg;  // after send + 1 hop
  ASSERT_GT(core0, send + T.ring_hop_cycles + core2);

  EXPECT_EQ(stats.cycles, core0);
  ASSERT_EQ(stats.core_busy_cycles.size(), 32u);
  EXPECT_EQ(stats.core_busy_cycles[0], core0);
  EXPECT_EQ(stats.core_busy_cycles[1], std::max(matmul, send));
  EXPECT_EQ(stats.core_busy_cycles[2], core2);
  for (uint32_t c = 3; c < 32; ++c) EXPECT_EQ(stats.core_busy_cycles[c], 0u);
  EXPECT_EQ(stats.dma_bytes, 2u * 8192);
  EXPECT_EQ(stats.ring_bytes, 1024u);
  EXPECT_EQ(stats.instructions, 7u);
  const double capacity = static_cast<double>(core0) * 32;
  EXPECT_DOUBLE_EQ(stats.matrix_utilization, matmul / capacity);
  EXPECT_DOUBLE_EQ(stats.vector_utilization, (exp16 + neg) / capacity);
  EXPECT_DOUBLE_EQ(stats.core_utilization,
                   (core0 + std::max(matmul, send) + core2) / (3.0 * core0));
}

// ---- broadcast reads
// -----------------------------------------------------------

// Eight cores each load the same 256 KiB; with a share group the DRAM server
// is charged for it once.
rt::LaunchStats eight_readers(bool shared) {
  rt::Program p;
  p.name = shared ? "broadcast" : "private_reads";
  p.args = {slot("x", kLoadBytes)};
  for (uint32_t c = 0; c < 8; ++c) {
    rt::StickTransfer x = xfer(0, 0, 0, kLoadBytes);
    x.share_group = shared ? 1 : 0;
    p.cores.push_back(core(c * 4, {load(x)}));
  }
  auto device = small_device();
  return modelled(*device, p);
}

TEST(SimLaunchTiming, BroadcastReadsAreChargedToDramOnce) {
  const rt::LaunchStats shared = eight_readers(true);
  const rt::LaunchStats separate = eight_readers(false);
  // Each core's engine streams 256 KiB either way (the bytes reach eight
  // scratchpads), but only the separate reads queue at the DRAM server:
  // first come, first served, 256 KiB at a time.
  EXPECT_EQ(shared.dma_bytes, 8u * kLoadBytes);
  EXPECT_EQ(separate.dma_bytes, 8u * kLoadBytes);
  const double service = kLoadBytes / (T.dram_gb_per_s / T.clock_ghz);
  EXPECT_EQ(shared.cycles, lone_dma_cycles(kLoadBytes));
  EXPECT_EQ(separate.cycles, static_cast<uint64_t>(std::ceil(8 * service)) +
                                 T.dma_latency_cycles);
  EXPECT_GT(separate.cycles, 3 * shared.cycles);
}

// ---- scaling and determinism
// ---------------------------------------------------

struct MatmulRun {
  rt::LaunchStats stats;
  std::vector<uint8_t> c;
};

MatmulRun run_matmul(rt::Device& device, uint32_t cores, int launches = 1) {
  const auto m = kernels::Matrix::row_major(256, 256, DType::kFloat16);
  kernels::MatmulShape shape{m, m, m};
  kernels::MatmulOptions options;
  options.target = sim_target(cores);
  rt::Program program = kernels::build_matmul(
      shape, kernels::plan_matmul(shape, options), options);
  rt::LoadedProgram loaded(device, program);
  Buffers buffers(device, program);
  // fp16 values in [-2, 2) with few mantissa bits: products and sums stay
  // exact in fp32 whatever the order.
  std::vector<uint16_t> a(m.bytes() / 2), b(m.bytes() / 2);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = rt::float_to_fp16(static_cast<float>(i * 7 % 16) / 4 - 2);
    b[i] = rt::float_to_fp16(static_cast<float>(i * 5 % 16) / 4 - 2);
  }
  buffers.upload(0, a);
  buffers.upload(1, b);
  MatmulRun out;
  for (int i = 0; i < launches; ++i) {
    rt::LaunchStats stats = loaded.run(buffers.bindings);
    std::vector<uint8_t> c = buffers.download<uint8_t>(2);
    if (i > 0) {
      EXPECT_EQ(c, out.c) << "launch " << i << " computed different bytes";
      EXPECT_EQ(stats.cycles, out.stats.cycles);
      EXPECT_EQ(stats.core_busy_cycles, out.stats.core_busy_cycles);
      EXPECT_EQ(stats.dma_bytes, out.stats.dma_bytes);
    }
    out = {stats, std::move(c)};
  }
  return out;
}

TEST(SimLaunchTiming, MatmulModelledTimeFallsAsCoresAreAdded) {
  auto device = small_device();
  uint64_t one_core = 0, previous = 0;
  for (uint32_t cores : {1u, 2u, 4u, 8u, 16u, 32u}) {
    SCOPED_TRACE(cores);
    uint64_t cycles = run_matmul(*device, cores).stats.cycles;
    if (previous != 0) {
      EXPECT_LT(cycles, previous);
    }
    if (cores == 1) one_core = cycles;
    previous = cycles;
  }
  // 256^3 fp16 on one core is compute-bound (~16k cycles of MACs); on 32 it
  // meets device memory's floor: 384 KiB at 100 B/cycle plus the turnaround
  // on the 128 KiB written, ~5k cycles.
  EXPECT_GT(one_core, 3 * previous) << "32 cores under 3x faster than one";
}

TEST(SimLaunchTiming, RepeatedLaunchesAreDeterministic) {
  // Same bytes and figures launch after launch, and on a fresh device.
  auto device = small_device();
  MatmulRun first = run_matmul(*device, 32, 3);
  auto other = small_device();
  MatmulRun again = run_matmul(*other, 32);
  EXPECT_EQ(again.c, first.c);
  EXPECT_EQ(again.stats.cycles, first.stats.cycles);
  EXPECT_EQ(again.stats.core_busy_cycles, first.stats.core_busy_cycles);
  EXPECT_DOUBLE_EQ(again.stats.matrix_utilization,
                   first.stats.matrix_utilization);
  // And the bytes are the product: spot-check C[0, 0] and C[255, 255].
  std::vector<double> a(256 * 256), b(256 * 256);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<double>(i * 7 % 16) / 4 - 2;
    b[i] = static_cast<double>(i * 5 % 16) / 4 - 2;
  }
  for (size_t r : {size_t{0}, size_t{255}}) {
    double want = 0;
    for (size_t k = 0; k < 256; ++k) want += a[r * 256 + k] * b[k * 256 + r];
    uint16_t got;
    std::memcpy(&got, first.c.data() + (r * 256 + r) * 2, 2);
    EXPECT_EQ(rt::fp16_to_float(got),
              rt::fp16_to_float(rt::float_to_fp16(static_cast<float>(want))));
  }
}

}  // namespace
}  // namespace spyre::sim::test
