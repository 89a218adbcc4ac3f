#include "dataflow/launch.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <ostream>
#include <thread>

#include "device.h"
#include "kernels.h"
#include "kernels_util.h"
#include "spyre/runtime/error.h"
#include "spyre/sim/sim.h"

namespace spyre::sim {
namespace {

// The second host thread a launch's cores run on. One for the process, made
// on first use and never destroyed: a queue thread may still be running a
// launch while statics are destroyed at exit. Spawning a thread per launch
// cost more host time than a small launch itself. A launch that finds the
// helper busy (a launch on another stream has it) runs on its own thread.
class HelperThread {
 public:
  static HelperThread& get() {
    static HelperThread* helper = new HelperThread();
    return *helper;
  }

  // Starts `task` on the helper unless it is busy; false when busy.
  bool try_start(std::function<void()> task) {
    {
      std::lock_guard lock(mutex_);
      if (busy_) return false;
      busy_ = true;
      task_ = std::move(task);
    }
    wake_.notify_one();
    return true;
  }

  // Waits for the task started by this thread's try_start().
  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return task_ == nullptr; });
    busy_ = false;
  }

 private:
  HelperThread() {
    std::thread([this] { loop(); }).detach();
  }

  [[noreturn]] void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return task_ != nullptr; });
      lock.unlock();
      task_();  // Launch::work catches everything a core throws
      lock.lock();
      task_ = nullptr;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> task_;  // set while started and not yet finished
  bool busy_ = false;           // from try_start() to the owner's wait()
};

// Where a core is, for error messages. Checks run on every instruction, so
// this is formatted only when a check fails.
struct CoreAt {
  uint32_t core;
  size_t instruction;
};
std::ostream& operator<<(std::ostream& out, const CoreAt& at) {
  return out << "core " << at.core << " instruction " << at.instruction;
}

enum class CoreState : uint8_t { kRunnable, kRunning, kParked, kDone };

struct Channel {
  bool sent = false;
  std::vector<uint8_t> data;
};

struct UndoEntry {
  uint8_t* host = nullptr;
  std::vector<uint8_t> old;
};

class Launch {
 public:
  Launch(const SimExecutable& exe, std::span<const rt::DevicePtr> addresses,
         DeviceMemory& memory, Scratchpads& pads, const Watchdog& watchdog)
      : exe_(exe),
        addresses_(addresses),
        memory_(memory),
        watchdog_(watchdog),
        states_(exe.cores.size(), CoreState::kRunnable),
        pcs_(exe.cores.size(), 0),
        channels_(exe.channels.size()) {
    for (const DecodedCore& core : exe.cores) {
      auto& pad = pads.cores.at(core.core);
      if (!pad) pad = std::make_unique<uint8_t[]>(pads.bytes);
      spads_.emplace_back(pad.get(), pads.bytes);
    }
  }

  void run(uint64_t inline_cycles) {
    // Two host threads for a large launch, while the host has a core to
    // spare (inline_cycles 0: always, as the sanitizer runs ask).
    const bool helped = exe_.cores.size() > 1 &&
                        exe_.host_work >= inline_cycles &&
                        (inline_cycles == 0 || rt::host_core_to_spare()) &&
                        HelperThread::get().try_start([this] { work(); });
    work();
    if (helped) HelperThread::get().wait();
    if (error_) {
      for (auto it = undo_.rbegin(); it != undo_.rend(); ++it) {
        std::memcpy(it->host, it->old.data(), it->old.size());
      }
      std::rethrow_exception(error_);
    }
  }

 private:
  // One pool thread: takes runnable cores until all are done.
  void work() {
    std::unique_lock lock(mutex_);
    while (!error_) {
      size_t pick = states_.size();
      bool all_done = true, any_running = false;
      for (size_t c = 0; c < states_.size(); ++c) {
        if (states_[c] != CoreState::kDone) all_done = false;
        if (states_[c] == CoreState::kRunning) any_running = true;
        if (pick == states_.size() && states_[c] == CoreState::kRunnable)
          pick = c;
      }
      if (all_done) return;
      if (pick == states_.size()) {
        if (!any_running) {
          fail(std::make_exception_ptr(
              rt::Error(rt::ErrorCode::kDeviceError, describe_parked())));
          return;
        }
        wake_.wait(lock);
        continue;
      }
      states_[pick] = CoreState::kRunning;
      lock.unlock();
      bool finished = false;
      std::exception_ptr error;
      try {
        finished = run_core(pick);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error) fail(error);
      if (finished) states_[pick] = CoreState::kDone;
      wake_.notify_all();
    }
  }

