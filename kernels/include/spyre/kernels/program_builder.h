// Helpers to emit device programs: argument slots, per-core instruction
// streams with a scratchpad bump allocator, ring channels. Every kernel
// builder (eager ops, benchmarks, the compiler's code generator) goes through
// these, so programs are assembled one way.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "spyre/runtime/chip.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

// A kernel cannot be built as asked (e.g. it does not fit the scratchpad).
// A compile-time error, never a wrong program.
class KernelBuildError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The device a program is planned for: its chip facts, as its
// DeviceProperties::chip reports them (the only source of core counts,
// scratchpad sizes and costs a builder reads), and an optional cap on the
// cores a program may use.
struct Target {
  rt::ChipFigures chip;
  uint32_t max_cores = 0;  // 0: every core of the chip

  // The cores a program may use. Throws KernelBuildError when no chip was
  // given (a builder must be told which device it plans for).
  uint32_t cores() const;
  // Scratchpad bytes per core a plan may use (the chip's, less its reserve).
  uint32_t scratchpad_budget() const;
  // What the device checks programs for this chip against.
  rt::ProgramLimits limits() const {
    return {chip.num_cores, chip.scratchpad_bytes,
            chip.costs.max_broadcast_cores};
  }
  const rt::CostTable& costs() const { return chip.costs; }
};

class CoreBuilder {
 public:
  CoreBuilder(uint32_t core, uint32_t scratchpad_limit);

  uint32_t core() const { return program_.core; }
  // Reserves `bytes` (rounded up to sticks) of scratchpad; returns its offset.
  uint32_t reserve(uint32_t bytes, const char* what);
  uint32_t used() const { return next_; }

  template <typename Inst>
  void emit(Inst inst) {
    program_.instructions.emplace_back(std::move(inst));
  }
  // One DmaLoad / DmaStore per transfer (see Matrix::tiles).
  void load(const std::vector<rt::StickTransfer>& transfers,
            uint32_t share_group = 0);
  void store(const std::vector<rt::StickTransfer>& transfers);

  rt::CoreProgram finish() &&;

 private:
  rt::CoreProgram program_;
  uint32_t limit_;
  uint32_t next_ = 0;
};

class ProgramBuilder {
 public:
  // A program of at most `num_cores` cores, each using at most
  // `scratchpad_limit` bytes of its scratchpad.
  ProgramBuilder(std::string name, uint32_t num_cores,
                 uint32_t scratchpad_limit);

  uint32_t add_arg(std::string name, rt::DType dtype, uint64_t bytes,
                   bool is_output, std::vector<int64_t> device_size = {});
  CoreBuilder& core(uint32_t id);
  uint32_t new_channel() { return next_channel_++; }
  uint32_t new_share_group() { return next_share_group_++; }
  uint32_t num_cores() const { return num_cores_; }

  rt::Program finish() &&;

 private:
  rt::Program program_;
  uint32_t num_cores_;
  uint32_t scratchpad_bytes_;
  std::map<uint32_t, CoreBuilder> cores_;
  uint32_t next_channel_ = 0;
  uint32_t next_share_group_ = 1;
};

// Splits [0, n) into `parts` nearly equal chunks; chunk i is
// [begin(i), begin(i + 1)). Chunks are multiples of `quantum` except the last.
struct Split {
  uint64_t n = 0;
  uint32_t parts = 1;
  uint64_t quantum = 1;
  uint64_t chunk() const;
  uint64_t begin(uint32_t i) const;
  uint64_t size(uint32_t i) const { return begin(i + 1) - begin(i); }
  uint32_t used_parts() const;  // parts that get a nonempty chunk
};

inline uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Vector instructions over rows x cols: unary, binary, and binary with an
// immediate second operand. Shared by the kernel builders.
inline rt::Vector vec(rt::VecOp op, rt::Tile dst, rt::Tile a, uint32_t rows,
                      uint32_t cols) {
  rt::Vector v;
  v.op = op;
  v.dst = dst;
  v.src0 = a;
  v.rows = rows;
  v.cols = cols;
  return v;
}

inline rt::Vector vec2(rt::VecOp op, rt::Tile dst, rt::Tile a, rt::Tile b,
                       uint32_t rows, uint32_t cols) {
  rt::Vector v = vec(op, dst, a, rows, cols);
  v.src1 = b;
  return v;
}

inline rt::Vector vec_imm(rt::VecOp op, rt::Tile dst, rt::Tile a, double imm,
                          uint32_t rows, uint32_t cols) {
  rt::Vector v = vec(op, dst, a, rows, cols);
  v.src1_is_imm = true;
  v.imm = imm;
  return v;
}

}  // namespace spyre::kernels
