// The default Queue: one worker thread draining a FIFO of work.
//
// submit() only moves the work into a vector and wakes the worker if it is
// asleep, so enqueueing stays cheap; the worker swaps the whole vector out and
// runs it with the lock released, so work may itself submit more work.
//
// Two rules keep a queue safe to use from a host thread that holds a lock
// the work's owners may need (the Python GIL):
// - the worker never destroys work it ran: it hands each item back
//   ("retired"), and the host threads that submit or wait destroy them, so
//   dropping the last reference to a tensor's storage (whose Python object
//   needs the GIL to go) never happens on the worker;
// - at most kMaxQueuedWork items wait or run (backpressure, as drivers bound
//   their command buffers): a host loop that queues faster than the device
//   runs blocks in submit() instead of growing memory without bound. Work
//   submitted by running work is never held back (it would wait for itself).
//
// Waking a sleeping thread costs a system call (microseconds), far more than
// the enqueue itself. Launch-heavy callers submit in bursts with short host
// gaps between items, so an idle worker first polls for new work for a short
// while (yielding the core) before it goes to sleep; wait_idle() likewise
// spins a short while before it blocks.
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <iterator>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "spyre/runtime/device.h"
#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

// How long an idle worker polls before sleeping: covers the host-side gap
// between eager launches without keeping a core busy for long.
constexpr auto kIdlePollTime = std::chrono::microseconds(50);

// kMaxQueuedWork (device.h): deep enough that the host stays far ahead of
// the device (eager launches take microseconds to queue), shallow enough
// that what queued work holds alive stays bounded.

// Host threads asleep in wait_idle_until, and whether this thread is a
// queue's worker (host_core_to_spare, device.h).
std::atomic<int> blocked_waiters{0};
thread_local bool on_worker = false;

struct BlockedWaiter {
  BlockedWaiter() { blocked_waiters.fetch_add(1, std::memory_order_relaxed); }
  ~BlockedWaiter() { blocked_waiters.fetch_sub(1, std::memory_order_relaxed); }
  BlockedWaiter(const BlockedWaiter&) = delete;
  BlockedWaiter& operator=(const BlockedWaiter&) = delete;
};

class ThreadQueue final : public Queue {
 public:
  explicit ThreadQueue(std::string name) : name_(std::move(name)) {
    worker_ = std::thread([this] {
      on_worker = true;
      run();
    });
    // Linux limits thread names to 15 characters; the name only helps
    // debuggers and profilers, so a failure is harmless.
    pthread_setname_np(worker_.native_handle(), name_.substr(0, 15).c_str());
  }

