// Re-layout (restickify) of a 2-D tensor: change which dimension is the
// stick. X [rows, cols] stored with cols along sticks becomes the same data
// with rows along sticks, i.e. X^T [cols, rows] in a stick layout.
//
// On chip the tensor is spread over the cores. Before: core i holds row
// block i of X (rows [r0_i, r0_i + br_i), every column) stick-major: stick
// s of its rows is br_i x 128 contiguous bytes. After: core j holds row
// block j of X^T (columns [c0_j, c0_j + bc_j) of X), row-major, each row
// padded to whole sticks. Every core needs a piece from every other core.
//
// Two paths move the pieces:
// - kRing: core to core. Core i sends each stick of piece (i, j) to core j
//   over the ring (contiguous, no copy). Core j transposes them one of two
//   ways (RingTranspose): the transpose pipeline lands each piece transposed
//   straight into its dst block as it arrives (a RingRecv with a
//   StickTranspose); or core j gathers them stick-major and transposes each
//   group of received rows on its vector unit while later pieces are still
//   arriving.
// - kDeviceMemory: each core stores its block to a device-memory scratch
//   tensor, all cores synchronise (ring tokens), each loads its columns back
//   and transposes them: the round trip through DRAM.
// Both leave identical bytes in the destination blocks.
//
// build_restickify, whose X comes from device memory, may skip the exchange
// (kColumnLoads): each core loads its own column block of X straight from
// device memory, one run per row and stick, and transposes it on its vector
// unit. It takes that way when X has too few rows to spread its row blocks
// over the cores that hold column blocks (one core would load all of X) and
// the options leave the way of transposing to it (RingTranspose::kFastest).
#pragma once

#include <cstdint>
#include <vector>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class RelayoutPath : uint8_t {
  kRing,
  kDeviceMemory,
  // No re-layout at all: load and store only, a timing baseline (the
  // output then does not hold X^T).
  kNone,
  // build_restickify only: no exchange, each core loads its columns.
  kColumnLoads,
};
const char* relayout_path_name(RelayoutPath path);

// How the ring path transposes what it receives. kFastest takes whichever
// the target's costs estimate faster for the shape: the pipeline's fixed
// cost per transfer loses to plain sends only for pieces of few rows.
enum class RingTranspose : uint8_t { kFastest, kPipeline, kVectorUnit };
const char* ring_transpose_name(RingTranspose how);

// Where the blocks live, per core (cores [0, cores)). Built by
// plan_relayout; a program that already holds X on chip in this placement
// calls emit_relayout directly.
struct RelayoutPlacement {
  uint64_t rows = 0, cols = 0;  // X
  rt::DType dtype = rt::DType::kFloat16;
  uint32_t cores = 0;
  RelayoutPath path = RelayoutPath::kRing;
  // kRing only: pieces land through the transpose pipeline (never
  // kFastest here: plan_relayout has decided).
  RingTranspose ring_transpose = RingTranspose::kPipeline;
  Split row_blocks, col_blocks;  // br_i, bc_j: stick multiples, last ragged
  uint32_t src = 0;  // stick-major X row block: sticks(cols) x br x 128
  uint32_t dst = 0;  // row-major X^T row block: bc x padded(rows)
  // stick-major X column block, sticks(bc) x rows, where pieces wait for the
  // vector unit (0 bytes when the transpose pipeline lands them)
  uint32_t staging = 0;
  uint32_t dst_pitch = 0;
  // The target's costs: the ring path orders each core's ring instructions
  // by when their pieces arrive.
  rt::CostTable costs;
  uint64_t src_bytes() const;
  uint64_t dst_bytes() const;
  uint64_t staging_bytes() const;
};

struct RelayoutOptions {
  Target target;  // the device planned for (program_builder.h)
  RelayoutPath path = RelayoutPath::kRing;
  RingTranspose ring_transpose = RingTranspose::kFastest;
  // All cores finish loading X before any starts the re-layout (ring
  // tokens), so the re-layout can be timed on its own: the time of a
  // program minus that of the kNone program with the same barrier.
  bool barrier_after_load = false;
};

// Reserves the placement's buffers on cores [0, cores) of `builder`, at
// the same offsets on every core. Throws KernelBuildError when they do not
// fit.
RelayoutPlacement plan_relayout(ProgramBuilder& builder, uint64_t rows,
                                uint64_t cols, rt::DType dtype,
                                const RelayoutOptions& options);

// Emits the re-layout itself, by the placement's path: src blocks -> dst
// blocks on every core. kDeviceMemory uses argument slot `scratch_slot` of at
// least relayout_scratch_bytes() bytes.
void emit_relayout(ProgramBuilder& builder, const RelayoutPlacement& place,
                   uint32_t scratch_slot);
uint64_t relayout_scratch_bytes(uint64_t rows, uint64_t cols, rt::DType dtype);

// Every core waits until every other core has reached this point (a
// dissemination barrier of ring tokens, log2(cores) rounds). Orders device
// memory between cores too (program.h).
void emit_barrier(ProgramBuilder& builder, uint32_t cores);

// A whole program: load X from `in` into the placement, re-layout, store
// the X^T blocks to `out`. `in` is rows x cols; `out` is cols x rows; any
// stick layouts (Matrix), same dtype; batch dims (the same sizes in both)
// are re-laid out one after another in the one program.
// Slots: 0 = in, 1 = out (output), 2 = scratch (kDeviceMemory only).
rt::Program build_restickify(const Matrix& in, const Matrix& out,
                             const RelayoutOptions& options);

}  // namespace spyre::kernels
