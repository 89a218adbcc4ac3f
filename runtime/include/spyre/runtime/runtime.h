// The process-wide device context: the chosen backend, its devices, and per
// device a caching allocator and a pool of streams. Created at first use
// (which is when the backend is chosen, see registry.h) and kept for the
// life of the process.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/runtime/allocator.h"
#include "spyre/runtime/device.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {

class Runtime {
 public:
  // The process's runtime; the first call chooses and creates the backend.
  static Runtime& get();

  const std::string& backend_name() const;
  int device_count() const;
  // These raise kInvalidArgument for an index outside [0, device_count()).
  Device& device(int index);
  CachingAllocator& allocator(int index);

  // Stream 0 of each device is its default stream. Further streams are
  // created on request and live as long as the runtime; ids are unique per
  // device and dense, so the torch glue can pack them into c10::StreamId.
  Stream& default_stream(int device_index);
  Stream& create_stream(int device_index);
  Stream& stream(int device_index, uint64_t stream_id);
  uint64_t stream_count(int device_index) const;

  // Stats of the most recent completed launch on a device.
  LaunchStats last_launch_stats(int device_index) const;
  void record_launch_stats(int device_index, const LaunchStats& stats);

  // Waits for every stream of a device; `check` as in Stream::synchronize
  // (what it throws ends the wait at once).
  void synchronize(int device_index, const WaitCheck& check = {});

 private:
  Runtime();
  struct PerDevice;
  PerDevice& at(int index) const;

  std::unique_ptr<Backend> backend_;
  std::string backend_name_;
  std::vector<std::unique_ptr<PerDevice>> devices_;
};

}  // namespace spyre::rt
