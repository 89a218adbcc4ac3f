// Memory safety of launches on the emulator device: accesses outside the
// bound allocations and scratchpad footprints beyond the core's 2 MiB are
// rejected, and a rejected launch leaves device memory as it was.
#include <gtest/gtest.h>

#include <future>

#include "sim_test_util.h"
#include "spyre/runtime/stream.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

// Core 0 copies slot 0 to slot 1, then slot 0 to slot 2 (4 KiB each).
rt::Program copy_twice() {
  rt::Program p;
  p.name = "copy_twice";
  p.args = {slot("src", 4096), slot("first", 4096, DType::kFloat16, true),
            slot("second", 4096, DType::kFloat16, true)};
  p.cores = {core(0, {load(xfer(0, 0, 0, 4096)), store(xfer(1, 0, 0, 4096)),
                      store(xfer(2, 0, 0, 4096))})};
  return p;
}

// Device buffers for copy_twice with recognisable contents, and a
// neighbouring allocation an out-of-bounds store would hit first.
struct Fixture {
  std::unique_ptr<rt::Device> device = small_device();
  rt::Program program = copy_twice();
  Buffers buffers{*device, program};
  rt::DevicePtr neighbour = device->allocate(8192);

  Fixture() {
    buffers.upload(0, random_bytes(4096, 1));
    buffers.upload(1, std::vector<uint8_t>(4096, 0x11));
    buffers.upload(2, std::vector<uint8_t>(4096, 0x22));
    device->fill(neighbour, 0x33, 8192);
  }
  ~Fixture() { device->free(neighbour); }

  std::vector<uint8_t> neighbour_bytes() {
    std::vector<uint8_t> out(8192);
    device->copy_to_host(out.data(), neighbour, out.size());
    return out;
  }
};

TEST(SimLaunchSafety, VerifyRejectsAPatchedAddressOutsideItsAllocation) {
  Fixture f;
  rt::LoadedProgram loaded(*f.device, f.program);
  const auto before = f.buffers.snapshot();
  const auto neighbour = f.neighbour_bytes();

  loaded.bind(f.buffers.bindings);
  std::vector<rt::DevicePtr> addresses;
  loaded.relocate(f.buffers.bindings, addresses);
  ASSERT_EQ(addresses.size(), 3u);
  // A corrupted patch: the second store lands one allocation further on.
  addresses[2] += 4096;
  auto error = raised([&] { loaded.verify(f.buffers.bindings, addresses); });
  ASSERT_TRUE(error.has_value()) << "verify accepted an out-of-bounds access";
  EXPECT_EQ(error->code, rt::ErrorCode::kVerifyError);
  EXPECT_TRUE(error->mentions("relocation 2")) << error->message;
  EXPECT_TRUE(error->mentions("slot 2 'second'")) << error->message;
  EXPECT_TRUE(error->mentions("accesses [4096, 8192)")) << error->message;
  EXPECT_EQ(f.buffers.snapshot(), before);
  EXPECT_EQ(f.neighbour_bytes(), neighbour);
}

