// Softmax (and log-softmax) along the last dimension of a matrix, rows split
// across cores. Computed as PyTorch's CPU kernel does for 16-bit inputs: in
// fp32, with one rounding at the end.
#pragma once

#include <cstdint>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class SoftmaxSchedule : uint8_t {
  // Row tiles stream through the scratchpad, double-buffered; row maxima
  // and sums stay in the scratchpad.
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
};

// Device bytes of the stats argument kStatsThroughDram needs.
uint64_t softmax_stats_bytes(const Matrix& in, const SoftmaxOptions& options);

// Slots: 0 = input, 1 = output (same shape), 2 = stats (kStatsThroughDram).
rt::Program build_softmax(const Matrix& in, const Matrix& out,
                          const SoftmaxOptions& options);

}  // namespace spyre::kernels