  void fail(std::exception_ptr error) {
    if (!error_) error_ = error;
    failed_.store(true, std::memory_order_release);
    wake_.notify_all();
  }

  std::string describe_parked() const {
    std::string out = "sim: launch of '" + exe_.name + "' deadlocked:";
    for (size_t c = 0; c < states_.size(); ++c) {
      if (states_[c] != CoreState::kParked) continue;
      const auto& r = std::get<rt::RingRecv>(exe_.cores[c].insts[pcs_[c]].inst);
      out += rt::str(" core ", exe_.cores[c].core, " waits on channel ",
                     r.channel, " from core ", r.src_core, ";");
    }
    return out;
  }

  // Runs core `c` until it finishes (true) or parks at a receive (false).
  // Another core's failure and the watchdog are checked between
  // instructions, the clock once per kWatchdogInstructions of them: small
  // instructions take tens of nanoseconds, a clock read about twenty.
  bool run_core(size_t c) {
    constexpr uint32_t kWatchdogInstructions = 64;
    const auto& insts = exe_.cores[c].insts;
    uint32_t until_clock = 0;
    while (pcs_[c] < insts.size()) {
      if (failed_.load(std::memory_order_acquire)) return false;
      if (until_clock-- == 0) {
        check_watchdog(c);
        until_clock = kWatchdogInstructions;
      }
      if (!step(c, insts[pcs_[c]])) return false;
      ++pcs_[c];
    }
    return true;
  }

  CoreAt where(size_t c) const { return {exe_.cores[c].core, pcs_[c]}; }

  void check_watchdog(size_t c) const {
    rt::check(std::chrono::steady_clock::now() < watchdog_.deadline,
              rt::ErrorCode::kDeviceError, "sim: launch of '", exe_.name,
              "' ran past the watchdog's ", watchdog_.seconds,
              " s of host time and was aborted at ", where(c),
              "; what it stored so far is in device memory. Split the work "
              "into smaller launches, or raise SPYRE_SIM_WATCHDOG_S");
  }

  // The host bytes of the device extent of `d`'s relocation, checked to lie
  // in one live allocation; `base` receives the patched address.
  uint8_t* device_extent(const DecodedInst& d, size_t c, rt::DevicePtr& base,
                         const char* what) {
    rt::check(d.relocation >= 0 &&
                  static_cast<size_t>(d.relocation) < addresses_.size(),
              rt::ErrorCode::kDeviceError, "sim: ", what, " at ", where(c),
              " has no patched address");
    const rt::Relocation& rel = exe_.relocations[d.relocation];
    base = addresses_[d.relocation];
    rt::DevicePtr lo = base - rel.offset + rel.lo;
    memory_.translate(lo, static_cast<uint64_t>(rel.hi - rel.lo), what);
    return memory_.host(lo);
  }

  void check_spad(size_t c, int64_t lo, int64_t hi, const char* what) const {
    const size_t bytes = spads_[c].size();
    rt::check(lo >= 0 && hi <= static_cast<int64_t>(bytes),
              rt::ErrorCode::kDeviceError, "sim: ", what, " at ", where(c),
              " reaches scratchpad bytes [", lo, ", ", hi, ") outside the ",
              bytes, "-byte scratchpad");
  }

  // Bytes [begin, end) of each run move (a store's write mask; the whole
  // run otherwise).
  void transfer(size_t c, const DecodedInst& d, const rt::StickTransfer& x,
                bool to_device, uint32_t begin, uint32_t end) {
    const char* what = to_device ? "DmaStore" : "DmaLoad";
    rt::DevicePtr base = 0;
    device_extent(d, c, base, what);
    int64_t spad_hi = int64_t{x.spad} + int64_t{x.count2 - 1} * x.spad_stride2 +
                      int64_t{x.count1 - 1} * x.spad_stride1 + x.run_bytes;
    check_spad(c, x.spad, spad_hi, what);
    uint8_t* host = memory_.host(base);
    uint8_t* spad = spads_[c].data();
    if (begin == 0 && end == x.run_bytes) {
      // Runs back to back on both sides move as one (a stick per memcpy
      // costs more in calls than in bytes); the modelled time is the
      // timing model's, counted from the instruction as written.
      rt::StickTransfer merged = merge_adjacent_runs(x);
      move_runs(c, merged, to_device, host, spad, 0, merged.run_bytes);
    } else {
      move_runs(c, x, to_device, host, spad, begin, end);
    }
  }

