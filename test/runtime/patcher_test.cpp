// The patch plan and the launch-time patcher on the fake host-memory device:
// what reaches execute() is exactly base + offset, and every failing step
// raises its own error before anything runs or any memory changes.
#include "spyre/runtime/patcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fake_device.h"
#include "program_samples.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

using testing::FakeDevice;
using testing::kSlotBias;
using testing::kSlotW;
using testing::kSlotX;
using testing::kSlotY;
using testing::sample_program;

TEST(PatchPlan, OneRelocationPerDeviceAccessInProgramOrder) {
  PatchPlan plan = make_patch_plan(sample_program());
  struct Expected {
    uint32_t core, instruction, slot;
    uint64_t offset;
    int64_t lo, hi;
  };
  const std::vector<Expected> expected = {
      {0, 0, kSlotX, 0, 0, 4096},       {0, 1, kSlotW, 0, 0, 4096},
      {0, 2, kSlotBias, 0, 0, 256},     {0, 10, kSlotW, 0, 0, 4096},
      {0, 11, kSlotY, 0, 0, 8064},      {1, 0, kSlotW, 0, 0, 4096},
      {1, 2, kSlotY, 4096, 3968, 4224},
  };
  ASSERT_EQ(plan.relocations.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const Relocation& r = plan.relocations[i];
    EXPECT_EQ(r.core_index, expected[i].core) << i;
    EXPECT_EQ(r.instruction, expected[i].instruction) << i;
    EXPECT_EQ(r.slot, expected[i].slot) << i;
    EXPECT_EQ(r.offset, expected[i].offset) << i;
    EXPECT_EQ(r.lo, expected[i].lo) << i;
    EXPECT_EQ(r.hi, expected[i].hi) << i;
  }
  ASSERT_EQ(plan.slot_lo.size(), 4u);
  ASSERT_EQ(plan.slot_hi.size(), 4u);
  EXPECT_EQ(plan.slot_lo[kSlotX], 0);
  EXPECT_EQ(plan.slot_hi[kSlotX], 4096);
  EXPECT_EQ(plan.slot_hi[kSlotY], 8064);
  EXPECT_EQ(plan.slot_hi[kSlotBias], 256);
}

TEST(PatchPlan, UnaccessedSlotHasEmptyRange) {
  Program p = testing::copy_program();
  p.args.push_back({"unused", DType::kInt8, 128, {}, false});
  PatchPlan plan = make_patch_plan(p);
  ASSERT_EQ(plan.slot_lo.size(), 3u);
  EXPECT_GE(plan.slot_lo[2], plan.slot_hi[2]);
  EXPECT_LT(plan.slot_lo[0], plan.slot_hi[0]);
}

// The sample's arguments in fresh fake allocations, filled with a pattern
// so tests can prove that failed launches leave memory untouched.
class PatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loaded_ = std::make_unique<LoadedProgram>(device_, sample_program());
    const Program& p = loaded_->program();
    for (size_t s = 0; s < p.args.size(); ++s) {
      const ArgSlot& slot = p.args[s];
      ArgBinding arg;
      arg.ptr = device_.allocate(slot.bytes);
      arg.bytes = slot.bytes;
      arg.dtype = slot.dtype;
      arg.device_size = slot.layout.device_size;
      std::vector<uint8_t> pattern(slot.bytes, static_cast<uint8_t>(0xA0 + s));
      device_.copy_to_device(arg.ptr, pattern.data(), pattern.size());
      args_.push_back(arg);
    }
  }

  std::vector<std::vector<uint8_t>> snapshot() {
    std::vector<std::vector<uint8_t>> out;
    for (const ArgBinding& arg : args_) {
      std::vector<uint8_t> bytes(arg.bytes);
      device_.copy_to_host(bytes.data(), arg.ptr, arg.bytes);
      out.push_back(std::move(bytes));
    }
    return out;
  }

  // Runs with `args` and expects `code` with `fragment` in the message,
  // no execute() and unchanged memory.
  void expect_failure(const std::vector<ArgBinding>& args, ErrorCode code,
                      const std::string& fragment) {
    auto before = snapshot();
    try {
      loaded_->run(args);
      ADD_FAILURE() << "expected " << error_code_name(code);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "message was: " << e.what();
    }
    EXPECT_EQ(device_.launches(), 0);
    EXPECT_EQ(snapshot(), before);
  }

  FakeDevice device_;
  std::unique_ptr<LoadedProgram> loaded_;
  std::vector<ArgBinding> args_;
};

