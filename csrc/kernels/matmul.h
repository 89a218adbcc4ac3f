// Matrix products C = A @ B on up to 32 cores.
//
// Work division: the output is split into a gm x gn grid of core blocks
// (gm * gn <= cores); cores of one grid row read the same A tiles and cores
// of one grid column the same B tiles, so those reads are broadcast (share
// groups). Inside a core the block is walked in sub-blocks that fit the
// scratchpad, with K tiles double-buffered so DMA overlaps the matrix unit.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/matrix.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct MatmulShape {
  Matrix a, b, c;  // a: M x K, b: K x N, c: M x N
};

struct MatmulPlan {
  uint32_t grid_m = 1, grid_n = 1;    // core grid
  uint64_t block_m = 0, block_n = 0;  // per-core output block (last ragged)
  uint64_t tile_m = 0, tile_n = 0, tile_k = 0;  // scratchpad sub-block
  std::string describe() const;
};

struct MatmulOptions {
  uint32_t max_cores = 32;
  uint32_t scratchpad_bytes = 2u << 20;
  uint32_t scratchpad_reserve = 64u << 10;  // kept by the device software
  bool share_reads = true;  // broadcast reads across a grid row / column
};

// Chooses the grid and the tiles with a simple cost model (matrix-unit time
// of the largest block against device-memory traffic).
MatmulPlan plan_matmul(const MatmulShape& shape, const MatmulOptions& options);

// Builds the program. Argument slots: 0 = A, 1 = B, 2 = C. Throws
// KernelBuildError when the shapes disagree or the plan does not fit.
rt::Program build_matmul(const MatmulShape& shape, const MatmulPlan& plan,
                         const MatmulOptions& options);

}  // namespace spyre::kernels
