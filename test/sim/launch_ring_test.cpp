// End-to-end ring transfers on the emulator device: data between cores,
// tokens ordering device memory, and programs whose channels deadlock.
#include <gtest/gtest.h>

#include <cmath>

#include "sim_test_util.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

rt::RingSend send(uint32_t channel, uint32_t dst_core, uint32_t spad,
                  uint32_t bytes) {
  return rt::RingSend{channel, dst_core, spad, bytes};
}
rt::RingRecv recv(uint32_t channel, uint32_t src_core, uint32_t spad,
                  uint32_t bytes) {
  return rt::RingRecv{channel, src_core, spad, bytes, {}};
}

class SimLaunchRingPair : public ::testing::TestWithParam<uint32_t> {};

// Core 0 loads 4 KiB and sends it to core `dst`, which stores it.
TEST_P(SimLaunchRingPair, SendMovesTheBytesAndPaysPerHop) {
  const uint32_t dst = GetParam();
  constexpr uint32_t kBytes = 4096;
  auto device = small_device();
  rt::Program p;
  p.name = "ring_pair";
  p.args = {slot("src", kBytes), slot("dst", kBytes, DType::kFloat16, true)};
  p.cores = {
      core(0, {load(xfer(0, 0, 0, kBytes)), send(7, dst, 0, kBytes)}),
      core(dst, {recv(7, 0, 65536, kBytes), store(xfer(1, 0, 65536, kBytes))})};
  Buffers buffers(*device, p);
  const std::vector<uint8_t> data = random_bytes(kBytes, dst);
  buffers.upload(0, data);

  rt::LaunchStats stats = run(*device, p, buffers);

  EXPECT_EQ(buffers.download<uint8_t>(1), data);
  EXPECT_EQ(stats.ring_bytes, kBytes);
  EXPECT_EQ(stats.dma_bytes, 2 * kBytes);
  // load, send, hops, receive, store: one dependent chain.
  const rt::CostTable& t = kTimingTable;
  const uint64_t hops = std::min(dst, 32 - dst);
  EXPECT_EQ(stats.cycles,
            lone_dma_cycles(kBytes) + store_after_reads_cycles(kBytes) +
                t.ring_send_fixed_cycles + kBytes / t.ring_bytes_per_cycle +
                hops * t.ring_hop_cycles + t.ring_recv_cycles);
  EXPECT_EQ(stats.core_busy_cycles[0], lone_dma_cycles(kBytes) +
                                           t.ring_send_fixed_cycles +
                                           kBytes / t.ring_bytes_per_cycle);
  EXPECT_EQ(stats.core_busy_cycles[dst],
            store_after_reads_cycles(kBytes) + t.ring_recv_cycles);
}

// The transpose pipeline: core 0 sends `rows` sticks (rows of X, one stick
// of columns each) and core 5 lands them transposed, X^T with rows `pitch`
// bytes apart; only `cols` columns of each stick land (a ragged last stick),
// and the padding after each landed row keeps what the scratchpad held. The
// send runs at the pipeline's rate: relayout_transfer_cycles of a program
// over two cores.
TEST(SimLaunchRingTranspose, LandsTheSticksTransposedAtThePipelinesRate) {
  for (DType t : {DType::kFloat16, DType::kFloat32, DType::kInt8}) {
    SCOPED_TRACE(rt::dtype_name(t));
    const uint32_t es = rt::element_size(t);
    const uint32_t rows = 40, cols = rt::elements_per_stick(t) - 3;
    const uint32_t pitch = (rows * es + 127) / 128 * 128;  // whole sticks
    const uint32_t in_bytes = rows * 128, out_bytes = cols * pitch;
    auto device = small_device();
    rt::Program p;
    p.name = "ring_transpose";
    p.args = {slot("x", in_bytes, t), slot("xt", out_bytes, t, true)};
    p.cores = {
        core(0, {load(xfer(0, 0, 0, in_bytes)), send(3, 5, 0, in_bytes)}),
        core(5, {load(xfer(1, 0, 65536, out_bytes)),
                 rt::RingRecv{3, 0, 65536, in_bytes,
                              rt::StickTranspose{t, cols, pitch}},
                 store(xfer(1, 0, 65536, out_bytes))})};
    Buffers buffers(*device, p);
    const std::vector<uint8_t> x = random_bytes(in_bytes, 11);
    const std::vector<uint8_t> before = random_bytes(out_bytes, 12);
    buffers.upload(0, x);
    buffers.upload(1, before);

    rt::LaunchStats stats = run(*device, p, buffers);

    const std::vector<uint8_t> xt = buffers.download<uint8_t>(1);
    for (uint32_t c = 0; c < cols; ++c) {
      for (uint32_t b = 0; b < pitch; ++b) {
        const uint32_t r = b / es;
        const uint8_t want =
            r < rows ? x[r * 128 + c * es + b % es] : before[c * pitch + b];
        ASSERT_EQ(xt[c * pitch + b], want) << "row " << c << " byte " << b;
      }
    }
    const rt::CostTable& table = kTimingTable;
    EXPECT_EQ(
        table.relayout_transfer_cycles(in_bytes, 2),
        static_cast<uint64_t>(std::ceil(
            (table.relayout_run_ns + table.relayout_run_ns_per_log2_split) *
            table.clock_ghz)) +
            (in_bytes + table.relayout_bytes_per_cycle - 1) /
                table.relayout_bytes_per_cycle);
    EXPECT_EQ(stats.core_busy_cycles[0],
              lone_dma_cycles(in_bytes) +
                  table.relayout_transfer_cycles(in_bytes, 2));
    EXPECT_EQ(stats.ring_bytes, in_bytes);
  }
}

