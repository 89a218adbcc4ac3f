// cumsum as device additions (position ids of generate() are the cumulative
// sum of the attention mask): a scan in log2(n) steps, each adding to every
// element the partial sum `step` places before it (Hillis and Steele), two
// elementwise launches per step over views shifted along the dim. Integer
// sums are exact (int64 arithmetic); floating sums add in a tree order, not
// the CPU's left-to-right one, so they agree within rounding.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/add.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// PyTorch's cumsum result dtype: integers (and bool) sum in int64.
at::ScalarType cumsum_dtype(const at::Tensor& self,
                            std::optional<at::ScalarType> dtype) {
  if (dtype.has_value()) return *dtype;
  return at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
             ? at::kLong
             : self.scalar_type();
}

at::Tensor scan(const at::Tensor& self, int64_t dim, at::ScalarType dtype) {
  at::Tensor sums = at::empty(self.sizes(), self.options().dtype(dtype));
  sums.copy_(self);
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  at::Tensor next = at::empty_like(sums);
  for (int64_t step = 1; step < n; step *= 2) {
    next.narrow(dim, 0, step).copy_(sums.narrow(dim, 0, step));
    at::Tensor shifted = next.narrow(dim, step, n - step);
    at::add_out(shifted, sums.narrow(dim, step, n - step),
                sums.narrow(dim, 0, n - step));
    std::swap(sums, next);
  }
  return sums;
}

at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim,
                       std::optional<at::ScalarType> dtype, at::Tensor& out) {
  const at::ScalarType result = dtype.value_or(out.scalar_type());
  if (!has_device_dtype(self.scalar_type()) || !has_device_dtype(result) ||
      at::isComplexType(result)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::cumsum_out>::call(self, dim,
                                                                    dtype, out);
  }
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  at::native::resize_output(out, self.sizes());
  if (self.numel() == 0) return out;
  if (self.dim() == 0) {
    out.copy_(self);
    return out;
  }
  // 16-bit floats sum in fp32 and round once, as the CPU accumulates them.
  const bool narrow_float = result == at::kHalf || result == at::kBFloat16;
  out.copy_(scan(self, d, narrow_float ? at::kFloat : result));
  return out;
}

at::Tensor cumsum(const at::Tensor& self, int64_t dim,
                  std::optional<at::ScalarType> dtype) {
  at::Tensor out =
      at::empty({0}, self.options().dtype(cumsum_dtype(self, dtype)));
  return cumsum_out(self, dim, dtype, out);
}

at::Tensor& cumsum_(at::Tensor& self, int64_t dim,
                    std::optional<at::ScalarType> dtype) {
  return cumsum_out(self.clone(), dim, dtype, self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cumsum", cumsum);
  m.impl("cumsum.out", cumsum_out);
  m.impl("cumsum_", cumsum_);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
