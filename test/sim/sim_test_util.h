// Helpers for the emulator device tests: a sim device, program builders
// and a way to run a program on bound device buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/program.h"
#include "spyre/sim/sim.h"
#include "spyre/sim/timing_table.h"

namespace spyre::sim::test {

inline constexpr uint32_t kFootprint = kSpyreChip.scratchpad_bytes;

// What the kernel library plans programs for when they run on the emulated
// chip (every device small_device() makes has it).
inline kernels::Target sim_target(uint32_t max_cores = 0) {
  return kernels::Target{kSpyreChip, max_cores};
}

// A small device: sanitizer builds cannot afford many huge reservations.
inline std::unique_ptr<rt::Device> small_device(uint64_t gib = 1) {
  return make_sim_device(0, gib << 30);
}

inline rt::StickTransfer xfer(uint32_t slot, uint64_t offset, uint32_t spad,
                              uint32_t run_bytes, uint32_t count1 = 1,
                              int64_t dram_stride1 = 0,
                              uint32_t spad_stride1 = 0, uint32_t count2 = 1,
                              int64_t dram_stride2 = 0,
                              uint32_t spad_stride2 = 0) {
  rt::StickTransfer x;
  x.dram = {slot, offset};
  x.spad = spad;
  x.run_bytes = run_bytes;
  x.count1 = count1;
  x.count2 = count2;
  x.dram_stride1 = dram_stride1;
  x.dram_stride2 = dram_stride2;
  x.spad_stride1 = spad_stride1;
  x.spad_stride2 = spad_stride2;
  return x;
}

inline rt::DmaLoad load(const rt::StickTransfer& x) { return rt::DmaLoad{x}; }
inline rt::DmaStore store(const rt::StickTransfer& x) {
  return rt::DmaStore{x};
}

inline rt::Tile tile(uint32_t offset, rt::DType dtype, int32_t row_stride,
                     int32_t col_stride = -1) {
  if (col_stride < 0)
    col_stride = static_cast<int32_t>(rt::element_size(dtype));
  return rt::Tile{offset, dtype, row_stride, col_stride};
}

inline rt::Vector vec(rt::VecOp op, rt::Tile dst, rt::Tile src0, uint32_t rows,
                      uint32_t cols) {
  rt::Vector v;
  v.op = op;
  v.dst = dst;
  v.src0 = src0;
  v.src1 = src0;
  v.src2 = src0;
  v.rows = rows;
  v.cols = cols;
  return v;
}

inline rt::ArgSlot slot(const char* name, uint64_t bytes,
                        rt::DType dtype = rt::DType::kFloat16,
                        bool output = false) {
  rt::ArgSlot s;
  s.name = name;
  s.dtype = dtype;
  s.bytes = bytes;
  s.is_output = output;
  return s;
}

inline rt::CoreProgram core(uint32_t id, std::vector<rt::Instruction> insts) {
  return rt::CoreProgram{id, kFootprint, std::move(insts)};
}

// Device buffers bound to a program's slots, with host-side helpers.
struct Buffers {
  rt::Device& device;
  std::vector<rt::ArgBinding> bindings;

  Buffers(rt::Device& dev, const rt::Program& program) : device(dev) {
    for (const rt::ArgSlot& s : program.args) {
      rt::ArgBinding b;
      b.ptr = device.allocate(s.bytes);
      b.bytes = rt::round_up_to_sticks(s.bytes);
      b.dtype = s.dtype;
      b.device_size = s.layout.device_size;
      device.fill(b.ptr, 0, b.bytes);
      bindings.push_back(b);
    }
  }
  ~Buffers() {
    for (const auto& b : bindings) device.free(b.ptr);
  }
  template <typename T>
  void upload(size_t slot, const std::vector<T>& data) {
    device.copy_to_device(bindings[slot].ptr, data.data(),
                          data.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> download(size_t slot) {
    std::vector<T> out(bindings[slot].bytes / sizeof(T));
    device.copy_to_host(out.data(), bindings[slot].ptr, out.size() * sizeof(T));
    return out;
  }
  // Every slot's bytes, to show a failed launch left memory untouched.
  std::vector<std::vector<uint8_t>> snapshot() {
    std::vector<std::vector<uint8_t>> out;
    for (size_t s = 0; s < bindings.size(); ++s)
      out.push_back(download<uint8_t>(s));
    return out;
  }
};

// Sets an environment variable for one scope, then restores it. Tests run
// one at a time, so no other thread reads the environment meanwhile.
class ScopedEnv {
 public:
  // A null `value` unsets the variable for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ScopedEnv(const char* name, const std::string& value)
      : ScopedEnv(name, value.c_str()) {}
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Deterministic pseudo-random bytes (distinct per seed).
inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(gen() >> 24);
  return out;
}

// The rt::Error `f` raises, or nullopt when it raises none.
struct Raised {
  rt::ErrorCode code;
  std::string message;
  bool mentions(const std::string& text) const {
    return message.find(text) != std::string::npos;
  }
};
inline std::optional<Raised> raised(const std::function<void()>& f) {
  try {
    f();
  } catch (const rt::Error& e) {
    return Raised{e.code(), e.what()};
  }
  return std::nullopt;
}

// Loads (validates, plans, prepares) and runs `program` once.
inline rt::LaunchStats run(rt::Device& device, const rt::Program& program,
                           Buffers& buffers) {
  rt::LoadedProgram loaded(device, program);
  return loaded.run(buffers.bindings);
}

// Cycles of one DMA of `bytes` in `runs` runs that finds the DRAM server
// idle. `overlap` of its bytes add to the launch's overlap of bytes read and
// written (a store after as many bytes read: all of them) and pay the
// turnaround; the server's service bounds the DMA when slower than the
// core's engine.
inline uint64_t lone_dma_cycles(uint64_t bytes, uint64_t runs = 1,
                                uint64_t overlap = 0) {
  const rt::CostTable& t = kTimingTable;
  const uint64_t stream =
      (bytes + t.dma_bytes_per_cycle - 1) / t.dma_bytes_per_cycle +
      runs * t.dma_cycles_per_run;
  const double service = static_cast<double>(bytes) / t.dram_bytes_per_cycle() +
                         static_cast<double>(overlap) *
                             t.dram_turnaround_ns_per_byte * t.clock_ghz;
  return std::max(stream, static_cast<uint64_t>(std::ceil(service))) +
         t.dma_latency_cycles;
}
// A store of `bytes` after at least as many bytes read in the launch.
inline uint64_t store_after_reads_cycles(uint64_t bytes) {
  return lone_dma_cycles(bytes, 1, bytes);
}

// Modelled stats of a program without caring about its data.
inline rt::LaunchStats modelled(rt::Device& device,
                                const rt::Program& program) {
  Buffers buffers(device, program);
  return run(device, program, buffers);
}

}  // namespace spyre::sim::test
