// A fused MLP in one program: y = act(x @ W_up + b_up) @ W_down + b_down.
//
// Rows of x are split over the cores. Each core keeps a pass of its rows
// (x rows and the intermediate h = act(x @ W_up + b_up) for them) resident
// in its scratchpad: h never goes to device memory. Weight tiles stream
// through double buffers and are broadcast to the cores of a group of 8
// (share groups), so the weights are read once per group and pass. The
// intermediate is rounded to x's dtype, exactly as an unfused pair of
// matmul programs would store it, so fused and unfused results agree.
#pragma once

#include <cstdint>
#include <optional>

#include "spyre/kernels/matmul.h"
#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct MlpShape {
  Matrix x;       // M x D (no batch dims; flatten batches into rows)
  Matrix w_up;    // D x H, or H x D (nn.Linear's layout) when transposed
  Matrix w_down;  // H x E, or E x H when transposed
  Matrix y;       // M x E, x's dtype
  bool w_up_transposed = false;
  bool w_down_transposed = false;
  // 1 x H and 1 x E rows in x's dtype, added before the activation (up) and
  // to the output (down).
  std::optional<Matrix> b_up, b_down;
  Activation activation = Activation::kGelu;

  uint64_t m() const { return x.rows; }
  uint64_t d() const { return x.cols; }
  uint64_t h() const { return w_up_transposed ? w_up.rows : w_up.cols; }
  uint64_t e() const { return y.cols; }
};

struct MlpOptions {
  Target target;  // the device planned for (program_builder.h)
};

struct MlpPlan {
  uint32_t cores = 0;    // cores with rows
  uint64_t block_m = 0;  // rows per core (last ragged)
  uint64_t pass_m = 0;   // rows resident per pass
  uint64_t tile_n = 0;   // output columns per matmul instruction
  uint64_t tile_k = 0;   // K per matmul instruction
  std::string describe() const;
};

// Throws KernelBuildError when the shapes disagree or not even 16 rows of x
// and of the intermediate fit a scratchpad (use two matmuls then).
MlpPlan plan_mlp(const MlpShape& shape, const MlpOptions& options);

// Slots: 0 = x, 1 = w_up, 2 = w_down, 3 = y (output), then b_up and b_down
// when given (4 = b_up if present, then b_down).
rt::Program build_mlp(const MlpShape& shape, const MlpPlan& plan,
                      const MlpOptions& options);

// The same MLP as two matmul programs with the intermediate h (M x H,
// stick columns, x's dtype) in device memory: the unfused baseline.
// up: slots x, w_up, h, b_up; down: slots h, w_down, y, b_down.
struct UnfusedMlp {
  MatmulShape up, down;
  Matrix h;
};
UnfusedMlp unfused_mlp(const MlpShape& shape);

}  // namespace spyre::kernels
