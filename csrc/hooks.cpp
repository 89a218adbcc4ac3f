// PrivateUse1 hooks: what generic PyTorch code asks of the backend (device
// count, generators, pinned memory, primary context, storage resize).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

#include "allocator.h"
#include "device_state.h"
#include "generator.h"
#include "pinned_host.h"
#include "storage_ops.h"

namespace spyre::torch_glue {
namespace {

class SpyreHooks final : public at::PrivateUse1HooksInterface {
 public:
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count() > 0; }
  void init() const override { runtime(); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return device_initialized(index);
  }

  c10::DeviceIndex deviceCount() const override { return device_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    set_current_device(index);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_device();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex previous = current_device();
    set_current_device(index);
    return previous;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index);
  }

  // Device addresses of different devices may coincide; the first device
  // holding a live allocation at `data` wins, else the current device.
  at::Device getDeviceFromPtr(void* data) const override {
    const auto ptr = reinterpret_cast<rt::DevicePtr>(data);
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      if (device_initialized(i) && runtime_allocator(i).find(ptr).bytes > 0) {
        return {kSpyre, i};
      }
    }
    return {kSpyre, current_device()};
  }

  bool isPinnedPtr(const void* data) const override {
    return PinnedHostMemory::get().contains(data);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_host_allocator();
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    resize_storage_bytes(storage, new_bytes);
  }
};

// Registered when the library loads, before Python renames the backend.
const bool g_hooks_registered = [] {
  static SpyreHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  return true;
}();

}  // namespace
}  // namespace spyre::torch_glue
