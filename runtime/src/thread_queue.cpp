// The default Queue: one worker thread draining a FIFO of work.
//
// submit() only moves the work into a deque and wakes the worker if it is
// asleep, so enqueueing stays cheap; the worker runs one item at a time with
// the lock released, so work may itself submit more work.
#include <pthread.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "spyre/runtime/device.h"
#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

class ThreadQueue final : public Queue {
 public:
  explicit ThreadQueue(std::string name) : name_(std::move(name)) {
    worker_ = std::thread([this] { run(); });
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
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(work));
      ++unfinished_;
      wake = worker_sleeping_;
    }
    if (wake) work_ready_.notify_one();
  }

  void wait_idle() override {
    check(std::this_thread::get_id() != worker_.get_id(),
          ErrorCode::kInvalidArgument, "queue '", name_,
          "': wait_idle() called from work running on the same queue would "
          "wait for itself forever");
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      became_idle_.wait(lock, [this] { return unfinished_ == 0; });
      std::swap(error, error_);
    }
    if (error) std::rethrow_exception(error);
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
        worker_sleeping_ = true;
        work_ready_.wait(lock, [this] { return !items_.empty() || stopping_; });
        worker_sleeping_ = false;
        continue;
      }
      Work work = std::move(items_.front());
      items_.pop_front();
      lock.unlock();
      std::exception_ptr error = run_one(work);
      work = nullptr;  // destroy captures outside the lock too
      lock.lock();
      if (error && !error_) error_ = error;
      if (--unfinished_ == 0) became_idle_.notify_all();
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
  std::deque<Work> items_;
  uint64_t unfinished_ = 0;  // queued plus running
  bool worker_sleeping_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;  // first error since the last wait_idle()
  std::thread worker_;        // last: starts after every member exists
};

}  // namespace

std::unique_ptr<Queue> make_thread_queue(std::string name) {
  return std::make_unique<ThreadQueue>(std::move(name));
}

}  // namespace spyre::rt
