// Row scatters shared by the indexing ops (index.cpp implements them).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace spyre::torch_glue::ops {

// table's slices at `index` along `dim` = source's slices k (index_copy_ in
// place, a KV cache's update), as one scatter program that moves only those
// slices. False, with nothing written, when the device cannot: `dim` is the
// last (stick) dim, the dtypes differ, or `table` cannot be addressed in
// place; the caller then takes another way. An index outside the dim is a
// device error with `table` unchanged.
bool scatter_rows(const at::Tensor& table, int64_t dim, at::Tensor index,
                  at::Tensor source);

}  // namespace spyre::torch_glue::ops
