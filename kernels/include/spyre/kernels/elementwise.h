// Elementwise kernels over strided operands in device memory.
//
// The iteration space is `shape` = [outer..., cols] (at least one dim; the
// last is the "cols" dim, which runs along the sticks of every operand that
// is not broadcast along it). Each operand is a StickOperand: where element
// (i0, ..., cols) of the iteration lies in its slot. A kernel is a short list
// of vector steps over scratchpad tiles (inputs, fp32 temporaries, output),
// so one launch does e.g. `a + alpha * b` with a single rounding.
// The kernel is built as a loop kernel (loop_kernel.h), the emitter of every
// pointwise program: work is split across cores in blocks of whole output
// sticks, so no two cores ever write the same stick.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spyre/kernels/key.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

// An operand's placement over the iteration space [outer..., cols].
struct StickOperand {
  rt::DType dtype = rt::DType::kFloat16;
  // Byte offset in the slot of the stick holding element (0, ..., 0), and
  // that element's position inside the stick.
  uint64_t offset = 0;
  uint32_t first = 0;
  // Bytes per step of each outer dim (shape.size() - 1 entries); multiples
  // of 128; 0 broadcasts.
  std::vector<int64_t> strides;
  // How the cols dim walks the operand:
  //   kSticks:     element c is at stick (first + c) / E, `stick_stride`
  //                bytes apart, position (first + c) % E;
  //   kBroadcast:  every c reads the same element (cols stride 0);
  //   kRowsAlongSticks: cols broadcast, and the rows dim (the one before
  //                cols, whose stride is then 0) walks the sticks: row r is
  //                at stick (first + r) / E, position (first + r) % E (a
  //                [rows, 1] tensor against [rows, cols]);
  //   kAcrossSticks: element c is at position `first` of its own stick,
  //                `stick_stride` bytes after element c - 1's (a column
  //                x[:, j] of a matrix; inputs only).
  enum class Cols : uint8_t {
    kSticks,
    kBroadcast,
    kRowsAlongSticks,
    kAcrossSticks
  } cols = Cols::kSticks;
  int64_t stick_stride = rt::kStickBytes;
  // Elements along the sticks per step of each outer dim before the rows
  // dim whose step is a part of a stick (heads of half a stick split off a
  // hidden dim); empty: none. Inputs with kSticks columns only: a tile then
  // starts at another position of its first stick for each such step.
  std::vector<int64_t> lane_steps;

  uint32_t elements_per_stick() const { return rt::elements_per_stick(dtype); }
  // Writes what identifies the placement (for program cache keys).
  void append_key(KeyWriter& key) const;
};

// One vector step. Values are numbered: inputs 0..n_inputs-1, then each step
// makes the next value. The last step's value is the output.
struct ElementwiseStep {
  // kVector: one rt::Vector of `op`. The others make values from the
  // iteration itself (never the last step):
  //   kColIndex: imm + col * imm2 along the cols dim (broadcast over rows);
  //   kRowIndex: imm + row * imm2 along the dim before cols;
  // and kRandom fills with RandFill draws: element e of the iteration (flat,
  // row-major over the iteration space) draws counter `offset + e`, so the
  // numbers do not depend on the tiling or the core split. The named kinds
  // (kExpm1, kLog1p, kAcos, kErfinv, kSoftplus with beta imm and threshold
  // imm2, kCeil, kTrunc, kRound, kFrac) are the loop kernel's unary ops of
  // those names applied to src[0] (expm1, log1p and ceil emitted as such,
  // the others chains of formulas.h): one formula for eager and compiled
  // code.
  enum class Kind : uint8_t {
    kVector,
    kColIndex,
    kRowIndex,
    kRandom,
    kExpm1,
    kLog1p,
    kAcos,
    kErfinv,
    kSoftplus,
    kCeil,
    kTrunc,
    kRound,
    kFrac
  };
  Kind kind = Kind::kVector;
  rt::RandDist dist = rt::RandDist::kUniform;  // kRandom: imm, imm2 = a, b
  uint64_t seed = 0, offset = 0;               // kRandom
  rt::VecOp op = rt::VecOp::kCopy;
  rt::DType dtype = rt::DType::kFloat32;  // of the value made (last: ignored)
  int src[3] = {-1, -1, -1};              // value numbers, by arity
  bool src1_is_imm = false;
  double imm = 0;
  double imm2 = 0;

  // Writes every field (for program cache keys).
  void append_key(KeyWriter& key) const;
};

// Steps by arity; `dtype` is that of the value made.
ElementwiseStep copy_step(int src = 0);
ElementwiseStep unary_step(rt::VecOp op, int src, rt::DType dtype);
ElementwiseStep binary_step(rt::VecOp op, int src0, int src1, rt::DType dtype);
ElementwiseStep scalar_step(rt::VecOp op, int src0, double imm,
                            rt::DType dtype);
ElementwiseStep select_step(int cond, int if_true, int if_false,
                            rt::DType dtype);
ElementwiseStep fill_step(double value, rt::DType dtype);
ElementwiseStep index_step(ElementwiseStep::Kind kind, double start,
                           double step, rt::DType dtype);
// A named kind (above) of value `src`; `imm`, `imm2`: its parameters.
ElementwiseStep named_step(ElementwiseStep::Kind kind, int src, rt::DType dtype,
                           double imm = 0, double imm2 = 0);
ElementwiseStep random_step(rt::RandDist dist, double a, double b,
                            uint64_t seed, uint64_t offset, rt::DType dtype);

struct ElementwiseKernel {
  std::string name = "elementwise";
  std::vector<int64_t> shape;  // iteration space; every size > 0
  std::vector<StickOperand> inputs;
  StickOperand output;
  // The output's sticks hold data outside the iteration (a view into a
  // larger row): its stores are masked to the iteration's bytes, so those
  // bytes survive.
  bool output_shares_sticks = false;
  std::vector<ElementwiseStep> steps;
  Target target;  // the device planned for (program_builder.h)

  // Writes everything the built program depends on (for program cache
  // keys), tagged as an elementwise kernel.
  void append_key(KeyWriter& key) const;
};

// Slots: inputs 0..n-1, output n. Throws KernelBuildError when the kernel
// cannot be built (e.g. one output stick of every operand does not fit the
// scratchpad).
rt::Program build_elementwise(const ElementwiseKernel& kernel);

}  // namespace spyre::kernels
