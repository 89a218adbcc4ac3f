// Events: each record() creates a fresh completion record that the stream
// fills in when it reaches it. Waits and queries hold the record that was
// current when they were issued, so re-recording never disturbs them.
#include <chrono>

#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  std::atomic<bool> done{false};
  std::mutex mutex;
  std::condition_variable completed;
  // Written once by the stream before `done` is set, read only after.
  Clock::time_point host_time;
  double device_time_ns = 0;
  std::exception_ptr stream_error;

  void complete(double device_ns, std::exception_ptr error) {
    host_time = Clock::now();
    device_time_ns = device_ns;
    stream_error = std::move(error);
    {
      std::lock_guard<std::mutex> lock(mutex);
      done.store(true, std::memory_order_release);
    }
    completed.notify_all();
  }

  void wait(const WaitCheck& check = {}) {
    if (done.load(std::memory_order_acquire)) return;
    std::unique_lock<std::mutex> lock(mutex);
    auto is_done = [this] { return done.load(); };
    if (!check) return completed.wait(lock, is_done);
    while (!completed.wait_for(lock, kWaitSlice, is_done)) {
      lock.unlock();
      check();
      lock.lock();
    }
  }
};

}  // namespace

struct Event::State {
  mutable std::mutex mutex;
  std::shared_ptr<Record> last;

  std::shared_ptr<Record> current() const {
    std::lock_guard<std::mutex> lock(mutex);
    return last;
  }
};

Event::Event(bool enable_timing)
    : timing_(enable_timing), state_(std::make_shared<State>()) {}

void Event::record(Stream& stream) {
  auto record = std::make_shared<Record>();
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->last = record;
  }
  stream.enqueue([&stream, record]() -> double {
    std::exception_ptr error;
    {
      // An error raised earlier on the stream is reported by this event's
      // synchronize() too; the stream keeps it for its own synchronize().
      std::lock_guard<std::mutex> lock(stream.error_mutex_);
      error = stream.error_;
    }
    record->complete(stream.device_time_ns(), std::move(error));
    return 0;
  });
}

void Event::block(Stream& stream) const {
  std::shared_ptr<Record> record = state_->current();
  if (!record) return;  // like CUDA: waiting on an unrecorded event is a no-op
  stream.enqueue([&stream, record]() -> double {
    record->wait();
    stream.advance_device_time_to(record->device_time_ns);
    return 0;
  });
}

bool Event::query() const {
  std::shared_ptr<Record> record = state_->current();
  return !record || record->done.load(std::memory_order_acquire);
}

void Event::synchronize(const WaitCheck& check) const {
  std::shared_ptr<Record> record = state_->current();
  if (!record) return;
  record->wait(check);
  if (record->stream_error) std::rethrow_exception(record->stream_error);
}

bool Event::recorded() const { return state_->current() != nullptr; }

namespace {

// Raises unless both records can answer an elapsed-time query.
void check_timed(bool start_timing, const Record* start, bool end_timing,
                 const Record* end) {
  check(start_timing && end_timing, ErrorCode::kInvalidArgument,
        "elapsed time needs both events created with enable_timing=true");
  check(start && end, ErrorCode::kInvalidArgument,
        "elapsed time needs both events recorded on a stream first");
  check(start->done.load() && end->done.load(), ErrorCode::kInvalidArgument,
        "elapsed time needs both events completed; synchronize the later "
        "event first");
}

}  // namespace

double Event::elapsed_ms_since(const Event& start) const {
  std::shared_ptr<Record> from = start.state_->current();
  std::shared_ptr<Record> to = state_->current();
  check_timed(start.timing_, from.get(), timing_, to.get());
  return std::chrono::duration<double, std::milli>(to->host_time -
                                                   from->host_time)
      .count();
}

double Event::device_elapsed_ms_since(const Event& start) const {
  std::shared_ptr<Record> from = start.state_->current();
  std::shared_ptr<Record> to = state_->current();
  check_timed(start.timing_, from.get(), timing_, to.get());
  return (to->device_time_ns - from->device_time_ns) / 1e6;
}

}  // namespace spyre::rt
