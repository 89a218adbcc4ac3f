// Matrix products C = alpha * A @ B + beta * bias over the target's cores,
// batched.
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
// as X tiles; no re-layout pass through device memory is needed. A^T tiles go
// to the matrix unit as transposed views (free for the A operand); B^T tiles
// are transposed in the scratchpad on the vector unit first, because the
// matrix unit runs a non-row-contiguous B several times slower.
//
// Epilogue: C = act(alpha * A @ B + beta * bias) is computed in fp32 on the
// accumulator in the scratchpad and rounded once into the output tile, in
// row chunks that are stored while the matrix unit works on the next tile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

// Activation applied to the output tile before the store (last epilogue
// step). Each maps to one vector-unit instruction:
enum class Activation : uint8_t {
  kNone,
  kRelu,
  kGelu,      // x * Phi(x), exact (erf) form: torch's gelu(approximate="none")
  kGeluTanh,  // torch's gelu(approximate="tanh")
  kSilu,      // x * sigmoid(x)
};
const char* activation_name(Activation act);

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
  double beta = 1;  // 0 ignores the bias entirely (torch.addmm semantics)
  // C = act(alpha * A @ B + beta * bias), one rounding to c's dtype at the end.
  Activation activation = Activation::kNone;

  uint64_t m() const { return a_transposed ? a.cols : a.rows; }
  uint64_t k() const { return a_transposed ? a.rows : a.cols; }
  uint64_t n() const { return b_transposed ? b.rows : b.cols; }
  uint64_t b_k() const { return b_transposed ? b.cols : b.rows; }
  uint64_t batch_count() const { return c.batch_count(); }
};

// How a matmul is lowered.
enum class MatmulLowering : uint8_t {
  // The cost model chooses the core grid and the tiles together (see
  // plan_matmul); reads shared by cores of a grid row / column are broadcast;
  // B^T tiles are transposed on chip; output chunks are stored while the
  // next tile computes.
  kPlanned,
  // The straightforward first lowering, kept as the baseline the planned
  // lowering is measured against (benchmarks/matmul_tiling_bench.cpp):
  // - rows of M split evenly over the cores (grid max_cores x 1; each core
  //   computes full rows of C);
  // - a fixed 64 x 64 x 64 tile (one fp16 stick wide), clipped to the block;
  // - no broadcast reads: every core reads its own copy of B;
  // - a B stored transposed goes to the matrix unit as a transposed view
  //   (no on-chip transpose);
  // - each output tile is stored whole after its epilogue.
  // Same program structure and numerics as kPlanned (double-buffered K
  // tiles, fp32 accumulation, one rounding), so results are identical.
  kNaive,
};

struct MatmulPlan {
  uint32_t grid_m = 1, grid_n = 1;    // core grid of one product
  uint64_t block_m = 0, block_n = 0;  // per-core output block (last ragged)
  uint64_t tile_m = 0, tile_n = 0, tile_k = 0;  // scratchpad sub-block
  uint32_t groups = 1;  // products computed side by side (batched)
  // Rows of an output tile finished and stored per epilogue step (0: tile_m).
  uint64_t store_rows = 0;
  bool share_reads = true;           // broadcast A / B reads (share groups)
  bool transpose_b_on_chip = false;  // B^T tiles transposed before the MMA
  double estimated_cycles = 0;       // the cost model's figure for this plan
  std::string describe() const;
};

struct MatmulOptions {
  Target target;            // the device planned for (program_builder.h)
  bool share_reads = true;  // broadcast reads across a grid row / column
  MatmulLowering lowering = MatmulLowering::kPlanned;
};

// Chooses the grid and the tiles (kPlanned: the cheapest plan under a cost
// model of the matrix unit's tile quantisation and per-instruction cost,
// per-core DMA streaming and latency, shared device-memory bandwidth with
// broadcast reads, and the vector work of transposes and epilogues; kNaive:
// the fixed plan described above).
MatmulPlan plan_matmul(const MatmulShape& shape, const MatmulOptions& options);

// The cost model's estimate of a plan, in device cycles (for comparisons).
double estimate_matmul_cycles(const MatmulShape& shape, const MatmulPlan& plan,
                              const rt::CostTable& costs);

// Builds the program. Argument slots: 0 = A, 1 = B, 2 = C, 3 = bias (when
// given). Throws KernelBuildError when the shapes disagree or the plan does
// not fit.
rt::Program build_matmul(const MatmulShape& shape, const MatmulPlan& plan,
                         const MatmulOptions& options);

}  // namespace spyre::kernels