// Neighbours both ways round, and distant cores (the shorter way is taken:
// 0 -> 31 is one hop, 0 -> 16 sixteen).
INSTANTIATE_TEST_SUITE_P(Destinations, SimLaunchRingPair,
                         ::testing::Values(1u, 31u, 9u, 16u, 23u));

// Run on the launching thread alone (the default for a launch this small)
// and with the helper thread (SPYRE_SIM_INLINE_CYCLES=0): same bytes, same
// modelled figures.
class SimLaunchRingThreads : public ::testing::TestWithParam<const char*> {};

TEST_P(SimLaunchRingThreads, RelayAroundTheWholeRingAddsOnEveryCore) {
  // fp32 values go 0 -> 1 -> ... -> 31 -> 0; every core on the way adds 1.
  constexpr uint32_t kCols = 256, kBytes = kCols * 4;
  ScopedEnv inline_cycles("SPYRE_SIM_INLINE_CYCLES", GetParam());
  auto device = small_device();
  rt::Program p;
  p.name = "relay";
  p.args = {slot("x", kBytes, DType::kFloat32),
            slot("y", kBytes, DType::kFloat32, true)};
  rt::Tile t = tile(0, DType::kFloat32, kBytes);
  rt::Vector add_one = vec(rt::VecOp::kAdd, t, t, 1, kCols);
  add_one.src1_is_imm = true;
  add_one.imm = 1;
  p.cores.push_back(
      core(0, {load(xfer(0, 0, 0, kBytes)), send(0, 1, 0, kBytes),
               recv(31, 31, 0, kBytes), store(xfer(1, 0, 0, kBytes))}));
  for (uint32_t c = 1; c < 32; ++c) {
    p.cores.push_back(core(c, {recv(c - 1, c - 1, 0, kBytes), add_one,
                               send(c, (c + 1) % 32, 0, kBytes)}));
  }
  Buffers buffers(*device, p);
  std::vector<float> x(kCols);
  for (uint32_t i = 0; i < kCols; ++i) x[i] = 0.25f * i - 7;
  buffers.upload(0, x);

  rt::LaunchStats stats = run(*device, p, buffers);

  std::vector<float> y = buffers.download<float>(1);
  for (uint32_t i = 0; i < kCols; ++i) EXPECT_EQ(y[i], x[i] + 31) << i;
  EXPECT_EQ(stats.ring_bytes, 32u * kBytes);
  EXPECT_EQ(stats.instructions, 4u + 31u * 3u);
  for (uint32_t c = 0; c < 32; ++c) EXPECT_GT(stats.core_busy_cycles[c], 0u);
}

INSTANTIATE_TEST_SUITE_P(InlineOrHelper, SimLaunchRingThreads,
                         ::testing::Values("0", "1000000000"));

// Core 0 writes device memory, then sends a zero-byte token; core 5 waits
// for the token, then reads what core 0 wrote.
rt::Program token_program() {
  constexpr uint32_t kBytes = 8192;
  rt::Program p;
  p.name = "token";
  p.args = {slot("src", kBytes), slot("staging", kBytes),
            slot("dst", kBytes, DType::kFloat16, true)};
  p.cores = {core(0, {load(xfer(0, 0, 0, kBytes)), store(xfer(1, 0, 0, kBytes)),
                      send(3, 5, 0, 0)}),
             core(5, {recv(3, 0, 0, 0), load(xfer(1, 0, 4096, kBytes)),
                      store(xfer(2, 0, 4096, kBytes))})};
  return p;
}