  ~ThreadQueue() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_ready_.notify_one();
    worker_.join();  // the worker drains what is left before it stops
  }

  void submit(Work work) override {
    std::vector<Work> retired;  // destroyed here, after the lock is dropped
    bool wake;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (unfinished_ >= kMaxQueuedWork &&
          std::this_thread::get_id() != worker_.get_id()) {
        room_.wait(lock, [this] { return unfinished_ < kMaxQueuedWork; });
      }
      retired.swap(retired_);
      items_.push_back(std::move(work));
      ++unfinished_;
      queued_.fetch_add(1, std::memory_order_release);
      wake = worker_sleeping_;
    }
    if (wake) work_ready_.notify_one();
  }

  void wait_idle() override { wait_idle_until(std::nullopt); }

  bool wait_idle_for(std::chrono::nanoseconds timeout) override {
    return wait_idle_until(std::chrono::steady_clock::now() + timeout);
  }

  bool idle() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return unfinished_ == 0;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (items_.empty()) {
        if (stopping_) return;
        lock.unlock();
        const bool arrived = poll_for_work();
        lock.lock();
        if (arrived) continue;
        worker_sleeping_ = true;
        work_ready_.wait(lock, [this] { return !items_.empty() || stopping_; });
        worker_sleeping_ = false;
        continue;
      }
      // Take everything queued at once: the lock is shared with submit(),
      // so one hand-over per batch instead of one per item.
      batch_.swap(items_);
      lock.unlock();
      std::exception_ptr first_error;
      for (Work& work : batch_) {
        std::exception_ptr error = run_one(work);
        if (error && !first_error) first_error = error;
      }
      const uint64_t ran = batch_.size();
      lock.lock();
      // Ran work goes back to the host threads to destroy (see the top).
      if (retired_.empty()) {
        retired_.swap(batch_);
      } else {
        std::move(batch_.begin(), batch_.end(), std::back_inserter(retired_));
        batch_.clear();
      }
      if (first_error && !error_) error_ = first_error;
      const bool was_full = unfinished_ >= kMaxQueuedWork;
      unfinished_ -= ran;
      finished_.fetch_add(ran, std::memory_order_release);
      if (was_full) room_.notify_all();
      if (unfinished_ == 0) became_idle_.notify_all();
    }
  }

  // Waits until the queue is idle or `deadline` passed (none: no limit);
  // true when idle, rethrowing the first error work raised since the last
  // wait.
  bool wait_idle_until(
      std::optional<std::chrono::steady_clock::time_point> deadline) {
    check(std::this_thread::get_id() != worker_.get_id(),
          ErrorCode::kInvalidArgument, "queue '", name_,
          "': wait_idle() called from work running on the same queue would "
          "wait for itself forever");
    poll_until_idle();
    std::exception_ptr error;
    std::vector<Work> retired;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto is_idle = [this] { return unfinished_ == 0; };
      const BlockedWaiter blocked;
      if (!deadline) {
        became_idle_.wait(lock, is_idle);
      } else if (!became_idle_.wait_until(lock, *deadline, is_idle)) {
        retired.swap(retired_);
        lock.unlock();
        return false;  // `retired` is destroyed here, outside the lock
      }
      std::swap(error, error_);
      retired.swap(retired_);
    }
    retired.clear();  // before rethrowing: nothing the work held outlives it
    if (error) std::rethrow_exception(error);
    return true;
  }

  // True when work arrived within the poll time (it may be taken already;
  // the caller rechecks under the lock). The clock is read on every turn:
  // on a loaded host one yield can last a scheduler time slice.
  bool poll_for_work() {
    const uint64_t seen = queued_.load(std::memory_order_acquire);
    const auto deadline = std::chrono::steady_clock::now() + kIdlePollTime;
    while (queued_.load(std::memory_order_acquire) == seen) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  // A waiter that blocks at once pays the wake-up of a sleeping thread when
  // the work ends (~80 us on the 2-core VMs this runs on, far more than a
  // small launch), so it first spins for up to kIdlePollTime. It does not
  // yield: a yielding waiter goes to the back of the run queue, and on a
  // loaded host came back milliseconds later.
  void poll_until_idle() const {
    const uint64_t target = queued_.load(std::memory_order_acquire);
    const auto deadline = std::chrono::steady_clock::now() + kIdlePollTime;
    while (finished_.load(std::memory_order_acquire) < target &&
           std::chrono::steady_clock::now() < deadline) {
    }
  }

  static std::exception_ptr run_one(Work& work) {
    try {
      work();
      return nullptr;
    } catch (...) {
      return std::current_exception();
    }
  }

  const std::string name_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable became_idle_;
  std::condition_variable room_;       // unfinished_ fell below the limit
  std::vector<Work> items_;            // queued, guarded by mutex_
  std::vector<Work> batch_;            // being run, worker only
  std::vector<Work> retired_;          // ran, for a host thread to destroy
  uint64_t unfinished_ = 0;            // queued plus running
  std::atomic<uint64_t> queued_{0};    // submissions ever: polled lock-free
  std::atomic<uint64_t> finished_{0};  // work items ever run: polled too
  bool worker_sleeping_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;  // first error since the last wait_idle()
  std::thread worker_;        // last: starts after every member exists
};

}  // namespace

bool host_core_to_spare() {
  return !on_worker || blocked_waiters.load(std::memory_order_relaxed) > 0;
}

std::unique_ptr<Queue> make_thread_queue(std::string name) {
  return std::make_unique<ThreadQueue>(std::move(name));
}

}  // namespace spyre::rt
