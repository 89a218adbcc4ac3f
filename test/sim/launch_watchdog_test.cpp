// The emulator's watchdog: a valid program can repeat a transfer for hours
// (stride-0 runs), so a launch of more modelled time than
// SPYRE_SIM_LAUNCH_LIMIT_US is refused before it runs, and one still running
// on the host after SPYRE_SIM_WATCHDOG_S is aborted with a device error.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "sim_test_util.h"

namespace spyre::sim::test {
namespace {

// Core 0 reads the first stick of slot 0 `repeats` x 2^20 times (stride 0
// on both sides), then stores it to slot 1.
rt::Program repeated_read(uint32_t repeats) {
  rt::Program p;
  p.name = "repeated_read";
  p.args = {slot("src", 128), slot("dst", 128, rt::DType::kFloat16, true)};
  p.cores = {core(0, {load(xfer(0, 0, 0, 128, 1u << 20, 0, 0, repeats, 0, 0)),
                      store(xfer(1, 0, 0, 128))})};
  return p;
}

// Sets an environment variable for one test (devices read it when made).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(SimWatchdog, ALaunchPastTheModelledLimitIsRefusedBeforeItRuns) {
  const ScopedEnv limit("SPYRE_SIM_LAUNCH_LIMIT_US", "100");
  auto device = small_device();
  const rt::Program program = repeated_read(4);
  Buffers buffers(*device, program);
  buffers.upload(0, std::vector<uint8_t>(128, 7));
  const auto before = buffers.snapshot();
  const auto start = std::chrono::steady_clock::now();
  auto error = raised([&] { run(*device, program, buffers); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
  EXPECT_TRUE(error->mentions("SPYRE_SIM_LAUNCH_LIMIT_US")) << error->message;
  EXPECT_EQ(buffers.snapshot(), before);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(SimWatchdog, ALaunchPastTheHostBudgetIsAborted) {
  const ScopedEnv limit("SPYRE_SIM_LAUNCH_LIMIT_US", "18446744073709551");
  const ScopedEnv watchdog("SPYRE_SIM_WATCHDOG_S", "1");
  auto device = small_device();
  // 2^32 - 1 times 2^20 reads: days of host time unless aborted.
  const rt::Program program = repeated_read(0xFFFFFFFFu);
  Buffers buffers(*device, program);
  const auto start = std::chrono::steady_clock::now();
  auto error = raised([&] { run(*device, program, buffers); });
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
  EXPECT_TRUE(error->mentions("SPYRE_SIM_WATCHDOG_S")) << error->message;
  EXPECT_GE(took, std::chrono::seconds(1));
  EXPECT_LT(took, std::chrono::seconds(30));
  // The device stays usable.
  const rt::Program quick = repeated_read(1);
  Buffers more(*device, quick);
  EXPECT_NO_THROW(run(*device, quick, more));
}

}  // namespace
}  // namespace spyre::sim::test
