// Row gathers: out row k = table row index[k] (embedding, index_select
// along a non-stick dimension), on the DMA engines' gather (DmaGather); and
// row scatters, the reverse: table row index[k] = source row k (index_copy,
// a KV cache's update), on DmaScatter. Work split across cores by chunks of
// the index.
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

struct ScatterShape {
  // The rows written: one row dimension (the one indexed), batches alike.
  Matrix table;
  // int32 or int64, any rows x cols: element (r, c) names the table row
  // that source row r * index.cols + c goes to.
  Matrix index;
  // rows = index.rows * index.cols, cols = table.cols, table's batches.
  Matrix source;
};

// Slots: 0 = table (written in place; rows no index names keep their
// values), 1 = index, 2 = source. An index outside [0, table rows) is a
// device error at launch, with the table unchanged. Indices that repeat
// within one core's chunk keep the later row; across cores, one of them.
rt::Program build_scatter(const ScatterShape& shape,
                          const GatherOptions& options);

}  // namespace spyre::kernels