TEST(SimLaunchRing, ZeroByteTokenOrdersDeviceMemoryAcrossCores) {
  auto device = small_device();
  rt::Program p = token_program();
  rt::LoadedProgram loaded(*device, p);
  Buffers buffers(*device, p);
  // Repeated launches with fresh data: core 5 must always see this launch's
  // bytes, never the previous launch's staging contents.
  for (uint32_t launch = 0; launch < 20; ++launch) {
    const std::vector<uint8_t> data = random_bytes(8192, 100 + launch);
    buffers.upload(0, data);
    loaded.run(buffers.bindings);
    ASSERT_EQ(buffers.download<uint8_t>(2), data) << "launch " << launch;
  }
}

TEST(SimLaunchRing, ZeroByteTokenOrdersModelledTime) {
  // The modelled schedule must respect the token too: core 5's load cannot
  // start before core 0's store has finished, so the launch is one chain of
  // four DMAs, a token send, the hops and the receive.
  auto device = small_device();
  rt::LaunchStats stats = modelled(*device, token_program());
  const rt::CostTable& t = kTimingTable;
  // Each store adds its bytes to the launch's read/write overlap.
  EXPECT_EQ(stats.cycles, 2 * lone_dma_cycles(8192) +
                              2 * store_after_reads_cycles(8192) +
                              t.ring_send_fixed_cycles + 5 * t.ring_hop_cycles +
                              t.ring_recv_cycles);
  EXPECT_EQ(stats.ring_bytes, 0u);
}

TEST(SimLaunchRing, SendsBeforeReceivesBothWaysRun) {
  // Core 2 and core 3 swap 1 KiB: both send first, so nothing waits forever.
  auto device = small_device();
  rt::Program p;
  p.name = "swap";
  p.args = {slot("a", 1024), slot("b", 1024)};
  p.cores = {core(2, {load(xfer(0, 0, 0, 1024)), send(0, 3, 0, 1024),
                      recv(1, 3, 0, 1024), store(xfer(0, 0, 0, 1024))}),
             core(3, {load(xfer(1, 0, 0, 1024)), send(1, 2, 0, 1024),
                      recv(0, 2, 0, 1024), store(xfer(1, 0, 0, 1024))})};
  Buffers buffers(*device, p);
  const auto a = random_bytes(1024, 1), b = random_bytes(1024, 2);
  buffers.upload(0, a);
  buffers.upload(1, b);
  run(*device, p, buffers);
  EXPECT_EQ(buffers.download<uint8_t>(0), b);
  EXPECT_EQ(buffers.download<uint8_t>(1), a);
}

TEST(SimLaunchRing, DeadlockedChannelsAreRejectedAtLoad) {
  // A cycle of receives: 0 waits on 2, 2 on 1, 1 on 0, each before sending.
  auto device = small_device();
  rt::Program p;
  p.name = "cycle";
  p.args = {slot("x", 128, DType::kFloat16, true)};
  rt::Constant k;
  k.name = "k";
  k.data.assign(128, 1);
  p.constants = {k};
  p.cores = {core(0, {recv(0, 2, 0, 128), send(1, 1, 0, 128),
                      store(xfer(0, 0, 0, 128))}),
             core(1, {recv(1, 0, 0, 128), send(2, 2, 0, 128)}),
             core(2, {recv(2, 1, 0, 128), send(0, 0, 0, 128)})};
  const uint64_t in_use = device->bytes_in_use();
  auto error = raised([&] { rt::LoadedProgram loaded(*device, p); });
  ASSERT_TRUE(error.has_value()) << "a deadlocking program loaded";
  EXPECT_EQ(error->code, rt::ErrorCode::kMalformedProgram);
  EXPECT_TRUE(error->mentions("deadlock")) << error->message;
  EXPECT_TRUE(error->mentions("core 0 waits on channel 0 from core 2"))
      << error->message;
  EXPECT_TRUE(error->mentions("core 1 waits on channel 1 from core 0"))
      << error->message;
  EXPECT_EQ(device->bytes_in_use(), in_use) << "the constant was not freed";
}

}  // namespace
}  // namespace spyre::sim::test
