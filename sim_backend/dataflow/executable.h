// The emulator's prepared program: per core, the decoded instructions with
// the relocation each device access reads its address from, the dependency
// graph the timing model schedules, and the static schedule itself (computed
// once at prepare, since modelled time does not depend on data).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spyre/runtime/device.h"
#include "spyre/runtime/patcher.h"
#include "spyre/runtime/program.h"

namespace spyre::sim {

// The per-core units an instruction occupies; each runs in program order.
enum class Engine : uint8_t { kDma, kRing, kMatrix, kVector };
inline constexpr int kNumEngines = 4;
const char* engine_name(Engine engine);

struct InstRef {
  uint32_t core_index = 0;  // into Program::cores
  uint32_t instruction = 0;
  bool operator==(const InstRef&) const = default;
};

struct DecodedInst {
  rt::Instruction inst;
  Engine engine = Engine::kVector;
  int64_t relocation = -1;  // first relocation of this instruction, or -1
  std::vector<InstRef> deps;
  uint64_t bytes_moved = 0;  // DMA or ring payload
  // A send whose receive lands transposed: it runs through the on-chip
  // transpose pipeline, at that pipeline's rate (timing.cpp).
  bool through_transpose_pipeline = false;
  // The static schedule, in cycles from launch start.
  uint64_t start = 0, end = 0;
};

struct DecodedCore {
  uint32_t core = 0;  // physical core id
  std::vector<DecodedInst> insts;
};

struct ChannelEnds {
  InstRef send, recv;
};

class SimExecutable : public rt::Executable {
 public:
  SimExecutable(const rt::Program& program, const rt::PatchPlan& plan);

  std::string name;
  std::vector<DecodedCore> cores;
  std::vector<rt::Relocation> relocations;
  std::vector<uint32_t> channels;         // sorted channel ids
  std::vector<ChannelEnds> channel_ends;  // parallel to channels
  // A gather or scatter: an index found out of range while the launch runs
  // abandons it, so its device writes must be undoable.
  bool has_indexed_rows = false;
  rt::LaunchStats stats;
  // What the host emulates, in modelled cycles: matrix- and vector-unit busy
  // cycles plus sticks moved (DMA and ring). Latency is left out: waiting
  // for device memory costs the emulator nothing.
  uint64_t host_work = 0;
  // Set when the ring channels deadlock (a receive whose send can never
  // run); prepare() rejects the program with it.
  std::optional<std::string> deadlock;

  // Index of `channel` in `channels`.
  size_t channel_index(uint32_t channel) const;
  const DecodedInst& at(InstRef ref) const {
    return cores[ref.core_index].insts[ref.instruction];
  }
  DecodedInst& at(InstRef ref) {
    return cores[ref.core_index].insts[ref.instruction];
  }
};

}  // namespace spyre::sim
