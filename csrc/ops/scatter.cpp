// scatter (a scalar or a source tensor written at the places an index
// names along a dim; mixture-of-experts routers build their group masks
// with it) written from other device ops, so it adds no program kind of
// its own: each place along the dim is compared with every index entry of
// its line, a place some entry names takes the value (the source element of
// the last such entry, as the CPU's loop leaves it), and the others keep
// self's. It reads and writes the whole region the index covers; the
// comparison is [..., places, entries] per line. The reduce= forms and
// indices outside the dim (PyTorch's error) take the counted CPU fallback.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/any.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// Comparisons of one scatter ([region elements x entries along the dim])
// beyond this many elements take the counted CPU fallback.
constexpr int64_t kMaxCompares = int64_t{1} << 24;

void check_scatter(const at::Tensor& self, int64_t d, const at::Tensor& index,
                   const at::Tensor* src) {
  TORCH_CHECK(index.scalar_type() == at::kLong,
              "scatter(): Expected dtype int64 for index");
  TORCH_CHECK(index.dim() == self.dim() || index.numel() == 0,
              "Index tensor must have the same number of dimensions as self "
              "tensor");
  if (src != nullptr) {
    TORCH_CHECK(src->scalar_type() == self.scalar_type(),
                "scatter(): Expected self.dtype to be equal to src.dtype");
  }
  if (index.numel() == 0) return;
  for (int64_t k = 0; k < self.dim(); ++k) {
    TORCH_CHECK(k == d || index.size(k) <= self.size(k), "Expected index ",
                index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d);
    TORCH_CHECK(src == nullptr || index.size(k) <= src->size(k),
                "Expected index ", index.sizes(), " to be no larger than src ",
                src->sizes());
  }
}

bool on_device(const at::Tensor& self, int64_t dim, const at::Tensor& index,
               const at::Tensor* src) {
  if (!self.is_privateuseone() || !has_device_dtype(self.scalar_type()) ||
      !index.is_privateuseone() || self.dim() == 0) {
    return false;
  }
  if (src != nullptr && !src->is_privateuseone()) return false;
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  return index.numel() * self.size(d) <= kMaxCompares;
}

// Writes the scatter into `out`, which already holds self's values.
void scatter_into(at::Tensor& out, int64_t d, const at::Tensor& index,
                  const at::Tensor* src, const at::Scalar& value) {
  if (index.numel() == 0) return;
  const int64_t places = out.size(d);
  const bool outside = at::logical_or(at::lt(index, 0), at::ge(index, places))
                           .any()
                           .item<bool>();
  TORCH_CHECK_INDEX(!outside, "scatter(): index out of bounds for dimension ",
                    d, " with size ", places);
  // The region the index covers (every place along d), that dim last.
  at::Tensor region = out;
  for (int64_t k = 0; k < out.dim(); ++k) {
    if (k != d) region = region.narrow(k, 0, index.size(k));
  }
  const at::Tensor lines = region.movedim(d, -1);   // [..., places]
  const at::Tensor entries = index.movedim(d, -1);  // [..., n]
  const at::Tensor positions =
      at::arange(places, index.options()).unsqueeze(-1);
  const at::Tensor hits =
      at::eq(entries.unsqueeze(-2), positions);  // [..., places, n]
  const at::Tensor named = at::any(hits, -1);
  at::Tensor written;
  if (src == nullptr) {
    written =
        at::where(named, at::scalar_tensor(value, lines.options()), lines);
  } else {
    // The last entry naming each place: hits weighted 1..n, the largest.
    const int64_t n = entries.size(-1);
    const at::Tensor order = at::arange(1, n + 1, index.options());
    const at::Tensor last = at::argmax(at::mul(hits, order), -1);
    at::Tensor source = *src;
    for (int64_t k = 0; k < out.dim(); ++k) {
      if (k != d) source = source.narrow(k, 0, index.size(k));
    }
    source = source.narrow(d, 0, index.size(d)).movedim(d, -1);
    written = at::where(named, at::gather(source, -1, last), lines);
  }
  lines.copy_(written);
}

at::Tensor& scatter_out(const at::Tensor& self, int64_t dim,
                        const at::Tensor& index, const at::Tensor* src,
                        const at::Scalar& value, at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_scatter(self, d, index, src);
  if (src != nullptr) {
    check_out_apart(out, {index, *src});
  } else {
    check_out_apart(out, {index});
  }
  if (!out.is_same(self)) write_result(self, out);
  scatter_into(out, d, index, src, value);
  return out;
}

at::Tensor& value_out(const at::Tensor& self, int64_t dim,
                      const at::Tensor& index, const at::Scalar& value,
                      at::Tensor& out) {
  if (!on_device(self, dim, index, nullptr) || !out.is_privateuseone()) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::scatter_value_out>::call(self, dim, index,
                                                          value, out);
  }
  return scatter_out(self, dim, index, nullptr, value, out);
}

at::Tensor& src_out(const at::Tensor& self, int64_t dim,
                    const at::Tensor& index, const at::Tensor& src,
                    at::Tensor& out) {
  if (!on_device(self, dim, index, &src) || !out.is_privateuseone()) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::scatter_src_out>::call(self, dim, index, src,
                                                        out);
  }
  return scatter_out(self, dim, index, &src, 0, out);
}

at::Tensor value_functional(const at::Tensor& self, int64_t dim,
                            const at::Tensor& index, const at::Scalar& value) {
  at::Tensor out = at::empty_like(self);
  return value_out(self, dim, index, value, out);
}

at::Tensor src_functional(const at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = at::empty_like(self);
  return src_out(self, dim, index, src, out);
}

at::Tensor& value_inplace(at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Scalar& value) {
  return value_out(self, dim, index, value, self);
}

at::Tensor& src_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& src) {
  return src_out(self, dim, index, src, self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("scatter.value", value_functional);
  m.impl("scatter.value_out", value_out);
  m.impl("scatter_.value", value_inplace);
  m.impl("scatter.src", src_functional);
  m.impl("scatter.src_out", src_out);
  m.impl("scatter_.src", src_inplace);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