  // `x` with runs that follow each other in device memory and in the
  // scratchpad alike merged into longer runs: the same bytes, in order.
  static rt::StickTransfer merge_adjacent_runs(rt::StickTransfer x) {
    if (x.count1 > 1 && x.dram_stride1 == x.run_bytes &&
        x.spad_stride1 == x.run_bytes) {
      x.run_bytes *= x.count1;
      x.count1 = 1;
    }
    if (x.count1 == 1 && x.count2 > 1 && x.dram_stride2 == x.run_bytes &&
        x.spad_stride2 == x.run_bytes) {
      x.run_bytes *= x.count2;
      x.count2 = 1;
    }
    return x;
  }

  void move_runs(size_t c, const rt::StickTransfer& x, bool to_device,
                 uint8_t* host, uint8_t* spad, uint32_t begin, uint32_t end) {
    // The clock is read once per kWatchdogRuns runs: a transfer of many
    // runs (a stride-0 repeat) can outlast the budget on its own.
    constexpr uint32_t kWatchdogRuns = 4096;
    uint32_t since_check = 0;
    for (uint32_t i2 = 0; i2 < x.count2; ++i2) {
      for (uint32_t i1 = 0; i1 < x.count1; ++i1) {
        if (++since_check == kWatchdogRuns) {
          since_check = 0;
          check_watchdog(c);
        }
        uint8_t* dram =
            host + int64_t{i2} * x.dram_stride2 + int64_t{i1} * x.dram_stride1;
        uint8_t* local = spad + x.spad + uint64_t{i2} * x.spad_stride2 +
                         uint64_t{i1} * x.spad_stride1;
        if (to_device) {
          // A gather or scatter can still fail on another core after this
          // store, and a failed launch must leave device memory as it was:
          // keep the bytes this run overwrites (only them: other cores write
          // the rest of the same tensor concurrently).
          if (exe_.has_indexed_rows) remember(dram + begin, end - begin);
          std::memcpy(dram + begin, local + begin, end - begin);
        } else {
          std::memcpy(local + begin, dram + begin, end - begin);
        }
      }
    }
  }

  void remember(uint8_t* dram, size_t bytes) {
    std::lock_guard lock(mutex_);
    undo_.push_back({dram, std::vector<uint8_t>(dram, dram + bytes)});
  }

  // Table rows index[r] paired with scratchpad rows r: every index is
  // checked before any row moves. A gather copies table rows into the
  // scratchpad; a scatter copies scratchpad rows into the table (undoably,
  // as a store).
  void indexed_rows(size_t c, const DecodedInst& d, const rt::IndexedRows& g,
                    bool scatter) {
    const char* what = scatter ? "DmaScatter" : "DmaGather";
    rt::DevicePtr base = 0;
    device_extent(d, c, base, what);
    uint32_t index_size = rt::element_size(g.index_dtype);
    check_spad(c, g.index_spad,
               int64_t{g.index_spad} + int64_t{g.count} * index_size, what);
    check_spad(c, g.spad,
               g.count == 0
                   ? g.spad
                   : int64_t{g.spad} + int64_t{g.count - 1} * g.spad_stride +
                         g.row_bytes,
               what);
    uint8_t* spad = spads_[c].data();
    std::vector<int64_t> rows(g.count);
    for (uint32_t r = 0; r < g.count; ++r) {
      const uint8_t* p = spad + g.index_spad + uint64_t{r} * index_size;
      if (index_size == 4) {
        int32_t v;
        std::memcpy(&v, p, 4);
        rows[r] = v;
      } else {
        std::memcpy(&rows[r], p, 8);
      }
      rt::check(rows[r] >= 0 && static_cast<uint64_t>(rows[r]) < g.table_rows,
                rt::ErrorCode::kDeviceError, "sim: ", what, " at ", where(c),
                ": index ", rows[r], " at position ", r,
                " is outside the table's [0, ", g.table_rows,
                ") rows; the launch was abandoned and device "
                "memory left unchanged");
    }
    uint8_t* table = memory_.host(base);
    for (uint32_t r = 0; r < g.count; ++r) {
      uint8_t* row = spad + g.spad + uint64_t{r} * g.spad_stride;
      uint8_t* entry =
          table + static_cast<uint64_t>(rows[r]) * g.table_row_stride;
      if (scatter) {
        remember(entry, g.row_bytes);
        std::memcpy(entry, row, g.row_bytes);
      } else {
        std::memcpy(row, entry, g.row_bytes);
      }
    }
  }

