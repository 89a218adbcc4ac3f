// The smallest external backend: a shared library exporting the registry's
// C entry point, whose devices are host-memory FakeDevices. Runtime tests
// load it to prove a backend can be plugged in without the emulator: its
// devices allocate, copy, fill and queue work, but run no programs. Loading
// a program on one is refused with an error saying so (a FakeDevice's
// launch only records its addresses, so `ones + 1` would have read zeros).
#include <cstdint>
#include <memory>
#include <string>

#include "../fake_device.h"
#include "spyre/runtime/registry.h"

namespace {

using spyre::rt::Backend;
using spyre::rt::Device;
using spyre::rt::DeviceProperties;

constexpr int kMinimalDeviceCount = 2;
constexpr uint64_t kMinimalDeviceBytes = 32ull << 20;

// A FakeDevice that reports this backend's name.
class MinimalDevice final : public spyre::rt::testing::FakeDevice {
 public:
  explicit MinimalDevice(int index)
      : FakeDevice(kMinimalDeviceBytes, index),
        props_(FakeDevice::properties()) {
    props_.name = "minimal plugin device";
    props_.backend = "minimal";
  }
  const DeviceProperties& properties() const override { return props_; }

  std::unique_ptr<spyre::rt::Executable> prepare(
      const spyre::rt::Program& program, const spyre::rt::PatchPlan&) override {
    throw spyre::rt::Error(
        spyre::rt::ErrorCode::kDeviceError,
        "the minimal plugin backend runs no programs (it proves the backend "
        "interface: memory, copies, queues); cannot load '" +
            program.name +
            "'. Use the sim backend (unset SPYRE_BACKEND and "
            "SPYRE_BACKEND_LIBRARY) to run kernels");
  }

 private:
  DeviceProperties props_;
};

class MinimalBackend final : public Backend {
 public:
  std::string name() const override { return "minimal"; }
  int device_count() const override { return kMinimalDeviceCount; }
  std::unique_ptr<Device> create_device(int index) override {
    spyre::rt::check(index >= 0 && index < kMinimalDeviceCount,
                     spyre::rt::ErrorCode::kInvalidArgument,
                     "minimal backend has no device ", index);
    return std::make_unique<MinimalDevice>(index);
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) spyre::rt::Backend*
spyre_create_backend(uint32_t abi_version) {
  if (abi_version != spyre::rt::kBackendAbiVersion) return nullptr;
  return new MinimalBackend();
}
