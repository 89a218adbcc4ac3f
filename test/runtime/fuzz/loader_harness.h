// The program loader's contract, checked on one input at a time. Shared by
// the seeded mutation test (loader_fuzz_test.cpp) and the libFuzzer target
// (program_loader_fuzzer.cpp), so both hold every input to the same rules:
// - malformed input is rejected with Error(kMalformedProgram), nothing else;
// - a program that validates round-trips through the binary format, loads on
//   a device, has a patch plan whose every access fits its slot, and runs
//   with bindings of exactly the declared sizes, execute() seeing exactly
//   base + offset per relocation;
// - a bad binding then fails before execute() with device memory unchanged;
// - a rejected program leaves no device memory or prepared executable behind.
// A broken rule throws LoaderViolation (libFuzzer then reports a crash).
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "../fake_device.h"
#include "spyre/runtime/error.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/program.h"

namespace spyre::rt::testing {

struct LoaderViolation : std::logic_error {
  using std::logic_error::logic_error;
};

enum class LoaderOutcome {
  kRejected,     // malformed: refused with kMalformedProgram
  kPlannedOnly,  // valid, but its slots are too large to allocate here
  kLaunched,     // valid, loaded and run on the fake device
};

namespace loader_detail {

// Programs whose arguments add up to more than this are planned and
// round-tripped but not run (a fuzzed slot can declare terabytes).
inline constexpr uint64_t kMaxRunBytes = 8ull << 20;

template <typename... Args>
void require(bool ok, Args&&... what) {
  if (!ok) throw LoaderViolation(str(std::forward<Args>(what)...));
}

inline void require_malformed(const Error& e, const char* stage) {
  require(e.code() == ErrorCode::kMalformedProgram, stage, " raised ",
          error_code_name(e.code()),
          " instead of kMalformedProgram: ", e.what());
  require(std::string(e.what()).find("program") != std::string::npos, stage,
          " error does not say which program or offset: ", e.what());
}

inline uint64_t slot_size(const Program& p, uint32_t slot) {
  return slot < p.args.size() ? p.args[slot].bytes
                              : p.constants[slot - p.args.size()].data.size();
}

// The plan numbers every device access once, in program order, and each
// access lies inside its slot's declared bytes.
inline void check_plan(const Program& p, const PatchPlan& plan) {
  size_t expected = 0;
  for (const CoreProgram& core : p.cores) {
    for (const Instruction& inst : core.instructions) {
      expected += device_extents(inst).size();
    }
  }
  require(plan.relocations.size() == expected, "plan has ",
          plan.relocations.size(), " relocations, program has ", expected,
          " device accesses");
  require(plan.slot_lo.size() == p.num_slots() &&
              plan.slot_hi.size() == p.num_slots(),
          "plan slot ranges do not cover every slot");
  for (size_t r = 0; r < plan.relocations.size(); ++r) {
    const Relocation& reloc = plan.relocations[r];
    require(reloc.slot < p.num_slots(), "relocation ", r, " names slot ",
            reloc.slot);
    uint64_t size = slot_size(p, reloc.slot);
    require(reloc.lo >= 0 && reloc.lo < reloc.hi &&
                static_cast<uint64_t>(reloc.hi) <= size,
            "relocation ", r, " accesses [", reloc.lo, ", ", reloc.hi,
            ") of a slot of ", size, " bytes in a validated program");
    require(static_cast<int64_t>(reloc.offset) >= reloc.lo &&
                static_cast<int64_t>(reloc.offset) < reloc.hi,
            "relocation ", r, " offset ", reloc.offset,
            " lies outside its own extent");
    require(plan.slot_lo[reloc.slot] <= reloc.lo &&
                plan.slot_hi[reloc.slot] >= reloc.hi,
            "slot range of slot ", reloc.slot, " misses relocation ", r);
  }
}

inline std::vector<std::vector<uint8_t>> snapshot(
    FakeDevice& device, const std::vector<ArgBinding>& args) {
  std::vector<std::vector<uint8_t>> out;
  for (const ArgBinding& arg : args) {
    std::vector<uint8_t> bytes(arg.bytes);
    device.copy_to_host(bytes.data(), arg.ptr, arg.bytes);
    out.push_back(std::move(bytes));
  }
  return out;
}

// A run with `args` must fail in bind() and touch nothing.
inline void expect_bind_failure(const LoadedProgram& loaded, FakeDevice& device,
                                const std::vector<ArgBinding>& good,
                                const std::vector<ArgBinding>& bad,
                                const char* what) {
  int launches = device.launches();
  auto before = snapshot(device, good);
  try {
    loaded.run(bad);
  } catch (const Error& e) {
    require(e.code() == ErrorCode::kBindError, what, " raised ",
            error_code_name(e.code()), ": ", e.what());
    require(device.launches() == launches, what, " reached execute()");
    require(snapshot(device, good) == before, what, " changed device memory");
    return;
  }
  throw LoaderViolation(str(what, " was accepted"));
}

// Loads and runs a validated program with exact-size bindings, then checks
// that bad bindings are refused before anything runs.
inline void check_launch(const Program& p) {
  FakeDevice device(64ull << 20);
  std::vector<ArgBinding> args;
  for (size_t s = 0; s < p.args.size(); ++s) {
    const ArgSlot& slot = p.args[s];
    ArgBinding arg{device.allocate(slot.bytes), slot.bytes, slot.dtype,
                   slot.layout.device_size};
    std::vector<uint8_t> pattern(slot.bytes, static_cast<uint8_t>(0x5A + s));
    device.copy_to_device(arg.ptr, pattern.data(), pattern.size());
    args.push_back(arg);
  }
  const uint64_t args_in_use = device.bytes_in_use();
  {
    LoadedProgram loaded(device, p);
    require(device.prepares() == 1, "load prepared ", device.prepares(),
            " times");
    loaded.run(args);
    require(device.launches() == 1, "run did not reach execute() once");
    std::vector<DevicePtr> relocated;
    loaded.relocate(args, relocated);
    std::vector<DevicePtr> seen = device.last_addresses();
    require(seen == relocated, "execute() saw other addresses than relocate()");
    const PatchPlan& plan = loaded.plan();
    for (size_t r = 0; r < plan.relocations.size(); ++r) {
      const Relocation& reloc = plan.relocations[r];
      if (reloc.slot < args.size()) {
        require(seen[r] == args[reloc.slot].ptr + reloc.offset, "relocation ",
                r, " is not base + offset");
      }
    }
    if (!args.empty()) {
      auto wrong_dtype = args;
      wrong_dtype[0].dtype = static_cast<DType>(
          (static_cast<int>(args[0].dtype) + 1) % kNumDTypes);
      expect_bind_failure(loaded, device, args, wrong_dtype, "a wrong dtype");
      auto null_ptr = args;
      null_ptr[0].ptr = 0;
      expect_bind_failure(loaded, device, args, null_ptr, "a null pointer");
      auto too_many = args;
      too_many.push_back(args[0]);
      expect_bind_failure(loaded, device, args, too_many, "an extra argument");
    }
    for (size_t s = 0; s < args.size(); ++s) {
      if (p.args[s].bytes == 0) continue;
      auto short_view = args;
      short_view[s].bytes -= 1;
      expect_bind_failure(loaded, device, args, short_view, "a short binding");
      break;
    }
  }
  require(device.bytes_in_use() == args_in_use,
          "unloading left constants allocated");
}

inline uint64_t total_arg_bytes(const Program& p) {
  uint64_t total = 0;
  for (const ArgSlot& slot : p.args) {
    if (slot.bytes > kMaxRunBytes) return slot.bytes;
    total += slot.bytes;
  }
  return total;
}

inline LoaderOutcome check_valid(const Program& p) {
  std::vector<uint8_t> bytes = serialize(p);
  Program again;
  try {
    again = deserialize(bytes, FakeDevice().properties().limits());
  } catch (const Error& e) {
    throw LoaderViolation(
        str("a validated program does not deserialize: ", e.what()));
  }
  // Compared as bytes: a NaN immediate is never == itself.
  require(serialize(again) == bytes, "round trip changed the program");
  check_plan(p, make_patch_plan(p));
  if (total_arg_bytes(p) > kMaxRunBytes) return LoaderOutcome::kPlannedOnly;
  check_launch(p);
  return LoaderOutcome::kLaunched;
}

}  // namespace loader_detail

// A constructed program: validate() and LoadedProgram agree on it.
inline LoaderOutcome check_program(const Program& p) {
  using namespace loader_detail;
  const ProgramLimits limits = FakeDevice().properties().limits();
  try {
    validate(p, limits);
  } catch (const Error& e) {
    require_malformed(e, "validate()");
    FakeDevice device;
    try {
      LoadedProgram loaded(device, p);
    } catch (const Error& load_error) {
      require_malformed(load_error, "LoadedProgram");
      require(device.bytes_in_use() == 0 && device.prepares() == 0,
              "a rejected load left memory or an executable behind");
      return LoaderOutcome::kRejected;
    }
    throw LoaderViolation(
        str("LoadedProgram accepted what validate() rejects: ", e.what()));
  }
  return check_valid(p);
}

// Serialised input, as a file or a fuzzer hands it over.
inline LoaderOutcome check_serialized(std::span<const uint8_t> bytes) {
  using namespace loader_detail;
  Program p;
  try {
    p = deserialize(bytes, FakeDevice().properties().limits());
  } catch (const Error& e) {
    require_malformed(e, "deserialize()");
    return LoaderOutcome::kRejected;
  }
  return check_valid(p);
}

}  // namespace spyre::rt::testing
