// Row gathers: out row k = table row index[k] (embedding, index_select
// along a non-stick dimension), on the DMA engines' gather (DmaGather), work
// split across cores by chunks of the index.
#pragma once

#include <cstdint>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

struct GatherShape {
  // One row dimension (the one indexed); batch dimensions are gathered
  // alike (index_select of an N-d tensor along a middle dimension).
  Matrix table;
  // int32 or int64, any rows x cols: element (r, c) picks out row
  // r * index.cols + c.
  Matrix index;
  // rows = index.rows * index.cols, cols = table.cols, table's batches.
  Matrix out;
};

struct GatherOptions {
  Target target;  // the device planned for (program_builder.h)
};

// Slots: 0 = table, 1 = index, 2 = out. An index outside [0, table rows) is
// a device error at launch.
rt::Program build_gather(const GatherShape& shape,
                         const GatherOptions& options);

}  // namespace spyre::kernels
