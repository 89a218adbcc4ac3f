// How kernels address the tensors of eager ops (the operand model).
//
// A tensor's storage is bound whole (launch.h); a kernel addresses a view
// inside it through a StickOperand: byte offsets and strides over the
// storage's device layout. Views no kernel can address are materialized
// first: a copy in the default layout, contiguous, offset 0, done by a
// device program when the copy kernel can read the view, else through the
// host image (counted: op_stats().host_materializations).
// Padding: bytes of a stick beyond a row's last element are unspecified
// after a kernel wrote the storage; kernels never read them as data.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

#include "spyre/kernels/elementwise.h"

namespace spyre::torch_glue::ops {

// The device dtype of a torch dtype; nullopt when the device has none
// (float64, int16, ...: such ops go to the CPU fallback).
std::optional<rt::DType> maybe_device_dtype(at::ScalarType type);
bool has_device_dtype(at::ScalarType type);
rt::DType device_dtype(at::ScalarType type);  // raises when there is none

// How a kernel addresses the elements of `tensor`'s storage seen through
// (sizes, strides, offset) (elements, as PyTorch's as_strided): the last dim
// becomes the kernel's cols dim, the others its outer dims. nullopt when the
// storage's layout cannot serve that view with stick transfers (e.g. the
// cols dim steps inside a stick by more than one element); materialize()
// such views. A cols dim that steps whole sticks (a column x[:, j]) is
// served element by element (kAcrossSticks), for inputs only.
std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor,
                                                   at::IntArrayRef sizes,
                                                   at::IntArrayRef strides,
                                                   int64_t offset);
// The same for the tensor's own view.
std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor);

// True when writing the stick operand of (sizes, strides, offset) whole
// sticks would overwrite elements outside the view (the kernel's stores
// must carry write masks).
bool write_shares_sticks(const at::Tensor& tensor, at::IntArrayRef sizes,
                         const kernels::StickOperand& operand);

// `tensor` over more dims: each dim whose walk would carry from one dim of
// its storage's host image into the next (a reshape that merged them, x of
// [2, 8, 64] seen as [16, 64]) split at that boundary, so that every dim
// walks within one host dim. The same elements at the same addresses in the
// same order; the sizes of the split view (its strides into `strides`), or
// nullopt when nothing splits.
std::optional<std::vector<int64_t>> finer_sizes(const at::Tensor& tensor,
                                                std::vector<int64_t>* strides);

// `tensor`'s values in a fresh contiguous tensor with the default layout.
at::Tensor materialize(const at::Tensor& tensor);
// `tensor` itself when a kernel can address it, else materialize(tensor).
at::Tensor addressable(const at::Tensor& tensor);
// A fresh tensor of `tensor`'s shape and options in the default layout.
at::Tensor empty_like_default(const at::Tensor& tensor);

// PyTorch's checks of an out= tensor, as its CPU kernels make them: out may
// not write one element twice, nor share any element with `inputs` (whose
// result would depend on the order of the loop: the CPU computes such cases
// in place). "unsupported operation: ... Please clone() the tensor ..."
void check_out_apart(const at::Tensor& out,
                     std::initializer_list<at::Tensor> inputs);

// An out= kernel's last step: out resized as PyTorch resizes outputs (a
// warning when a non-empty out changes shape), then `result` copied in.
at::Tensor& write_result(const at::Tensor& result, at::Tensor& out);
// dst's elements <- src's (same shape) where one of them is a view no kernel
// addresses as it is: on the device through views of both over finer dims
// (a reshape's merged dims split again) when those address it, else through
// dst's host image (counted as a host materialization).
void write_unaddressable(const at::Tensor& src, const at::Tensor& dst);

// The iteration space of an elementwise launch: out's dims of size > 1 (or
// one dim of size 1), in out's memory order (outermost first), so a permuted
// output (and inputs permuted alike) still has its sticks along the cols
// dim; and each operand's strides over it.
class Iteration {
 public:
  // `unit_rows`: a size-1 rows dim goes before the cols dim, so the dim
  // that would have been the rows becomes a batch dim (an input whose rows
  // step a part of a stick, heads of a decode step, needs that).
  explicit Iteration(const at::Tensor& out, bool unit_rows = false);

  const std::vector<int64_t>& sizes() const { return shape_; }
  // `t` broadcast to out (aligned at the last dim), as element strides over
  // the iteration; a size-1 cols dim gives the output a unit stride.
  std::vector<int64_t> strides(const at::Tensor& t, int64_t out_rank,
                               bool is_output) const;

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> out_dims_;  // which dims of out they are
  // out's innermost dim is not contiguous (a column of a matrix): a size-1
  // cols dim is added, so that dim becomes rows of one-element sticks.
  bool synthetic_cols_ = false;
  bool unit_rows_ = false;
};

}  // namespace spyre::torch_glue::ops
