// The process-wide runtime: backend chosen once, devices created lazily at
// their first use (an emulated device reserves a lot of address space), each
// with its allocator and streams.
#include "spyre/runtime/runtime.h"

#include <cstdlib>
#include <deque>

#include "spyre/runtime/error.h"
#include "spyre/runtime/registry.h"

namespace spyre::rt {
namespace {

constexpr const char* kDefaultBackend = "sim";

std::unique_ptr<Backend> choose_backend() {
  const char* library = std::getenv("SPYRE_BACKEND_LIBRARY");
  if (library && *library) return load_backend_library(library);
  const char* name = std::getenv("SPYRE_BACKEND");
  return create_backend(name && *name ? name : kDefaultBackend);
}

}  // namespace

struct Runtime::PerDevice {
  std::once_flag created;
  std::unique_ptr<Device> device;
  std::unique_ptr<CachingAllocator> allocator;

  mutable std::mutex streams_mutex;
  std::deque<std::unique_ptr<Stream>> streams;  // index is the stream id

  mutable std::mutex stats_mutex;
  LaunchStats last_launch;
};

Runtime& Runtime::get() {
  // Never destroyed: streams' worker threads and objects of the torch glue
  // may still use the runtime while static destructors run at exit. A
  // constructor that throws leaves it unset, so the next call retries.
  static Runtime* instance = new Runtime();
  return *instance;
}

Runtime::Runtime() : backend_(choose_backend()) {
  backend_name_ = backend_->name();
  const int count = backend_->device_count();
  check(count >= 0, ErrorCode::kBackendError, "backend '", backend_name_,
        "' reports a negative device count (", count, ")");
  devices_.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    devices_.push_back(std::make_unique<PerDevice>());
  }
}

const std::string& Runtime::backend_name() const { return backend_name_; }

int Runtime::device_count() const { return static_cast<int>(devices_.size()); }

Runtime::PerDevice& Runtime::at(int index) const {
  check(index >= 0 && index < device_count(), ErrorCode::kInvalidArgument,
        "device index ", index, " is out of range: backend '", backend_name_,
        "' has ", device_count(), " device(s)");
  PerDevice& slot = *devices_[static_cast<size_t>(index)];
  std::call_once(slot.created, [&] {
    std::unique_ptr<Device> device = backend_->create_device(index);
    check(device != nullptr, ErrorCode::kBackendError, "backend '",
          backend_name_, "' created no device for index ", index);
    slot.allocator = std::make_unique<CachingAllocator>(*device);
    slot.streams.push_back(std::make_unique<Stream>(*device, 0));
    slot.device = std::move(device);
  });
  return slot;
}

Device& Runtime::device(int index) { return *at(index).device; }

CachingAllocator& Runtime::allocator(int index) { return *at(index).allocator; }

Stream& Runtime::default_stream(int device_index) {
  return stream(device_index, 0);
}

Stream& Runtime::create_stream(int device_index) {
  PerDevice& slot = at(device_index);
  std::lock_guard<std::mutex> lock(slot.streams_mutex);
  const uint64_t id = slot.streams.size();
  slot.streams.push_back(std::make_unique<Stream>(*slot.device, id));
  return *slot.streams.back();
}

Stream& Runtime::stream(int device_index, uint64_t stream_id) {
  PerDevice& slot = at(device_index);
  std::lock_guard<std::mutex> lock(slot.streams_mutex);
  check(stream_id < slot.streams.size(), ErrorCode::kInvalidArgument, "device ",
        device_index, " has no stream ", stream_id, " (it has ",
        slot.streams.size(), " streams; create_stream() makes new ones)");
  return *slot.streams[stream_id];
}

uint64_t Runtime::stream_count(int device_index) const {
  PerDevice& slot = at(device_index);
  std::lock_guard<std::mutex> lock(slot.streams_mutex);
  return slot.streams.size();
}

LaunchStats Runtime::last_launch_stats(int device_index) const {
  PerDevice& slot = at(device_index);
  std::lock_guard<std::mutex> lock(slot.stats_mutex);
  return slot.last_launch;
}

void Runtime::record_launch_stats(int device_index, const LaunchStats& stats) {
  PerDevice& slot = at(device_index);
  std::lock_guard<std::mutex> lock(slot.stats_mutex);
  slot.last_launch = stats;
}

void Runtime::synchronize(int device_index, const WaitCheck& check) {
  PerDevice& slot = at(device_index);
  std::vector<Stream*> streams;
  {
    std::lock_guard<std::mutex> lock(slot.streams_mutex);
    for (const auto& stream : slot.streams) streams.push_back(stream.get());
  }
  // Wait for all of them even if one failed, then report the first failure;
  // but what `check` throws ends the wait.
  bool checked_out = false;
  const WaitCheck watched = !check ? WaitCheck() : [&] {
    try {
      check();
    } catch (...) {
      checked_out = true;
      throw;
    }
  };
  std::exception_ptr first_error;
  for (Stream* stream : streams) {
    try {
      stream->synchronize(watched);
    } catch (...) {
      if (checked_out) throw;
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace spyre::rt
