// Row normalisations along the stick dimension: layer norm
// ((x - mean) * rstd * weight + bias) and RMS norm (x * rstd * weight), rows
// split across cores. Computed as PyTorch's CPU kernels do for 16-bit
// inputs: in fp32, with one rounding of the output.
#pragma once

#include <cstdint>
#include <optional>

#include "spyre/kernels/loop_kernel.h"
#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct NormOptions {
  Target target;     // the device planned for (program_builder.h)
  bool rms = false;  // RMS norm: no mean subtracted, no bias
  double eps = 1e-5;
};

struct NormShape {
  Matrix in, out;                // the same rows x cols
  std::optional<Matrix> weight;  // 1 x cols
  std::optional<Matrix> bias;    // 1 x cols (layer norm only)
  // Per-row statistics, laid out as a reduction's result (see reduce.h:
  // rows = in.rows / inner, cols = inner, inner the size of in's innermost
  // row dimension). Layer norm writes mean and rstd, RMS norm rstd only.
  std::optional<Matrix> mean, rstd;
};

// The norm as a loop kernel (row_kernel.h): built by the compiler's builder.
// Slots: 0 = in, 1 = out, then weight, bias, mean, rstd in that order, each
// only when given.
LoopKernel describe_norm(const NormShape& shape, const NormOptions& options);
rt::Program build_norm(const NormShape& shape, const NormOptions& options);

}  // namespace spyre::kernels
