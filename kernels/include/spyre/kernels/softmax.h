// Softmax (and log-softmax) along the last dimension of a matrix, rows split
// across cores, in fp32 with one rounding at the end. The eager op's
// schedule (kStreamed) is a loop kernel (row_kernel.h) of the graph the
// compiler sees, so eager and compiled results agree bit for bit; the other
// two schedules model published variants for the calibration benchmark.
#pragma once

#include <cstdint>

#include "spyre/kernels/loop_kernel.h"
#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class SoftmaxSchedule : uint8_t {
  // build_loop_kernel's plan: row blocks stream through the scratchpad,
  // double-buffered; row maxima and sums stay in the scratchpad.
  kStreamed,
  // The naive lowering: each reduction result (row max, row sum) is written
  // to device memory and read back before the next step, as separate kernels
  // would. Needs a third argument slot of stats_bytes().
  kStatsThroughDram,
  // The core's whole input is cloned into the scratchpad first, the output is
  // computed in place there and stored once.
  kResident,
};

struct SoftmaxOptions {
  Target target;  // the device planned for (program_builder.h)
  SoftmaxSchedule schedule = SoftmaxSchedule::kStreamed;
  bool log = false;
  // Rows whose every element is -inf give zeros, not NaN (PyTorch's
  // _safe_softmax, which attention uses); kStreamed softmax only.
  bool safe = false;
};

// Device bytes of the stats argument kStatsThroughDram needs.
uint64_t softmax_stats_bytes(const Matrix& in, const SoftmaxOptions& options);

// The kStreamed softmax as a loop kernel. Slots: 0 = input, 1 = output.
// `safe`: SoftmaxOptions::safe (not with `log`).
LoopKernel describe_softmax(const Matrix& in, const Matrix& out, bool log,
                            bool safe = false);

// Slots: 0 = input, 1 = output (same shape), 2 = stats (kStatsThroughDram).
rt::Program build_softmax(const Matrix& in, const Matrix& out,
                          const SoftmaxOptions& options);

}  // namespace spyre::kernels
