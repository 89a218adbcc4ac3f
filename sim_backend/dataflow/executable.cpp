#include "dataflow/executable.h"

#include <algorithm>
#include <map>
#include <optional>

#include "spyre/runtime/error.h"

namespace spyre::sim {
namespace {

Engine engine_of(const rt::Instruction& inst) {
  if (std::holds_alternative<rt::DmaLoad>(inst) ||
      std::holds_alternative<rt::DmaStore>(inst) ||
      rt::indexed_rows_of(inst) != nullptr) {
    return Engine::kDma;
  }
  if (std::holds_alternative<rt::RingSend>(inst) ||
      std::holds_alternative<rt::RingRecv>(inst)) {
    return Engine::kRing;
  }
  if (std::holds_alternative<rt::MatMul>(inst)) return Engine::kMatrix;
  return Engine::kVector;
}

uint64_t payload_bytes(const rt::Instruction& inst) {
  if (auto* l = std::get_if<rt::DmaLoad>(&inst)) {
    return uint64_t{l->xfer.run_bytes} * l->xfer.count1 * l->xfer.count2;
  }
  if (auto* s = std::get_if<rt::DmaStore>(&inst)) {
    return uint64_t{s->xfer.run_bytes} * s->xfer.count1 * s->xfer.count2;
  }
  if (const rt::IndexedRows* rows = rt::indexed_rows_of(inst)) {
    return uint64_t{rows->row_bytes} * rows->count;
  }
  if (auto* r = std::get_if<rt::RingSend>(&inst)) return r->bytes;
  return 0;
}

// One access still visible to later instructions of a core: a later access
// that overlaps it (and is not read-after-read) depends on its instruction.
struct LiveAccess {
  int64_t lo = 0;
  int64_t hi = 0;
  bool write = false;
  uint32_t instruction = 0;
};

// Tracks the live accesses of one address space (a core's scratchpad, or
// one slot's device memory as seen by one core). A write that covers an
// older access supersedes it: whatever would depend on the old access
// depends on the new one, which already depends on the old. This keeps the
// list near the number of live buffers, so decoding stays linear in
// practice instead of comparing every pair of instructions.
class HazardTracker {
 public:
  void add(int64_t lo, int64_t hi, bool write, uint32_t instruction,
           std::vector<uint32_t>& deps) {
    if (hi <= lo) return;
    for (const LiveAccess& old : live_) {
      // An instruction that reads and writes one range (an accumulating
      // matmul's C) must not depend on itself.
      if (old.instruction == instruction) continue;
      bool overlaps = old.lo < hi && lo < old.hi;
      if (overlaps && (write || old.write)) deps.push_back(old.instruction);
    }
    if (write) {
      std::erase_if(live_, [&](const LiveAccess& old) {
        return lo <= old.lo && old.hi <= hi;
      });
    }
    live_.push_back({lo, hi, write, instruction});
  }

 private:
  std::vector<LiveAccess> live_;
};

struct DeviceAccess {
  uint32_t slot = 0;
  int64_t lo = 0, hi = 0;
  bool write = false;
};

}  // namespace

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::kDma:
      return "dma";
    case Engine::kRing:
      return "ring";
    case Engine::kMatrix:
      return "matrix";
    case Engine::kVector:
      return "vector";
  }
  return "?";
}

size_t SimExecutable::channel_index(uint32_t channel) const {
  auto it = std::lower_bound(channels.begin(), channels.end(), channel);
  return static_cast<size_t>(it - channels.begin());
}

