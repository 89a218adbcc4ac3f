// Runtime events behind c10's opaque event handles. Python sees a handle as
// an integer (torch.Event.event_id); the handles of live events are kept,
// so an integer from Python is checked before it is used as one.
#pragma once

#include <cstdint>

#include "spyre/runtime/stream.h"

namespace spyre::torch_glue {

// A new event, registered as live; its handle is what c10 keeps.
void* create_event(bool enable_timing);
// Unregisters and deletes; null does nothing.
void destroy_event(void* handle) noexcept;
// The live event behind `handle` (the caller holds what keeps it alive);
// ValueError for anything that is not a live spyre event's handle.
rt::Event& event_of(const void* handle, const char* what);
// The same for an event id from Python (torch.Event.event_id; 0: never
// recorded).
rt::Event& event_of_id(int64_t id, const char* what);

}  // namespace spyre::torch_glue
