// Modelled device time in PyTorch's profiler: the PrivateUse1 profiler stubs
// (torch/csrc/profiler/stubs/base.h). When a profile is taken with
// use_device="spyre" (torch.autograd.profiler.profile(use_device="spyre",
// use_kineto=False), the marker mode PyTorch offers a PrivateUse1 backend
// without a Kineto plugin), the profiler records a stub event on the current
// stream at the start and end of every op; elapsed() is the modelled device
// time of the work queued between them, which key_averages() reports as the
// op's device time. Kernel and copy names themselves come from the
// RecordFunction ranges in launch.cpp and copy.cpp, in every profiler mode.
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <functional>
#include <memory>

#include "device_state.h"
#include "spyre/runtime/stream.h"

namespace spyre::torch_glue {
namespace {

namespace prof = torch::profiler::impl;

class SpyreProfilerStubs final : public prof::ProfilerStubs {
 public:
  void record(c10::DeviceIndex* device, prof::ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex index = current_device();
    if (device != nullptr) *device = index;
    auto marker = std::make_shared<rt::Event>(/*enable_timing=*/true);
    call_runtime(
        [&] { marker->record(runtime_stream(current_stream(index))); });
    if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
    *event = std::move(marker);
  }

  // Microseconds of modelled device time between the two records (waits
  // for the end record's work to run).
  float elapsed(const prof::ProfilerVoidEventStub* start,
                const prof::ProfilerVoidEventStub* end) const override {
    const auto* from = static_cast<const rt::Event*>(start->get());
    const auto* to = static_cast<const rt::Event*>(end->get());
    return call_runtime([&] {
      to->synchronize();
      // Records on different streams (an op that switched streams) have
      // unrelated clocks: no device time then, rather than a negative one.
      const double us = to->device_elapsed_ms_since(*from) * 1000.0;
      return static_cast<float>(us > 0 ? us : 0);
    });
  }

  // Markers and ranges: the device has no trace of its own to put them in.
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  void onEachDevice(std::function<void(int)> op) const override {
    const c10::DeviceIndex previous = current_device();
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      set_current_device(i);
      op(i);
    }
    set_current_device(previous);
  }

  void synchronize() const override {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      call_runtime([&] { runtime().synchronize(i); });
    }
  }
};

struct RegisterStubs {
  RegisterStubs() {
    static SpyreProfilerStubs stubs;
    prof::registerPrivateUse1Methods(&stubs);
  }
};
const RegisterStubs register_stubs;

}  // namespace
}  // namespace spyre::torch_glue
