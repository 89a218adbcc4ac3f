// Spyre tensors (views) as the strided matrices of the kernel library
// (kernels/matrix.h): the last dim is the columns (along the sticks), the
// other dims are batch or row dims with their byte strides, from the operand
// model of ops/launch.h. Used by the matmul, reduction, norm, softmax and
// gather ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spyre/kernels/key.h"
#include "spyre/kernels/matrix.h"

namespace spyre::torch_glue::ops {

// `tensor` as a matrix over its storage: dims `batch_dims` (in order) are
// batch dims, `row_dims` (in order, outermost first) the row dims, the last
// dim the columns; a 0-d tensor is one element. Every dim but the last must
// be named once. nullopt when no kernel can address the view this way (its
// last dim does not run along whole sticks from a stick start).
std::optional<kernels::Matrix> matrix_view(
    const at::Tensor& tensor, const std::vector<int64_t>& batch_dims,
    const std::vector<int64_t>& row_dims);
// Leading `batch` dims as batch dims, the rest (but the last) as rows.
std::optional<kernels::Matrix> matrix_view(const at::Tensor& tensor,
                                           int64_t batch = 0);

// The matrix of `tensor`, materializing it first (into the default layout)
// when it cannot be addressed; `tensor` is replaced by what is bound.
kernels::Matrix matrix_operand(at::Tensor& tensor, int64_t batch = 0);

// Writes everything a program depends on about `m` (for program cache keys).
void append_key(kernels::KeyWriter& key, const kernels::Matrix& m);

// Dims 0..n-1 except `skip` (which may be -1), in order.
std::vector<int64_t> dims_except(int64_t n, std::vector<int64_t> skip);

}  // namespace spyre::torch_glue::ops
