// cat (and stack, which PyTorch builds on it) on the device: each input is
// copied into its slice of the result by the device copy (ops/launch.h's
// elementwise copy, which converts dtypes and writes unaligned slices of
// sticks by read-modify-write). Shapes and type promotion as in PyTorch:
// legacy empty 1-D inputs are skipped.
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

bool skipped(const at::Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

// The result's memory format as PyTorch's cat picks it: the inputs' common
// suggested format (channels-last inputs give a channels-last result),
// contiguous as soon as one input is or two disagree. Compiled code checks
// the result's strides against this.
c10::MemoryFormat output_memory_format(const std::vector<at::Tensor>& inputs) {
  std::optional<c10::MemoryFormat> format;
  for (const at::Tensor& t : inputs) {
    const c10::MemoryFormat f = t.suggest_memory_format();
    if (f == c10::MemoryFormat::Contiguous || (format && *format != f)) {
      return c10::MemoryFormat::Contiguous;
    }
    format = f;
  }
  return format.value_or(c10::MemoryFormat::Contiguous);
}

at::Tensor cat_kernel(const at::ITensorListRef& list, int64_t dim) {
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& t : list) tensors.push_back(t);
  TORCH_CHECK(!tensors.empty(),
              "torch.cat(): expected a non-empty list of Tensors");
  const at::ScalarType dtype = at::native::result_type(list);
  const at::Tensor* like = nullptr;
  for (const at::Tensor& t : tensors) {
    if (!skipped(t)) {
      like = &t;
      break;
    }
  }
  if (like == nullptr) {
    return at::empty({0}, tensors[0].options().dtype(dtype));
  }
  TORCH_CHECK(like->dim() > 0,
              "zero-dimensional tensor cannot be concatenated");
  const int64_t d = at::maybe_wrap_dim(dim, like->dim());
  bool device_ok = has_device_dtype(dtype);
  std::vector<int64_t> sizes = like->sizes().vec();
  sizes[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    if (skipped(t)) continue;
    TORCH_CHECK(t.dim() == like->dim(),
                "Tensors must have same number of dimensions: got ",
                like->dim(), " and ", t.dim());
    for (int64_t k = 0; k < t.dim(); ++k) {
      TORCH_CHECK(k == d || t.size(k) == like->size(k),
                  "Sizes of tensors must match except in dimension ", d,
                  ". Expected size ", like->size(k), " but got size ",
                  t.size(k), " for tensor number ", i, " in the list.");
    }
    TORCH_CHECK(t.device() == like->device(),
                "Expected all tensors to be on the same device, but found ",
                like->device(), " and ", t.device());
    device_ok = device_ok && has_device_dtype(t.scalar_type());
    sizes[d] += t.size(d);
  }
  if (!device_ok) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::cat>::call(
        list, dim);
  }
  at::Tensor out = at::empty(sizes, like->options().dtype(dtype).memory_format(
                                        output_memory_format(tensors)));
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    if (skipped(t) || t.size(d) == 0) continue;
    out.narrow(d, offset, t.size(d)).copy_(t);
    offset += t.size(d);
  }
  return out;
}

at::Tensor& cat_out_kernel(const at::ITensorListRef& list, int64_t dim,
                           at::Tensor& out) {
  at::assert_no_internal_overlap(out);
  for (const at::Tensor& t : list) at::assert_no_overlap(out, t);
  at::Tensor r = cat_kernel(list, dim);
  return write_result(r, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cat", cat_kernel);
  m.impl("cat.out", cat_out_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
