// Waits a user can end: a queue's timed wait, and the WaitCheck that
// streams, events and the runtime run every kWaitSlice of a wait (the torch
// glue raises KeyboardInterrupt from it on Ctrl-C).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "fake_device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

using Clock = std::chrono::steady_clock;
using testing::FakeDevice;

// Work that runs until `release` is set (a launch that will not end by itself).
Work held_until(const std::atomic<bool>& release) {
  return [&release] {
    while (!release.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return 0.0;
  };
}

TEST(WaitCheck, TimedWaitGivesUpAndLaterSeesTheQueueIdle) {
  auto queue = make_thread_queue("test");
  std::atomic<bool> release{false};
  queue->submit(held_until(release));
  const auto start = Clock::now();
  EXPECT_FALSE(queue->wait_idle_for(std::chrono::milliseconds(20)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(20));
  release = true;
  EXPECT_TRUE(queue->wait_idle_for(std::chrono::seconds(30)));
  queue->submit([]() -> double { throw Error(ErrorCode::kDeviceError, "x"); });
  EXPECT_THROW(queue->wait_idle_for(std::chrono::seconds(30)), Error);
}

TEST(WaitCheck, WhatTheCheckThrowsEndsAStreamWaitWhileTheWorkRunsOn) {
  FakeDevice device;
  Stream stream(device, 1);
  std::atomic<bool> release{false};
  stream.enqueue(held_until(release));
  int checks = 0;
  const auto start = Clock::now();
  EXPECT_THROW(stream.synchronize([&] {
    if (++checks == 2) throw std::runtime_error("interrupted");
  }),
               std::runtime_error);
  // Two slices, not the work's (unbounded) duration.
  EXPECT_LT(Clock::now() - start, 20 * kWaitSlice);
  EXPECT_FALSE(stream.query());
  release = true;
  stream.synchronize([] {});  // a check that never throws just waits
  EXPECT_TRUE(stream.query());
}

TEST(WaitCheck, EndsAnEventWait) {
  FakeDevice device;
  Stream stream(device, 1);
  std::atomic<bool> release{false};
  stream.enqueue(held_until(release));
  Event event;
  event.record(stream);
  EXPECT_THROW(
      event.synchronize([] { throw std::runtime_error("interrupted"); }),
      std::runtime_error);
  EXPECT_FALSE(event.query());
  release = true;
  event.synchronize();
  EXPECT_TRUE(event.query());
}

}  // namespace
}  // namespace spyre::rt
