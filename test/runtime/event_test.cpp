// Events: record/query/synchronize, cross-stream ordering, re-recording, and
// elapsed host and modelled device time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "fake_device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/stream.h"

namespace spyre::rt {
namespace {

using testing::FakeDevice;

// Enqueues work that holds `stream` until the returned latch is released.
void hold(Stream& stream, std::latch& gate) {
  stream.enqueue([&gate] {
    gate.wait();
    return 0.0;
  });
}

TEST(Event, UnrecordedEventIsCompleteAndSynchronizeReturns) {
  Event event;
  EXPECT_FALSE(event.recorded());
  EXPECT_TRUE(event.query());
  EXPECT_NO_THROW(event.synchronize());
}

TEST(Event, RecordCompletesWhenTheStreamReachesIt) {
  FakeDevice device;
  Stream stream(device, 1);
  std::latch gate(1);
  hold(stream, gate);
  Event event;
  event.record(stream);
  EXPECT_TRUE(event.recorded());
  EXPECT_FALSE(event.query());
  gate.count_down();
  event.synchronize();
  EXPECT_TRUE(event.query());
}

TEST(Event, WaitingStreamRunsAfterTheSlowerStreamsRecordedWork) {
  FakeDevice device;
  Stream slow(device, 1);
  Stream fast(device, 2);
  std::latch gate(1);
  std::atomic<bool> slow_done{false};
  std::atomic<bool> fast_saw_slow_done{false};
  std::atomic<bool> fast_ran{false};
  hold(slow, gate);
  slow.enqueue([&] {
    slow_done = true;
    return 0.0;
  });
  Event event;
  event.record(slow);
  event.block(fast);
  fast.enqueue([&] {
    fast_saw_slow_done = slow_done.load();
    fast_ran = true;
    return 0.0;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(fast_ran.load()) << "fast stream did not wait for the event";
  EXPECT_FALSE(fast.query());
  gate.count_down();
  fast.synchronize();
  EXPECT_TRUE(fast_saw_slow_done.load());
}

TEST(Event, BlockBeforeAnyRecordIsANoOp) {
  FakeDevice device;
  Stream stream(device, 1);
  Event event;
  event.block(stream);
  std::atomic<bool> ran{false};
  stream.enqueue([&] {
    ran = true;
    return 0.0;
  });
  stream.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(stream.device_time_ns(), 0.0);
}

TEST(Event, ReRecordMovesTheEventButEarlierWaitsKeepTheirRecord) {
  FakeDevice device;
  Stream held(device, 1);
  Stream idle(device, 2);
  Stream waiter(device, 3);
  std::latch gate(1);
  hold(held, gate);
  Event event;
  event.record(held);
  event.block(waiter);  // waits for the record on `held`
  std::atomic<bool> waiter_ran{false};
  waiter.enqueue([&] {
    waiter_ran = true;
    return 0.0;
  });

  event.record(idle);  // now the event means "idle's work so far"
  event.synchronize();
  EXPECT_TRUE(event.query());
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(waiter_ran.load()) << "re-record released an earlier wait";
  gate.count_down();
  waiter.synchronize();
  EXPECT_TRUE(waiter_ran.load());
}

TEST(Event, ElapsedHostTime) {
  FakeDevice device;
  Stream stream(device, 0);
  Event start(true);
  Event end(true);
  start.record(stream);
  stream.enqueue([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 0.0;
  });
  end.record(stream);
  end.synchronize();
  double ms = end.elapsed_ms_since(start);
  EXPECT_GE(ms, 19.0);
  EXPECT_LT(ms, 2000.0);
}

TEST(Event, ElapsedTimeNeedsTimingRecordAndCompletion) {
  FakeDevice device;
  Stream stream(device, 0);
  Event untimed;
  Event start(true);
  Event end(true);
  auto expect_invalid = [](auto&& call, const char* needle) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos)
          << error.what();
    }
  };
  expect_invalid([&] { end.elapsed_ms_since(start); }, "recorded");
  untimed.record(stream);
  start.record(stream);
  stream.synchronize();
  expect_invalid([&] { start.elapsed_ms_since(untimed); }, "enable_timing");

  std::latch gate(1);
  hold(stream, gate);
  end.record(stream);
  expect_invalid([&] { end.device_elapsed_ms_since(start); }, "completed");
  gate.count_down();
  end.synchronize();
  EXPECT_GE(end.elapsed_ms_since(start), 0.0);
}

TEST(Event, DeviceElapsedTimeIsTheModelledDurationBetweenRecords) {
  FakeDevice device;
  Stream stream(device, 0);
  stream.enqueue([] { return 500.0; });
  Event start(true);
  Event end(true);
  start.record(stream);
  stream.enqueue([] { return 1500.0; });
  stream.enqueue([] { return 2500.0; });
  end.record(stream);
  end.synchronize();
  EXPECT_DOUBLE_EQ(end.device_elapsed_ms_since(start), 4000.0 / 1e6);
}

TEST(Event, WaitRaisesTheStreamClockToTheEventsDeviceTime) {
  FakeDevice device;
  Stream producer(device, 1);
  Stream consumer(device, 2);
  producer.enqueue([] { return 5000.0; });
  Event produced(true);
  produced.record(producer);
  consumer.enqueue([] { return 1000.0; });
  produced.block(consumer);
  consumer.enqueue([] { return 10.0; });
  consumer.synchronize();
  EXPECT_DOUBLE_EQ(consumer.device_time_ns(), 5010.0);  // max(1000, 5000)+10

  // A consumer already ahead of the event keeps its own clock.
  Stream ahead(device, 3);
  ahead.enqueue([] { return 9000.0; });
  produced.block(ahead);
  ahead.synchronize();
  EXPECT_DOUBLE_EQ(ahead.device_time_ns(), 9000.0);
}

TEST(Event, SynchronizeReraisesAnErrorRaisedBeforeTheRecord) {
  FakeDevice device;
  Stream stream(device, 0);
  stream.enqueue([]() -> double {
    throw Error(ErrorCode::kDeviceError, "launch faulted");
  });
  Event event;
  event.record(stream);
  EXPECT_THROW(event.synchronize(), Error);
  EXPECT_THROW(stream.synchronize(), Error);  // the stream still reports it
  Event clean;
  clean.record(stream);
  EXPECT_NO_THROW(clean.synchronize());
}

TEST(Event, OutlivingItsRecordOrDyingBeforeItIsSafe) {
  FakeDevice device;
  Stream stream(device, 0);
  std::latch gate(1);
  hold(stream, gate);
  {
    Event doomed;
    doomed.record(stream);
  }  // destroyed while its record is still queued
  gate.count_down();
  EXPECT_NO_THROW(stream.synchronize());
}

}  // namespace
}  // namespace spyre::rt