SimExecutable::SimExecutable(const rt::Program& program,
                             const rt::PatchPlan& plan)
    : name(program.name), relocations(plan.relocations) {
  cores.resize(program.cores.size());
  std::map<uint32_t, ChannelEnds> ends;
  for (size_t ci = 0; ci < program.cores.size(); ++ci) {
    const rt::CoreProgram& core = program.cores[ci];
    DecodedCore& decoded = cores[ci];
    decoded.core = core.core;
    decoded.insts.resize(core.instructions.size());
    for (size_t i = 0; i < core.instructions.size(); ++i) {
      DecodedInst& d = decoded.insts[i];
      d.inst = core.instructions[i];
      d.engine = engine_of(d.inst);
      d.bytes_moved = payload_bytes(d.inst);
      InstRef ref{static_cast<uint32_t>(ci), static_cast<uint32_t>(i)};
      if (auto* s = std::get_if<rt::RingSend>(&d.inst))
        ends[s->channel].send = ref;
      if (auto* r = std::get_if<rt::RingRecv>(&d.inst))
        ends[r->channel].recv = ref;
      if (rt::indexed_rows_of(d.inst) != nullptr) has_indexed_rows = true;
    }
  }
  for (auto& [channel, e] : ends) {
    channels.push_back(channel);
    channel_ends.push_back(e);
    const auto* recv = std::get_if<rt::RingRecv>(&at(e.recv).inst);
    if (recv != nullptr && recv->transpose.enabled()) {
      at(e.send).through_transpose_pipeline = true;
    }
  }

  // Device accesses per instruction, from the plan (program order).
  std::vector<std::vector<std::vector<DeviceAccess>>> accesses(cores.size());
  for (size_t ci = 0; ci < cores.size(); ++ci) {
    accesses[ci].resize(cores[ci].insts.size());
  }
  for (size_t r = 0; r < relocations.size(); ++r) {
    const rt::Relocation& rel = relocations[r];
    rt::check(rel.core_index < cores.size() &&
                  rel.instruction < cores[rel.core_index].insts.size(),
              rt::ErrorCode::kMalformedProgram, "sim: relocation ", r,
              " names core index ", rel.core_index, " instruction ",
              rel.instruction, " which the program does not have");
    DecodedInst& d = cores[rel.core_index].insts[rel.instruction];
    if (d.relocation < 0) d.relocation = static_cast<int64_t>(r);
    accesses[rel.core_index][rel.instruction].push_back(
        {rel.slot, rel.lo, rel.hi,
         std::holds_alternative<rt::DmaStore>(d.inst) ||
             std::holds_alternative<rt::DmaScatter>(d.inst)});
  }

  // Dependencies within a core: every earlier instruction it conflicts with
  // (RAW/WAR/WAW on the scratchpad, or on device ranges of the same slot).
  for (size_t ci = 0; ci < cores.size(); ++ci) {
    auto& insts = cores[ci].insts;
    HazardTracker scratchpad;
    std::map<uint32_t, HazardTracker> slots;
    // Ring channels are the only ordering of device memory between cores
    // (program.h; a zero-byte send is a token): a send waits for the core's
    // earlier device accesses, and a device access waits for the core's
    // earlier receives. Without this a token, which touches no scratchpad,
    // let the other core's load start before this core's store had ended.
    // The DMA and ring engines each run in program order, so the latest
    // earlier instruction of each suffices.
    std::optional<uint32_t> last_dma, last_recv;
    for (size_t i = 0; i < insts.size(); ++i) {
      uint32_t index = static_cast<uint32_t>(i);
      std::vector<uint32_t> deps;
      for (const rt::SpadRange& r : rt::scratchpad_ranges(insts[i].inst)) {
        scratchpad.add(r.lo, r.hi, r.write, index, deps);
      }
      for (const DeviceAccess& a : accesses[ci][i]) {
        slots[a.slot].add(a.lo, a.hi, a.write, index, deps);
      }
      const bool is_dma = insts[i].engine == Engine::kDma;
      if (std::holds_alternative<rt::RingSend>(insts[i].inst) && last_dma) {
        deps.push_back(*last_dma);
      }
      if (is_dma && last_recv) deps.push_back(*last_recv);
      if (is_dma) last_dma = index;
      if (std::holds_alternative<rt::RingRecv>(insts[i].inst)) {
        last_recv = index;
      }
      std::sort(deps.begin(), deps.end());
      deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
      for (uint32_t j : deps) {
        insts[i].deps.push_back({static_cast<uint32_t>(ci), j});
      }
    }
  }
  for (const ChannelEnds& e : channel_ends) at(e.recv).deps.push_back(e.send);
}

}  // namespace spyre::sim
