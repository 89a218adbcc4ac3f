#include "events.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_set>

namespace spyre::torch_glue {
namespace {

struct LiveEvents {
  std::mutex mutex;
  std::unordered_set<const void*> handles;
};

LiveEvents& live_events() {
  static auto* live = new LiveEvents;  // outlives static destructors
  return *live;
}

}  // namespace

void* create_event(bool enable_timing) {
  auto* event = new rt::Event(enable_timing);
  LiveEvents& live = live_events();
  const std::lock_guard<std::mutex> lock(live.mutex);
  live.handles.insert(event);
  return event;
}

void destroy_event(void* handle) noexcept {
  if (handle == nullptr) return;
  {
    LiveEvents& live = live_events();
    const std::lock_guard<std::mutex> lock(live.mutex);
    live.handles.erase(handle);
  }
  delete static_cast<rt::Event*>(handle);
}

rt::Event& event_of(const void* handle, const char* what) {
  TORCH_CHECK_VALUE(handle != nullptr, "spyre: ", what,
                    ": both events must be recorded first");
  LiveEvents& live = live_events();
  const std::lock_guard<std::mutex> lock(live.mutex);
  TORCH_CHECK_VALUE(live.handles.count(handle) != 0, "spyre: ", what, ": 0x",
                    std::hex, reinterpret_cast<uintptr_t>(handle),
                    " is not a live spyre event; pass torch.spyre.Event "
                    "objects, not numbers");
  return *static_cast<rt::Event*>(const_cast<void*>(handle));
}

rt::Event& event_of_id(int64_t id, const char* what) {
  return event_of(reinterpret_cast<const void*>(static_cast<intptr_t>(id)),
                  what);
}

}  // namespace spyre::torch_glue
