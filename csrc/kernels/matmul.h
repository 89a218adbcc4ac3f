// Matrix products C = alpha * A @ B + beta * bias on up to 32 cores, batched.
//
// Work division: the output is split into a gm x gn grid of core blocks
// (gm * gn <= cores); cores of one grid row read the same A tiles and cores
// of one grid column the same B tiles, so those reads are broadcast (share
// groups). Inside a core the block is walked in sub-blocks that fit the
// scratchpad, with K tiles double-buffered so DMA overlaps the matrix unit.
// A batch of products gives each product a group of cores (a smaller grid);
// groups take batches in turn.
//
// Operands stored transposed (a view A = X^T of a stick-layout X) are read
// as X tiles and handed to the matrix unit as transposed tile views, so no
// re-layout pass is needed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kernels/matrix.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct MatmulShape {
  MatmulShape() = default;
  MatmulShape(Matrix a_, Matrix b_, Matrix c_)
      : a(std::move(a_)), b(std::move(b_)), c(std::move(c_)) {}

  Matrix a, b, c;  // as stored; see the *_transposed flags
  // `a` holds A^T (K x M) and/or `b` holds B^T (N x K).
  bool a_transposed = false;
  bool b_transposed = false;
  // M x N, in c's dtype, added after the product: C = alpha * A @ B + beta *
  // bias. Rows of stride 0 broadcast one row (a linear layer's bias).
  std::optional<Matrix> bias;
  double alpha = 1;
  double beta = 1;

  uint64_t m() const { return a_transposed ? a.cols : a.rows; }
  uint64_t k() const { return a_transposed ? a.rows : a.cols; }
  uint64_t n() const { return b_transposed ? b.rows : b.cols; }
  uint64_t b_k() const { return b_transposed ? b.cols : b.rows; }
  uint64_t batch_count() const { return c.batch_count(); }
};

struct MatmulPlan {
  uint32_t grid_m = 1, grid_n = 1;    // core grid of one product
  uint64_t block_m = 0, block_n = 0;  // per-core output block (last ragged)
  uint64_t tile_m = 0, tile_n = 0, tile_k = 0;  // scratchpad sub-block
  uint32_t groups = 1;  // products computed side by side (batched)
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

// Builds the program. Argument slots: 0 = A, 1 = B, 2 = C, 3 = bias (when
// given). Throws KernelBuildError when the shapes disagree or the plan does
// not fit.
rt::Program build_matmul(const MatmulShape& shape, const MatmulPlan& plan,
                         const MatmulOptions& options);

}  // namespace spyre::kernels