TEST_F(PatcherTest, LoadUploadsConstantsAndPrepares) {
  EXPECT_EQ(device_.prepares(), 1);
  EXPECT_EQ(loaded_->plan().relocations.size(), 7u);
  // Relocation 2 reads the constant: its address is the upload.
  std::vector<DevicePtr> addresses;
  loaded_->relocate(args_, addresses);
  const auto& bias = loaded_->program().constants[0].data;
  std::vector<uint8_t> uploaded(bias.size());
  device_.copy_to_host(uploaded.data(), addresses[2], uploaded.size());
  EXPECT_EQ(uploaded, bias);
}

TEST_F(PatcherTest, ConstantsAreFreedWithTheProgram) {
  uint64_t with_program = device_.bytes_in_use();
  loaded_.reset();
  EXPECT_EQ(with_program - device_.bytes_in_use(), 256u);
}

TEST_F(PatcherTest, AddressesReachingExecuteAreBasePlusOffset) {
  LaunchStats stats = loaded_->run(args_);
  EXPECT_EQ(stats.cycles, 1000u);
  ASSERT_EQ(device_.launches(), 1);
  std::vector<DevicePtr> seen = device_.last_addresses();
  const PatchPlan& plan = loaded_->plan();
  ASSERT_EQ(seen.size(), plan.relocations.size());
  std::vector<DevicePtr> constant_addresses;
  loaded_->relocate(args_, constant_addresses);
  for (size_t i = 0; i < seen.size(); ++i) {
    const Relocation& r = plan.relocations[i];
    if (r.slot < args_.size()) {
      EXPECT_EQ(seen[i], args_[r.slot].ptr + r.offset) << i;
    } else {
      EXPECT_EQ(seen[i], constant_addresses[i]) << i;
    }
  }
  EXPECT_EQ(seen[6], args_[kSlotY].ptr + 4096);
}

TEST_F(PatcherTest, LargerAllocationAndAnyLayoutSlotAreAccepted) {
  args_[kSlotW].bytes += 1024;
  args_[kSlotW].device_size = {1, 2, 3};  // slot w declares no layout
  EXPECT_NO_THROW(loaded_->run(args_));
  EXPECT_EQ(device_.launches(), 1);
}

TEST_F(PatcherTest, BindRejectsWrongArgumentCount) {
  auto args = args_;
  args.pop_back();
  expect_failure(args, ErrorCode::kBindError, "expects 3 arguments, got 2");
}

TEST_F(PatcherTest, BindRejectsWrongDtype) {
  auto args = args_;
  args[kSlotW].dtype = DType::kBFloat16;
  expect_failure(args, ErrorCode::kBindError,
                 "argument slot 1 'w' expects dtype float16, got bfloat16");
}

TEST_F(PatcherTest, BindRejectsSmallAllocation) {
  auto args = args_;
  args[kSlotY].bytes = 8064;
  expect_failure(args, ErrorCode::kBindError,
                 "argument slot 2 'y' expects at least 8192 bytes, got an "
                 "allocation of 8064 bytes");
}

TEST_F(PatcherTest, BindRejectsLayoutMismatch) {
  auto args = args_;
  args[kSlotX].device_size = {64, 32};
  expect_failure(args, ErrorCode::kBindError,
                 "argument slot 0 'x' expects device layout [32, 64], got "
                 "[64, 32]");
}

TEST_F(PatcherTest, BindRejectsNullPointer) {
  auto args = args_;
  args[kSlotX].ptr = 0;
  expect_failure(args, ErrorCode::kBindError,
                 "argument slot 0 'x' is bound to a null device pointer");
}

// A view into a larger allocation, starting 256 bytes in: only the bytes
// from its pointer to the allocation's end count, and that is too short.
TEST_F(PatcherTest, BindRejectsOffsetViewTooShortForItsSlot) {
  auto args = args_;
  args[kSlotY].ptr += 256;
  args[kSlotY].bytes -= 256;
  expect_failure(args, ErrorCode::kBindError,
                 "argument slot 2 'y' expects at least 8192 bytes, got an "
                 "allocation of 7936 bytes");
}

TEST_F(PatcherTest, RelocateRejectsAddressOverflow) {
  auto args = args_;
  args[kSlotY].ptr = std::numeric_limits<DevicePtr>::max() - 1024;
  expect_failure(args, ErrorCode::kRelocateError,
                 "relocation 6 (core 1, instruction 2) of slot 2");
}

