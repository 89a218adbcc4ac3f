// Thread queues and streams: FIFO order, query/synchronize, errors, and the
// modelled device clock.
#include "spyre/runtime/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>
#include <vector>

#include "fake_device.h"
#include "spyre/runtime/error.h"

namespace spyre::rt {
namespace {

using testing::FakeDevice;

TEST(ThreadQueue, RunsWorkInSubmissionOrder) {
  auto queue = make_thread_queue("test");
  std::vector<int> order;
  constexpr int kItems = 10000;
  for (int i = 0; i < kItems; ++i) {
    queue->submit([&order, i] {
      order.push_back(i);
      return 0.0;
    });
  }
  queue->wait_idle();
  ASSERT_EQ(order.size(), static_cast<size_t>(kItems));
  for (int i = 0; i < kItems; ++i) EXPECT_EQ(order[i], i);
}

TEST(ThreadQueue, KeepsEachSubmittersOrderUnderManyThreads) {
  auto queue = make_thread_queue("test");
  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  std::vector<std::pair<int, int>> ran;  // (thread, sequence), worker only
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        queue->submit([&ran, t, i] {
          ran.emplace_back(t, i);
          return 0.0;
        });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  queue->wait_idle();
  ASSERT_EQ(ran.size(), static_cast<size_t>(kThreads * kPerThread));
  std::vector<int> next(kThreads, 0);
  for (auto [t, i] : ran) EXPECT_EQ(i, next[t]++) << "thread " << t;
}

// A launch may take a second host thread off a queue's worker, and on one
// only while a host thread sleeps in wait_idle(): while the host queues more
// work, the two would compete for its cores.
TEST(ThreadQueue, TheHostHasACoreToSpareOnlyWhileItWaits) {
  EXPECT_TRUE(host_core_to_spare());
  auto queue = make_thread_queue("test");
  std::latch checked(1);
  std::atomic<bool> release{false};
  bool while_host_busy = true, while_host_waits = false;
  queue->submit([&] {
    while_host_busy = host_core_to_spare();
    checked.count_down();
    while (!release) std::this_thread::yield();
    return 0.0;
  });
  queue->submit([&] {
    // The host's wait_idle() polls a while before it sleeps.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!host_core_to_spare() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    while_host_waits = host_core_to_spare();
    return 0.0;
  });
  checked.wait();
  release = true;
  queue->wait_idle();
  EXPECT_FALSE(while_host_busy);
  EXPECT_TRUE(while_host_waits);
  EXPECT_TRUE(host_core_to_spare());
}

// Backpressure: a host thread that queues faster than the work runs waits
// once kMaxQueuedWork items are pending, and goes on when they ran.
TEST(ThreadQueue, SubmitWaitsWhileTheQueueIsFull) {
  auto queue = make_thread_queue("test");
  std::latch open(1);
  queue->submit([&open] {
    open.wait();
    return 0.0;
  });
  for (uint64_t i = 1; i < kMaxQueuedWork; ++i) {
    queue->submit([] { return 0.0; });
  }
  std::atomic<bool> submitted{false};
  std::thread producer([&] {
    queue->submit([] { return 0.0; });
    submitted = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(submitted) << "submit() returned with the queue full";
  open.count_down();
  producer.join();
  EXPECT_TRUE(submitted);
  queue->wait_idle();
}

// Work that submits work is never held back, or a full queue would wait
// for itself.
TEST(ThreadQueue, WorkSubmittedByWorkIsNeverHeldBack) {
  auto queue = make_thread_queue("test");
  std::atomic<int> ran{0};
  queue->submit([&] {
    for (uint64_t i = 0; i < 2 * kMaxQueuedWork; ++i) {
      queue->submit([&ran] {
        ++ran;
        return 0.0;
      });
    }
    return 0.0;
  });
  queue->wait_idle();
  EXPECT_EQ(ran, static_cast<int>(2 * kMaxQueuedWork));
}

// What work holds is released on a host thread (the next submit or wait),
// never on the worker: dropping a tensor's storage may need the GIL, which
// a host thread waiting on the queue can hold.
TEST(ThreadQueue, WorkIsDestroyedOnTheHostThread) {
  auto queue = make_thread_queue("test");
  struct Witness {
    std::atomic<std::thread::id>* where;
    ~Witness() {
      if (where) *where = std::this_thread::get_id();
    }
  };
  std::atomic<std::thread::id> destroyed_on;
  for (int round = 0; round < 100; ++round) {
    auto witness = std::make_shared<Witness>(Witness{&destroyed_on});
    queue->submit([witness] { return 0.0; });
    witness.reset();  // the queued work holds the last reference
    queue->wait_idle();
    EXPECT_EQ(destroyed_on.load(), std::this_thread::get_id()) << round;
  }
}

TEST(ThreadQueue, IdleReflectsPendingWork) {
  auto queue = make_thread_queue("test");
  EXPECT_TRUE(queue->idle());
  std::latch gate(1);
  queue->submit([&] {
    gate.wait();
    return 0.0;
  });
  EXPECT_FALSE(queue->idle());
  gate.count_down();
  queue->wait_idle();
  EXPECT_TRUE(queue->idle());
}

TEST(ThreadQueue, WaitIdleRethrowsAnErrorOnceAndKeepsRunning) {
  auto queue = make_thread_queue("test");
  std::atomic<int> after{0};
  queue->submit([]() -> double { throw std::runtime_error("work failed"); });
  queue->submit([&] {
    ++after;
    return 0.0;
  });
  EXPECT_THROW(queue->wait_idle(), std::runtime_error);
  EXPECT_EQ(after.load(), 1);
  EXPECT_NO_THROW(queue->wait_idle());
}

TEST(ThreadQueue, WaitIdleFromItsOwnWorkIsRefused) {
  auto queue = make_thread_queue("test");
  Queue* raw = queue.get();
  std::atomic<bool> refused{false};
  queue->submit([&] {
    try {
      raw->wait_idle();
    } catch (const Error& error) {
      refused = error.code() == ErrorCode::kInvalidArgument;
    }
    return 0.0;
  });
  queue->wait_idle();
  EXPECT_TRUE(refused.load());
}

TEST(ThreadQueue, DestructorDrainsQueuedWork) {
  std::atomic<int> ran{0};
  {
    auto queue = make_thread_queue("test");
    for (int i = 0; i < 100; ++i) {
      queue->submit([&] {
        ++ran;
        return 0.0;
      });
    }
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ThreadQueue, WorkMaySubmitMoreWork) {
  auto queue = make_thread_queue("test");
  Queue* raw = queue.get();
  std::vector<int> order;
  queue->submit([&] {
    order.push_back(1);
    raw->submit([&] {
      order.push_back(3);
      return 0.0;
    });
    return 0.0;
  });
  queue->submit([&] {
    order.push_back(2);
    return 0.0;
  });
  queue->wait_idle();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

// A device with its own queue type: streams must take queues from it.
class CountingQueueDevice : public FakeDevice {
 public:
  std::unique_ptr<Queue> create_queue() override {
    ++queues;
    return Device::create_queue();  // the default: a thread queue
  }
  int queues = 0;
};

TEST(Stream, TakesItsQueueFromTheDevice) {
  CountingQueueDevice device;
  {
    Stream a(device, 0);
    Stream b(device, 1);
    EXPECT_EQ(device.queues, 2);
    std::atomic<int> ran{0};
    a.enqueue([&] {
      ++ran;
      return 0.0;
    });
    a.synchronize();
    EXPECT_EQ(ran.load(), 1);
  }
}

TEST(Stream, ManyStreamsEachKeepTheirOrder) {
  FakeDevice device;
  constexpr int kStreams = 8;
  constexpr int kItems = 1000;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::vector<int>> seen(kStreams);
  for (int s = 0; s < kStreams; ++s) {
    streams.push_back(std::make_unique<Stream>(device, s));
  }
  std::vector<std::thread> producers;
  for (int s = 0; s < kStreams; ++s) {
    producers.emplace_back([&, s] {
      for (int i = 0; i < kItems; ++i) {
        streams[s]->enqueue([&seen, s, i] {
          seen[s].push_back(i);
          return 0.0;
        });
      }
    });
  }
  for (auto& producer : producers) producer.join();
  for (int s = 0; s < kStreams; ++s) {
    streams[s]->synchronize();
    ASSERT_EQ(seen[s].size(), static_cast<size_t>(kItems));
    for (int i = 0; i < kItems; ++i) EXPECT_EQ(seen[s][i], i);
    EXPECT_EQ(streams[s]->id(), static_cast<uint64_t>(s));
    EXPECT_EQ(&streams[s]->device(), &device);
  }
}

TEST(Stream, QueryAndSynchronize) {
  FakeDevice device;
  Stream stream(device, 1);
  EXPECT_TRUE(stream.query());
  std::latch gate(1);
  std::atomic<bool> done{false};
  stream.enqueue([&] {
    gate.wait();
    done = true;
    return 0.0;
  });
  EXPECT_FALSE(stream.query());
  EXPECT_FALSE(done.load());
  gate.count_down();
  stream.synchronize();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(stream.query());
}

TEST(Stream, SynchronizeRethrowsTheFirstErrorThenClearsIt) {
  FakeDevice device;
  Stream stream(device, 0);
  std::atomic<int> later{0};
  stream.enqueue([]() -> double {
    throw Error(ErrorCode::kDeviceError, "first failure");
  });
  stream.enqueue([]() -> double {
    throw Error(ErrorCode::kDeviceError, "second failure");
  });
  stream.enqueue([&] {
    ++later;
    return 0.0;
  });
  try {
    stream.synchronize();
    FAIL() << "synchronize() did not rethrow";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kDeviceError);
    EXPECT_STREQ(error.what(), "first failure");
  }
  EXPECT_EQ(later.load(), 1);  // work after the failure still ran
  EXPECT_NO_THROW(stream.synchronize());
}

TEST(Stream, DeviceErrorFromACopyReachesSynchronize) {
  FakeDevice device;
  Stream stream(device, 0);
  uint8_t byte = 0;
  stream.enqueue([&] { return device.copy_to_host(&byte, 0x1, 1); });
  try {
    stream.synchronize();
    FAIL() << "bad copy did not raise";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kDeviceError);
  }
}

TEST(Stream, DeviceTimeAdvancesByEachWorksDuration) {
  FakeDevice device;
  Stream stream(device, 0);
  EXPECT_EQ(stream.device_time_ns(), 0.0);
  for (double ns : {10.0, 20.0, 30.5}) {
    stream.enqueue([ns] { return ns; });
  }
  stream.synchronize();
  EXPECT_DOUBLE_EQ(stream.device_time_ns(), 60.5);

  DevicePtr ptr = device.allocate(4096);
  std::vector<uint8_t> host(4096, 7);
  stream.enqueue(
      [&] { return device.copy_to_device(ptr, host.data(), host.size()); });
  stream.synchronize();
  EXPECT_DOUBLE_EQ(stream.device_time_ns(), 60.5 + 4096);  // fake: 1 ns/B
  device.free(ptr);
}

TEST(Stream, FailedWorkAddsNoDeviceTime) {
  FakeDevice device;
  Stream stream(device, 0);
  stream.enqueue([] { return 5.0; });
  stream.enqueue([]() -> double { throw std::runtime_error("boom"); });
  EXPECT_THROW(stream.synchronize(), std::runtime_error);
  EXPECT_DOUBLE_EQ(stream.device_time_ns(), 5.0);
}

TEST(Stream, DestructorWaitsForPendingWork) {
  FakeDevice device;
  std::atomic<bool> finished{false};
  {
    Stream stream(device, 0);
    stream.enqueue([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = true;
      return 0.0;
    });
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace spyre::rt
