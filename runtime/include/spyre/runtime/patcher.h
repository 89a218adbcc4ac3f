// Loading programs and the launch-time patcher.
//
// At load (LoadedProgram's constructor) the runtime validates the program,
// uploads its constants, and computes the patch plan: every place in the
// program that holds a symbolic address, with the byte extent its access can
// touch. A backend prepares its executable from the program and the plan.
//
// At launch, three ordered steps:
//   1. bind:     each argument slot gets a device allocation; dtype, size and
//                layout are checked against the slot;
//   2. relocate: each relocation becomes base + offset, straight from the
//                plan (no search);
//   3. verify:   each patched access lies inside its allocation and each
//                core's scratchpad footprint inside the device's scratchpad;
// and only then is the launch published to the stream. A failure at any step
// raises (kBindError, kRelocateError, kVerifyError) naming the slot and the
// access, and leaves device memory untouched.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "spyre/runtime/device.h"
#include "spyre/runtime/program.h"

namespace spyre::rt {

class Stream;

struct Relocation {
  uint32_t core_index = 0;   // index into Program::cores
  uint32_t instruction = 0;  // index into that core's instructions
  uint32_t slot = 0;
  uint64_t offset = 0;  // the symbolic address's byte offset
  int64_t lo = 0;       // accessed bytes, relative to the slot base:
  int64_t hi = 0;       //   [lo, hi)
};

struct PatchPlan {
  std::vector<Relocation> relocations;  // in program order
  // Per slot: the lowest and highest byte any access touches (lo >= hi when
  // the slot is never accessed). verify() checks these per relocation.
  std::vector<int64_t> slot_lo, slot_hi;
};

PatchPlan make_patch_plan(const Program& program);

// A tensor bound to an argument slot.
struct ArgBinding {
  DevicePtr ptr = 0;   // first byte of the tensor's device storage
  uint64_t bytes = 0;  // bytes available from ptr to the allocation's end
  DType dtype = DType::kFloat16;
  std::vector<int64_t> device_size;  // the tensor's device layout
};

// Shared ownership (enable_shared_from_this) lets a launch queued on a stream
// own its program: a cache may drop a program while launches of it wait.
class LoadedProgram : public std::enable_shared_from_this<LoadedProgram> {
 public:
  // Validates, uploads constants, plans and prepares. Throws
  // kMalformedProgram for a program the device cannot run.
  LoadedProgram(Device& device, Program program);
  ~LoadedProgram();
  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;

  const Program& program() const { return program_; }
  const PatchPlan& plan() const { return plan_; }
  Device& device() const { return device_; }

  // Step 1..3, synchronously, into `addresses` (resized to the plan).
  void bind(std::span<const ArgBinding> args) const;
  void relocate(std::span<const ArgBinding> args,
                std::vector<DevicePtr>& addresses) const;
  void verify(std::span<const ArgBinding> args,
              std::span<const DevicePtr> addresses) const;

  // All three steps, then publishes the launch to `stream`. `on_done`, when
  // given, receives the launch's stats on the stream's thread. The queued
  // launch owns a share of `program`, so it runs whatever becomes of the
  // caller's references.
  static void launch(std::shared_ptr<const LoadedProgram> program,
                     Stream& stream, std::span<const ArgBinding> args,
                     std::function<void(const LaunchStats&)> on_done = {});
  // The same for a program the caller keeps alive until the stream ran the
  // launch (a program on the stack of a test or benchmark that synchronizes).
  void launch(Stream& stream, std::span<const ArgBinding> args,
              std::function<void(const LaunchStats&)> on_done = {}) const;
  // Runs the launch synchronously without a stream (tests, benchmarks).
  LaunchStats run(std::span<const ArgBinding> args) const;

 private:
  // Steps 1..3: the patched addresses, or raises.
  std::vector<DevicePtr> checked_addresses(
      std::span<const ArgBinding> args) const;
  // Queues the launch on `stream`; `Ref` (a plain pointer or a shared_ptr)
  // is what the queued work holds the program by.
  template <typename Ref>
  static void enqueue(Ref program, Stream& stream,
                      std::span<const ArgBinding> args,
                      std::function<void(const LaunchStats&)> on_done);

  Device& device_;
  Program program_;
  PatchPlan plan_;
  std::vector<DevicePtr> constant_ptrs_;
  std::unique_ptr<Executable> executable_;
};

}  // namespace spyre::rt
