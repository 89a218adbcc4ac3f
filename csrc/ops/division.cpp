// div with a rounding mode (JetMoE: token = pair.div(top_k,
// rounding_mode="trunc")), written from other device ops. The result keeps
// the operands' common dtype (no promotion of integers to float).
//   trunc: integers floor-divide and step back toward zero where the exact
//     quotient is negative and not whole; floats truncate the quotient as
//     the CPU does (16-bit quotients of two tensors rounded first, of a
//     tensor and a scalar truncated in fp32).
//   floor: integers floor-divide (the device's integer division). Floating
//     floor division follows the CPU's own fmod-based formula: the counted
//     CPU fallback.
#include <ATen/ScalarOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/remainder.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <optional>
#include <string_view>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

bool is_scalar(const at::Tensor& t) { return t.is_cpu() && t.dim() == 0; }

// The rounded quotient in the common dtype, or nullopt where the device
// does not compute it (the caller falls back to the CPU).
std::optional<at::Tensor> rounded_quotient(const at::Tensor& a,
                                           const at::Tensor& b,
                                           std::string_view mode) {
  const at::ScalarType common = at::result_type(a, b);
  const bool operands_here = (a.is_privateuseone() || is_scalar(a)) &&
                             (b.is_privateuseone() || is_scalar(b)) &&
                             (a.is_privateuseone() || b.is_privateuseone());
  if (!operands_here || !has_device_dtype(common) || common == at::kBool) {
    return std::nullopt;
  }
  const bool integral = at::isIntegralType(common, /*includeBool=*/false);
  if (mode == "floor") {
    if (!integral) return std::nullopt;
    return at::floor_divide(a, b);
  }
  TORCH_CHECK(mode == "trunc",
              "div expected rounding_mode to be one of None, 'trunc', or "
              "'floor' but found '",
              mode, "'");
  if (integral) {
    const at::Tensor floored = at::floor_divide(a, b);
    const at::Tensor inexact = at::ne(at::remainder(a, b), 0);
    const at::Tensor negative = at::ne(at::lt(a, 0), at::lt(b, 0));
    return at::add(floored, at::logical_and(inexact, negative)).to(common);
  }
  // A 16-bit tensor over a scalar: the CPU divides in fp32 (the scalar as
  // given) and truncates before rounding; over a tensor it rounds the
  // quotient first.
  const bool in_fp32 = is_scalar(b) && at::isReducedFloatingType(common);
  const at::Tensor q = at::div(in_fp32 ? a.to(at::kFloat) : a, b);
  const at::Tensor truncated =
      at::where(at::lt(q, 0), at::neg(at::floor(at::neg(q))), at::floor(q));
  return in_fp32 ? truncated.to(common) : truncated;
}

at::Tensor& div_mode_out(const at::Tensor& self, const at::Tensor& other,
                         std::optional<std::string_view> mode,
                         at::Tensor& out) {
  std::optional<at::Tensor> q;
  if (mode.has_value()) q = rounded_quotient(self, other, *mode);
  if (!q) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::div_out_mode>::call(self, other, mode, out);
  }
  TORCH_CHECK(at::canCast(q->scalar_type(), out.scalar_type()), "result type ",
              q->scalar_type(), " can't be cast to the desired output type ",
              out.scalar_type());
  return write_result(*q, out);
}

at::Tensor div_mode(const at::Tensor& self, const at::Tensor& other,
                    std::optional<std::string_view> mode) {
  const at::ScalarType common = at::result_type(self, other);
  if (!mode.has_value()) return at::div(self, other);
  at::Tensor out = at::empty({0}, self.options().dtype(common));
  return div_mode_out(self, other, mode, out);
}

at::Tensor& div_mode_(at::Tensor& self, const at::Tensor& other,
                      std::optional<std::string_view> mode) {
  return div_mode_out(self, other, mode, self);
}

at::Tensor div_scalar_mode(const at::Tensor& self, const at::Scalar& other,
                           std::optional<std::string_view> mode) {
  return div_mode(self, at::native::wrapped_scalar_tensor(other), mode);
}

at::Tensor& div_scalar_mode_(at::Tensor& self, const at::Scalar& other,
                             std::optional<std::string_view> mode) {
  return div_mode_(self, at::native::wrapped_scalar_tensor(other), mode);
}

at::Tensor& div_scalar_mode_out(const at::Tensor& self, const at::Scalar& other,
                                std::optional<std::string_view> mode,
                                at::Tensor& out) {
  return div_mode_out(self, at::native::wrapped_scalar_tensor(other), mode,
                      out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("div.Tensor_mode", div_mode);
  m.impl("div_.Tensor_mode", div_mode_);
  m.impl("div.out_mode", div_mode_out);
  m.impl("div.Scalar_mode", div_scalar_mode);
  m.impl("div_.Scalar_mode", div_scalar_mode_);
  m.impl("div.Scalar_mode_out", div_scalar_mode_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