  void send(size_t c, const rt::RingSend& s) {
    size_t ch = exe_.channel_index(s.channel);
    check_spad(c, s.spad, int64_t{s.spad} + s.bytes, "RingSend");
    Channel& channel = channels_[ch];
    channel.data.assign(spads_[c].data() + s.spad,
                        spads_[c].data() + s.spad + s.bytes);
    std::lock_guard lock(mutex_);
    channel.sent = true;
    const InstRef& recv = exe_.channel_ends[ch].recv;
    if (states_[recv.core_index] == CoreState::kParked &&
        pcs_[recv.core_index] == recv.instruction) {
      states_[recv.core_index] = CoreState::kRunnable;
    }
    wake_.notify_all();
  }

  // False when the send has not run yet: the core parks.
  bool receive(size_t c, const rt::RingRecv& r) {
    size_t ch = exe_.channel_index(r.channel);
    if (r.transpose.enabled()) {  // a 2-D landing: the validator's range
      for (const rt::SpadRange& range : rt::scratchpad_ranges(r)) {
        check_spad(c, range.lo, range.hi, "RingRecv");
      }
    } else {
      check_spad(c, r.spad, int64_t{r.spad} + r.bytes, "RingRecv");
    }
    {
      std::lock_guard lock(mutex_);
      if (!channels_[ch].sent) {
        states_[c] = CoreState::kParked;
        return false;
      }
    }
    const Channel& channel = channels_[ch];
    size_t bytes = std::min<size_t>(r.bytes, channel.data.size());
    // A zero-byte token carries no data (and its buffer may be null).
    if (bytes == 0) return true;
    if (r.transpose.enabled()) {
      land_transposed(spads_[c].data() + r.spad, channel.data.data(), bytes,
                      r.transpose);
    } else {
      std::memcpy(spads_[c].data() + r.spad, channel.data.data(), bytes);
    }
    return true;
  }

  // Element c of received stick s to row c, column s (program.h).
  static void land_transposed(uint8_t* dst, const uint8_t* sticks, size_t bytes,
                              const rt::StickTranspose& t) {
    const uint32_t size = rt::element_size(t.dtype);
    const auto rows = static_cast<uint32_t>(bytes / rt::kStickBytes);
    for_each_in_blocks(rows, t.cols, [&](uint32_t s, uint32_t col) {
      std::memcpy(dst + size_t{col} * t.pitch + size_t{s} * size,
                  sticks + size_t{s} * rt::kStickBytes + size_t{col} * size,
                  size);
    });
  }

  bool step(size_t c, const DecodedInst& d) {
    std::span<uint8_t> spad = spads_[c];
    if (auto* l = std::get_if<rt::DmaLoad>(&d.inst)) {
      transfer(c, d, l->xfer, false, 0, l->xfer.run_bytes);
    } else if (auto* s = std::get_if<rt::DmaStore>(&d.inst)) {
      transfer(c, d, s->xfer, true, s->mask_begin,
               s->masked() ? s->mask_end : s->xfer.run_bytes);
    } else if (auto* g = std::get_if<rt::DmaGather>(&d.inst)) {
      indexed_rows(c, d, *g, false);
    } else if (auto* sc = std::get_if<rt::DmaScatter>(&d.inst)) {
      indexed_rows(c, d, *sc, true);
    } else if (auto* rs = std::get_if<rt::RingSend>(&d.inst)) {
      send(c, *rs);
    } else if (auto* rr = std::get_if<rt::RingRecv>(&d.inst)) {
      return receive(c, *rr);
    } else if (auto* mm = std::get_if<rt::MatMul>(&d.inst)) {
      run_matmul(*mm, spad);
    } else if (auto* v = std::get_if<rt::Vector>(&d.inst)) {
      run_vector(*v, spad);
    } else if (auto* red = std::get_if<rt::Reduce>(&d.inst)) {
      run_reduce(*red, spad);
    } else if (auto* f = std::get_if<rt::RandFill>(&d.inst)) {
      run_rand(*f, spad);
    }
    return true;
  }

  const SimExecutable& exe_;
  std::span<const rt::DevicePtr> addresses_;
  DeviceMemory& memory_;
  const Watchdog& watchdog_;
  std::vector<std::span<uint8_t>> spads_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<CoreState> states_;
  std::vector<size_t> pcs_;
  std::vector<Channel> channels_;
  std::vector<UndoEntry> undo_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};  // error_ is set: a lock-free hint
};

}  // namespace

void run_launch(const SimExecutable& exe,
                std::span<const rt::DevicePtr> addresses, DeviceMemory& memory,
                Scratchpads& pads, uint64_t inline_cycles,
                const Watchdog& watchdog) {
  Launch(exe, addresses, memory, pads, watchdog).run(inline_cycles);
}

}  // namespace spyre::sim