TEST(SimLaunchSafety, VerifyRejectsABindingSmallerThanTheAccesses) {
  // Verify does not rely on bind having run: a view that ends before the
  // program's accesses do is caught from the patched addresses alone.
  Fixture f;
  rt::LoadedProgram loaded(*f.device, f.program);
  const auto before = f.buffers.snapshot();
  std::vector<rt::ArgBinding> args = f.buffers.bindings;
  args[1].bytes = 2048;
  std::vector<rt::DevicePtr> addresses;
  loaded.relocate(args, addresses);
  auto error = raised([&] { loaded.verify(args, addresses); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kVerifyError);
  EXPECT_TRUE(error->mentions("'first' accesses [0, 4096)")) << error->message;
  EXPECT_TRUE(error->mentions("allocation of 2048 bytes")) << error->message;
  // The whole launch path stops at bind for the same binding.
  auto bind_error = raised([&] { loaded.run(args); });
  ASSERT_TRUE(bind_error.has_value());
  EXPECT_EQ(bind_error->code, rt::ErrorCode::kBindError);
  EXPECT_EQ(f.buffers.snapshot(), before);
}

TEST(SimLaunchSafety, BindingThatOverstatesItsAllocationIsADeviceError) {
  // The patcher trusts a binding's byte count; the device checks the real
  // allocations before running anything, so the first store (inside its
  // allocation) must not happen either.
  Fixture f;
  rt::Program program = f.program;
  program.args[2].bytes = 8192;
  program.cores[0].instructions[2] = store(xfer(2, 4096, 0, 4096));
  rt::LoadedProgram loaded(*f.device, program);
  std::vector<rt::ArgBinding> args = f.buffers.bindings;
  args[2].bytes = 8192;  // the allocation behind it holds 4096
  const auto before = f.buffers.snapshot();
  const auto neighbour = f.neighbour_bytes();

  auto error = raised([&] { loaded.run(args); });
  ASSERT_TRUE(error.has_value()) << "a store past its allocation ran";
  EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
  EXPECT_TRUE(error->mentions("outside every live allocation"))
      << error->message;
  EXPECT_EQ(f.buffers.snapshot(), before) << "a failed launch wrote memory";
  EXPECT_EQ(f.neighbour_bytes(), neighbour);
}

TEST(SimLaunchSafety, AllocationFreedBeforeAQueuedLaunchRunsFailsCleanly) {
  // A launch published to a stream whose output is freed before the stream
  // reaches it: the stream reports a device error and writes nothing.
  Fixture f;
  rt::LoadedProgram loaded(*f.device, f.program);
  rt::DevicePtr doomed = f.device->allocate(4096);
  std::vector<rt::ArgBinding> args = f.buffers.bindings;
  args[2].ptr = doomed;
  const auto before = f.buffers.snapshot();
  const auto neighbour = f.neighbour_bytes();
  {
    rt::Stream stream(*f.device, 1);
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    stream.enqueue([opened] {
      opened.wait();
      return 0.0;
    });
    bool ran = false;
    loaded.launch(stream, args, [&](const rt::LaunchStats&) { ran = true; });
    f.device->free(doomed);
    gate.set_value();
    auto error = raised([&] { stream.synchronize(); });
    ASSERT_TRUE(error.has_value()) << "the launch ran on freed memory";
    EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
    EXPECT_FALSE(ran);
  }
  EXPECT_EQ(f.buffers.snapshot(), before);
  EXPECT_EQ(f.neighbour_bytes(), neighbour);
}

TEST(SimLaunchSafety, ScratchpadFootprintOver2MiBIsRejectedAtLoad) {
  auto device = small_device();
  rt::Program p = copy_twice();
  p.cores[0].scratchpad_bytes = (2u << 20) + 128;
  auto error = raised([&] { rt::LoadedProgram loaded(*device, p); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kMalformedProgram);
  EXPECT_TRUE(
      error->mentions("footprint of 2097280 bytes, more than the "
                      "device's 2097152"))
      << error->message;
  EXPECT_EQ(device->bytes_in_use(), 0u);
}

TEST(SimLaunchSafety, ScratchpadAccessPastTheFootprintIsRejectedAtLoad) {
  // A 64 KiB footprint and a load that reaches one stick past it.
  auto device = small_device();
  rt::Program p = copy_twice();
  p.cores[0].scratchpad_bytes = 64u << 10;
  p.cores[0].instructions[0] = load(xfer(0, 0, (64u << 10) - 3968, 4096));
  auto error = raised([&] { rt::LoadedProgram loaded(*device, p); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kMalformedProgram);
  EXPECT_TRUE(error->mentions("scratchpad range [61568, 65664)"))
      << error->message;
  // The same load inside the footprint is accepted.
  p.cores[0].instructions[0] = load(xfer(0, 0, (64u << 10) - 4096, 4096));
  p.cores[0].instructions[1] = store(xfer(1, 0, (64u << 10) - 4096, 4096));
  p.cores[0].instructions[2] = store(xfer(2, 0, (64u << 10) - 4096, 4096));
  rt::LoadedProgram loaded(*device, p);
  Buffers buffers(*device, p);
  const auto data = random_bytes(4096, 3);
  buffers.upload(0, data);
  loaded.run(buffers.bindings);
  EXPECT_EQ(buffers.download<uint8_t>(2), data);
}

}  // namespace
}  // namespace spyre::sim::test
