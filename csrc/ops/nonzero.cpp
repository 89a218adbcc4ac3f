// nonzero: the indices of a tensor's nonzero elements, in row-major order,
// as [count, dims] int64 (torch.where(cond), boolean mask indexing, MoE
// dispatch that loops over the experts hit). Written from other device
// ops: the count is read back (the result's shape depends on it, as on
// every device), each element's running count of nonzeros is an exact
// int64 cumsum, output row p is the first element whose running count
// reaches p + 1 (a [count, numel] comparison and an arg reduction), and its
// flat index is split into coordinates by floor division and remainder.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/nonzero_ops.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <torch/library.h>

#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// Comparisons of one nonzero ([count, numel]) beyond this many elements
// take the counted CPU fallback.
constexpr int64_t kMaxCompares = int64_t{1} << 24;

at::Tensor nonzero_kernel(const at::Tensor& self) {
  const auto long_options = self.options().dtype(at::kLong);
  if (!has_device_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::nonzero>::call(
        self);
  }
  if (self.numel() == 0) return at::empty({0, self.dim()}, long_options);
  const at::Tensor flags = at::ne(self.reshape({-1}), 0).to(at::kLong);
  const int64_t count = at::sum(flags).item<int64_t>();
  if (count == 0 || self.dim() == 0) {
    return at::empty({count, self.dim()}, long_options);
  }
  if (count * self.numel() > kMaxCompares) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::nonzero>::call(
        self);
  }
  const at::Tensor running = at::cumsum(flags, 0);
  const at::Tensor rows = at::arange(1, count + 1, long_options).unsqueeze(1);
  at::Tensor reached = at::empty({0}, self.options().dtype(at::kByte));
  at::eq_out(reached, running.unsqueeze(0), rows);  // [count, numel]
  at::Tensor flat = at::argmax(reached, 1);
  std::vector<at::Tensor> coordinates(self.dim());
  for (int64_t d = self.dim() - 1; d >= 0; --d) {
    coordinates[d] = at::remainder(flat, self.size(d));
    if (d > 0) flat = at::floor_divide(flat, self.size(d));
  }
  return at::stack(coordinates, 1);
}

at::Tensor& nonzero_out_kernel(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got ",
              out.scalar_type());
  check_out_apart(out, {self});
  return write_result(nonzero_kernel(self), out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nonzero", nonzero_kernel);
  m.impl("nonzero.out", nonzero_out_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
