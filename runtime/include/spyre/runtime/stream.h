// Streams and events with the semantics of CUDA's and PyTorch's:
// - work on one stream runs in submission order, asynchronously to the host;
// - events are the only ordering across streams (record on one, wait on
//   another);
// - each stream keeps a modelled device clock; work advances it by its
//   modelled duration, a wait raises it to the event's device time, so events
//   give both host and modelled device elapsed time.
// An exception thrown by work is kept and re-raised by the next
// synchronize() of that stream (or of an event recorded after it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

#include "spyre/runtime/device.h"

namespace spyre::rt {

// Called every kWaitSlice while a wait blocks; it may throw to abandon the
// wait (the work goes on running). The torch glue checks for Ctrl-C with
// it, so a wait on a long launch ends with a KeyboardInterrupt at once.
using WaitCheck = std::function<void()>;
inline constexpr std::chrono::milliseconds kWaitSlice{50};

class Stream {
 public:
  Stream(Device& device, uint64_t id);
  ~Stream();  // waits for pending work
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  uint64_t id() const { return id_; }
  Device& device() const { return device_; }

  // Queues `work` after everything already on this stream.
  void enqueue(Work work);
  // Blocks until all queued work ran; rethrows the first error it raised.
  // `check`, if given, runs every kWaitSlice of the wait (see WaitCheck).
  void synchronize(const WaitCheck& check = {});
  // True when all queued work has run.
  bool query();
  // Modelled device time (ns) at the end of the last completed work.
  double device_time_ns() const;

 private:
  friend class Event;
  void advance_device_time_to(double t);

  Device& device_;
  uint64_t id_;
  std::unique_ptr<Queue> queue_;
  std::atomic<double> device_time_ns_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

class Event {
 public:
  explicit Event(bool enable_timing = false);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures all work queued on `stream` so far. Re-recording moves the event.
  void record(Stream& stream);
  // Makes work queued on `stream` after this call wait for the last record.
  void block(Stream& stream) const;
  // True when the last record has completed (or the event was never recorded).
  bool query() const;
  void synchronize(const WaitCheck& check = {}) const;
  bool recorded() const;

  // Time from `start` to this event; both need enable_timing and a completed
  // record. Host wall time and modelled device time, in milliseconds.
  double elapsed_ms_since(const Event& start) const;
  double device_elapsed_ms_since(const Event& start) const;

 private:
  struct State;
  bool timing_;
  std::shared_ptr<State> state_;
};

}  // namespace spyre::rt
