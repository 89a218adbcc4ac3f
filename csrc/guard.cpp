// The spyre DeviceGuardImpl: device switching, streams and events as c10
// expects of a PrivateUse1 backend. Events are runtime events (rt::Event)
// behind c10's opaque void* handles.
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "allocator.h"
#include "device_state.h"
#include "events.h"
#include "factory.h"
#include "spyre/runtime/stream.h"

namespace spyre::torch_glue {
namespace {

class SpyreGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kSpyre; }

  c10::Device exchangeDevice(c10::Device device) const override {
    check_spyre(device);
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) set_current_device(device.index());
    return previous;
  }
  c10::Device getDevice() const override {
    return c10::Device(kSpyre, current_device());
  }
  void setDevice(c10::Device device) const override {
    check_spyre(device);
    set_current_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    try {
      set_current_device(device.index());
    } catch (...) {
      // Called from destructors; a bad index leaves the device unchanged.
    }
  }

  c10::Stream getStream(c10::Device device) const override {
    return current_stream(device.index());
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return default_stream(device.index());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool high_priority) const override {
    return pool_stream(device.index(), high_priority);
  }
  // torch.Stream(device, priority): from the pool, as CUDA's streams are,
  // so creating thousands of them costs no more threads than the pool has.
  // A negative priority is a high one.
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return pool_stream(device.index(), priority < 0);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    return exchange_stream(stream);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return device_count();
  }

  bool queryStream(const c10::Stream& stream) const override {
    return call_runtime([&] { return runtime_stream(stream).query(); });
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    call_runtime(
        [&] { runtime_stream(stream).synchronize(interrupt_check()); });
  }
  void synchronizeDevice(c10::DeviceIndex index) const override {
    index = resolve_device_index(index);
    call_runtime([&] { runtime().synchronize(index, interrupt_check()); });
  }

  void record(void** event, const c10::Stream& stream, c10::DeviceIndex index,
              c10::EventFlag flag) const override {
    TORCH_CHECK(index == -1 || index == stream.device_index(),
                "spyre: event of device ", int(index),
                " cannot be recorded on a stream of device ",
                int(stream.device_index()));
    rt::Stream& target = runtime_stream(stream);
    if (*event == nullptr) {
      *event = create_event(flag == c10::EventFlag::BACKEND_DEFAULT);
    }
    rt::Event& recorded = event_of(*event, "record");
    call_runtime([&] { recorded.record(target); });
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    rt::Stream& target = runtime_stream(stream);
    rt::Event& waited = event_of(event, "wait");
    call_runtime([&] { waited.block(target); });
  }
  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    rt::Event& queried = event_of(event, "query");
    return call_runtime([&] { return queried.query(); });
  }
  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    rt::Event& waited = event_of(event, "synchronize");
    call_runtime([&] { waited.synchronize(interrupt_check()); });
  }
  void destroyEvent(void* event, c10::DeviceIndex) const noexcept override {
    destroy_event(event);
  }
  double elapsedTime(void* start, void* end, c10::DeviceIndex) const override {
    const rt::Event& from = event_of(start, "elapsed_time");
    const rt::Event& to = event_of(end, "elapsed_time");
    return call_runtime([&] { return to.elapsed_ms_since(from); });
  }

  // torch.accelerator.get_device_capability: the dtypes a spyre tensor can
  // hold (every device holds the same ones).
  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    check_spyre(device);
    if (device.has_index()) check_device_index(device.index());
    c10::DeviceCapability capability;
    capability.capability_data.capability_bits = 0;
#define SPYRE_CAPABILITY(_, name)                                \
  capability.capability_data.supported_scalar_types.has_##name = \
      is_supported_dtype(c10::ScalarType::name) ? 1 : 0;
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(SPYRE_CAPABILITY)
#undef SPYRE_CAPABILITY
    return capability;
  }

  void recordDataPtrOnStream(const c10::DataPtr& data,
                             const c10::Stream& stream) const override {
    record_stream(data, stream);
  }

 private:
  static void check_spyre(c10::Device device) {
    TORCH_CHECK_VALUE(device.type() == kSpyre,
                      "spyre: expected a spyre device, got ", device);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace
}  // namespace spyre::torch_glue