TEST_F(PatcherTest, VerifyRejectsAccessOutsideTheAllocation) {
  std::vector<DevicePtr> addresses;
  loaded_->bind(args_);
  loaded_->relocate(args_, addresses);
  EXPECT_NO_THROW(loaded_->verify(args_, addresses));
  addresses[4] += 256;  // the store to y slides past y's end
  try {
    loaded_->verify(args_, addresses);
    FAIL() << "expected kVerifyError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kVerifyError);
    EXPECT_NE(std::string(e.what()).find(
                  "relocation 4 (core 0, instruction 11) of slot 2 'y' "
                  "accesses [256, 8320) relative to its allocation of 8192"),
              std::string::npos)
        << e.what();
  }
  addresses = {};
  loaded_->relocate(args_, addresses);
  addresses[2] -= 128;  // the constant read, before its upload
  EXPECT_THROW(loaded_->verify(args_, addresses), Error);
  EXPECT_EQ(device_.launches(), 0);
}

// A device whose scratchpad shrinks after load, so only verify() can catch
// the oversized footprint.
class ShrinkingDevice : public FakeDevice {
 public:
  ShrinkingDevice() : props_(FakeDevice::properties()) {}
  const DeviceProperties& properties() const override { return props_; }
  DeviceProperties props_;
};

TEST(PatcherFootprint, VerifyRejectsFootprintBeyondTheDevice) {
  ShrinkingDevice device;
  LoadedProgram loaded(device, testing::copy_program());
  ArgBinding src{device.allocate(128), 128, DType::kFloat32, {}};
  ArgBinding dst{device.allocate(128), 128, DType::kFloat32, {}};
  std::vector<ArgBinding> args = {src, dst};
  EXPECT_NO_THROW(loaded.run(args));
  device.props_.chip.scratchpad_bytes = 64;
  try {
    loaded.run(args);
    FAIL() << "expected kVerifyError";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kVerifyError);
    EXPECT_NE(std::string(e.what()).find("core 0 needs a scratchpad footprint "
                                         "of 128 bytes but the device has 64"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(device.launches(), 1);
}

TEST(PatcherLoad, MalformedProgramIsRejectedWithoutLeaks) {
  FakeDevice device;
  Program p = sample_program();
  p.cores[1].core = 40;
  try {
    LoadedProgram loaded(device, p);
    FAIL() << "expected kMalformedProgram";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kMalformedProgram);
  }
  EXPECT_EQ(device.bytes_in_use(), 0u);
  EXPECT_EQ(device.prepares(), 0);
}

TEST_F(PatcherTest, LaunchOnAStreamRunsInOrderAndReportsStats) {
  Stream stream(device_, 1);
  std::atomic<int> done{0};
  std::atomic<uint64_t> cycles{0};
  for (int i = 0; i < 3; ++i) {
    loaded_->launch(stream, args_, [&](const LaunchStats& stats) {
      cycles += stats.cycles;
      ++done;
    });
  }
  loaded_->launch(stream, args_);  // no callback
  stream.synchronize();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(cycles.load(), 3000u);
  EXPECT_EQ(device_.launches(), 4);
  EXPECT_DOUBLE_EQ(stream.device_time_ns(), 4000.0);
  EXPECT_EQ(device_.last_addresses()[0], args_[kSlotX].ptr);
}

// A cache may evict a program while launches of it are queued: the queued
// launch owns a share of the program, which is released once it ran.
TEST_F(PatcherTest, QueuedLaunchOwnsASharedProgram) {
  Stream stream(device_, 3);
  std::mutex gate;
  std::unique_lock<std::mutex> hold(gate);
  stream.enqueue([&] {  // keeps the launch below queued until released
    std::lock_guard<std::mutex> wait(gate);
    return 0.0;
  });
  auto shared =
      std::make_shared<const LoadedProgram>(device_, sample_program());
  std::weak_ptr<const LoadedProgram> watch = shared;
  LoadedProgram::launch(std::move(shared), stream, args_);
  EXPECT_FALSE(watch.expired());
  hold.unlock();
  stream.synchronize();
  EXPECT_EQ(device_.launches(), 1);
  EXPECT_TRUE(watch.expired());
}

TEST_F(PatcherTest, LaunchFailsInTheCallerBeforeEnqueueing) {
  Stream stream(device_, 2);
  auto args = args_;
  args[kSlotW].dtype = DType::kInt8;
  EXPECT_THROW(loaded_->launch(stream, args), Error);
  stream.synchronize();
  EXPECT_EQ(device_.launches(), 0);
}

}  // namespace
}  // namespace spyre::rt
