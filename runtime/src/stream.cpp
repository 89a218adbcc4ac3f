// Streams: an in-order queue of the device plus the stream's modelled clock
// and its first pending error.
#include "spyre/runtime/stream.h"

#include <utility>

namespace spyre::rt {

Stream::Stream(Device& device, uint64_t id)
    : device_(device), id_(id), queue_(device.create_queue()) {}

Stream::~Stream() {
  // Work still queued refers to this stream; let it finish. Its errors have
  // nobody left to report to.
  try {
    queue_->wait_idle();
  } catch (...) {
  }
}

void Stream::enqueue(Work work) {
  // The wrapper keeps the queue free of exceptions (they belong to the
  // stream) and advances the clock in queue order, so device time is the sum
  // of the durations of the work that ran before.
  queue_->submit([this, work = std::move(work)]() -> double {
    double ns = 0;
    try {
      ns = work();
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    // Only this stream's queue writes the clock, so load + store is enough.
    device_time_ns_.store(device_time_ns_.load(std::memory_order_relaxed) + ns,
                          std::memory_order_release);
    return ns;
  });
}

void Stream::synchronize(const WaitCheck& check) {
  if (check) {
    while (!queue_->wait_idle_for(kWaitSlice)) check();
  } else {
    queue_->wait_idle();
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

bool Stream::query() { return queue_->idle(); }

double Stream::device_time_ns() const {
  return device_time_ns_.load(std::memory_order_acquire);
}

void Stream::advance_device_time_to(double t) {
  if (t > device_time_ns_.load(std::memory_order_relaxed)) {
    device_time_ns_.store(t, std::memory_order_release);
  }
}

}  // namespace spyre::rt
