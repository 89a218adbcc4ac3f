// The "sim" backend's devices: how many there are (SPYRE_SIM_DEVICES), and
// that each has its own memory and runs launches independently.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "sim_test_util.h"
#include "spyre/runtime/registry.h"
#include "spyre/runtime/stream.h"

namespace spyre::sim::test {
namespace {

using rt::DType;

std::unique_ptr<rt::Backend> sim_backend() { return rt::create_backend("sim"); }

TEST(SimDevices, CountComesFromSpyreSimDevicesDefaultTwo) {
  auto backend = sim_backend();
  EXPECT_EQ(backend->name(), "sim");
  {
    ScopedEnv unset("SPYRE_SIM_DEVICES", nullptr);
    EXPECT_EQ(backend->device_count(), 2);
  }
  {
    ScopedEnv empty("SPYRE_SIM_DEVICES", "");
    EXPECT_EQ(backend->device_count(), 2);
  }
  {
    ScopedEnv five("SPYRE_SIM_DEVICES", "5");
    EXPECT_EQ(backend->device_count(), 5);
  }
  // "-1" once parsed as 2^64 - 1 and gave a device count of -1.
  for (const char* bad :
       {"0", "two", "3x", "-1", " 2", "+2", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    ScopedEnv env("SPYRE_SIM_DEVICES", bad);
    auto error = raised([&] { backend->device_count(); });
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, rt::ErrorCode::kBackendError);
    EXPECT_TRUE(error->mentions(std::string("SPYRE_SIM_DEVICES='") + bad))
        << error->message;
  }
  {  // 0 is a valid inline limit (every multi-core launch uses two threads)
    ScopedEnv zero("SPYRE_SIM_INLINE_CYCLES", "0");
    EXPECT_NE(backend->create_device(0), nullptr);
    ScopedEnv bad("SPYRE_SIM_INLINE_CYCLES", "-5");
    auto error = raised([&] { backend->create_device(0); });
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, rt::ErrorCode::kBackendError);
    EXPECT_TRUE(error->mentions("SPYRE_SIM_INLINE_CYCLES='-5'"))
        << error->message;
  }
  ScopedEnv negative_memory("SPYRE_SIM_MEMORY_GB", "-1");
  auto error = raised([&] { backend->create_device(0); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kBackendError);
  EXPECT_TRUE(error->mentions("SPYRE_SIM_MEMORY_GB='-1'")) << error->message;
}

TEST(SimDevices, IndexOutOfRangeSaysHowToGetMore) {
  auto backend = sim_backend();
  ScopedEnv three("SPYRE_SIM_DEVICES", "3");
  ScopedEnv small("SPYRE_SIM_MEMORY_GB", "1");
  auto last = backend->create_device(2);
  EXPECT_EQ(last->properties().index, 2);
  EXPECT_EQ(last->properties().memory_bytes, 1ull << 30);
  EXPECT_EQ(last->properties().backend, "sim");
  EXPECT_EQ(last->properties().chip.num_cores, 32u);
  for (int index : {3, -1}) {
    auto error = raised([&] { backend->create_device(index); });
    ASSERT_TRUE(error.has_value());
    EXPECT_EQ(error->code, rt::ErrorCode::kInvalidArgument);
    EXPECT_TRUE(error->mentions("set SPYRE_SIM_DEVICES")) << error->message;
  }
}

TEST(SimDevices, EachDeviceHasItsOwnMemory) {
  auto backend = sim_backend();
  ScopedEnv small("SPYRE_SIM_MEMORY_GB", "1");
  auto d0 = backend->create_device(0);
  auto d1 = backend->create_device(1);
  rt::DevicePtr p0 = d0->allocate(4096);
  rt::DevicePtr p1 = d1->allocate(4096);
  const auto a = random_bytes(4096, 1), b = random_bytes(4096, 2);
  d0->copy_to_device(p0, a.data(), a.size());
  d1->copy_to_device(p1, b.data(), b.size());
  std::vector<uint8_t> back(4096);
  d0->copy_to_host(back.data(), p0, back.size());
  EXPECT_EQ(back, a);
  d1->copy_to_host(back.data(), p1, back.size());
  EXPECT_EQ(back, b);
  EXPECT_EQ(d0->bytes_in_use(), 4096u);
  EXPECT_EQ(d1->bytes_in_use(), 4096u);
  // One device's address means nothing to the other.
  auto error = raised([&] { d1->copy_to_host(back.data(), p0, 128); });
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->code, rt::ErrorCode::kDeviceError);
  EXPECT_THROW(d1->free(p0), rt::Error);
  d0->free(p0);
  EXPECT_EQ(d0->bytes_in_use(), 0u);
  EXPECT_EQ(d1->bytes_in_use(), 4096u);
  d1->copy_to_host(back.data(), p1, back.size());
  EXPECT_EQ(back, b) << "freeing on device 0 touched device 1";
  d1->free(p1);
}

// y = x + 3 over 1024 fp32 values, split across cores 0, 8, 16 and 24.
rt::Program add_program() {
  rt::Program p;
  p.name = "add";
  p.args = {slot("x", 4096, DType::kFloat32),
            slot("y", 4096, DType::kFloat32, true)};
  rt::Tile t = tile(0, DType::kFloat32, 1024);
  rt::Vector add = vec(rt::VecOp::kAdd, t, t, 1, 256);
  add.src1_is_imm = true;
  add.imm = 3;
  for (uint32_t c = 0; c < 4; ++c) {
    p.cores.push_back(core(c * 8, {load(xfer(0, c * 1024, 0, 1024)), add,
                                   store(xfer(1, c * 1024, 0, 1024))}));
  }
  return p;
}

TEST(SimDevices, LaunchesOnTwoDevicesRunIndependentlyAtOnce) {
  // The same program, loaded on each device, launched from two host threads
  // at once with different data; each device computes its own y = x + k.
  auto backend = sim_backend();
  ScopedEnv small("SPYRE_SIM_MEMORY_GB", "1");
  std::unique_ptr<rt::Device> devices[2] = {backend->create_device(0),
                                            backend->create_device(1)};
  const rt::Program p = add_program();
  std::vector<float> results[2];
  std::thread threads[2];
  for (int d = 0; d < 2; ++d) {
    threads[d] = std::thread([&, d] {
      rt::LoadedProgram loaded(*devices[d], p);
      Buffers buffers(*devices[d], p);
      std::vector<float> x(1024);
      for (size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<float>(i * (d + 1));
      buffers.upload(0, x);
      for (int launch = 0; launch < 10; ++launch) loaded.run(buffers.bindings);
      results[d] = buffers.download<float>(1);
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < 2; ++d) {
    ASSERT_EQ(results[d].size(), 1024u);
    for (size_t i = 0; i < 1024; ++i) {
      ASSERT_EQ(results[d][i], static_cast<float>(i * (d + 1)) + 3)
          << "device " << d << " element " << i;
    }
  }
}

TEST(SimDevices, OneProgramOnTwoStreamsAtOnce) {
  // Launches of one loaded program overlap on two streams of one device;
  // each takes its own scratchpads, and each stream's modelled clock
  // advances by the launch time per launch.
  auto device = small_device();
  const rt::Program p = add_program();
  rt::LoadedProgram loaded(*device, p);
  const rt::LaunchStats reference = modelled(*device, p);
  Buffers buffers[2] = {Buffers(*device, p), Buffers(*device, p)};
  std::vector<float> x[2] = {std::vector<float>(1024),
                             std::vector<float>(1024)};
  for (int s = 0; s < 2; ++s) {
    for (size_t i = 0; i < 1024; ++i)
      x[s][i] = static_cast<float>(i) * (s ? -1 : 1);
    buffers[s].upload(0, x[s]);
  }
  constexpr int kLaunches = 8;
  std::atomic<int> completed{0};
  {
    rt::Stream streams[2] = {rt::Stream(*device, 1), rt::Stream(*device, 2)};
    for (int launch = 0; launch < kLaunches; ++launch) {
      for (int s = 0; s < 2; ++s) {
        loaded.launch(streams[s], buffers[s].bindings,
                      [&](const rt::LaunchStats& stats) {
                        if (stats.cycles == reference.cycles) ++completed;
                      });
      }
    }
    for (auto& stream : streams) {
      stream.synchronize();
      EXPECT_DOUBLE_EQ(stream.device_time_ns(), kLaunches * reference.time_ns);
    }
  }
  EXPECT_EQ(completed.load(), 2 * kLaunches);
  for (int s = 0; s < 2; ++s) {
    std::vector<float> y = buffers[s].download<float>(1);
    for (size_t i = 0; i < 1024; ++i)
      ASSERT_EQ(y[i], x[s][i] + 3) << s << " " << i;
  }
}

}  // namespace
}  // namespace spyre::sim::test
