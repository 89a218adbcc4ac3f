// dst <- src where src's elements run along another dim than dst's sticks.
#pragma once

#include <ATen/core/Tensor.h>

namespace spyre::torch_glue::ops {

// Copies src into dst (same sizes and dtype, dst contiguous in its default
// layout) with one re-layout program when src's adjacent elements lie along
// a dim other than the last. Returns false, having done nothing, when it does
// not apply or the matrices do not fit the scratchpads.
bool restickify_copy(const at::Tensor& src, const at::Tensor& dst);

// Copies src into dst (same sizes and dtype, dst the whole of a storage in
// its default layout) with one pack_rows program (kernels/pack_rows.h) when
// src's rows are each padded to their own sticks and dst holds several of
// them per row (an [R, C] tensor with C short of a stick read as [R * C]).
// Returns false, having done nothing, when it does not apply.
bool pack_rows_copy(const at::Tensor& src, const at::Tensor& dst);

}  // namespace spyre::torch_glue::ops
