// add and sub (the hottest eager ops) as device programs: their own kernels
// rather than the boxed one of elementwise.cpp, so the common case (two
// contiguous tensors of one shape and dtype) skips TensorIterator and the
// boxed call's argument handling.
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sub_ops.h>
#include <torch/library.h>

#include "ops/elementwise_steps.h"
#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

using rt::VecOp;

bool device_computes(at::ScalarType type) {
  return has_device_dtype(type) && type != at::kBool;
}

// out = a + alpha * b (sub: a - alpha * b), as TensorIterator::binary_op.
at::TensorIterator binary_iter(const at::Tensor& a, const at::Tensor& b,
                               const at::Tensor& out, bool in_place) {
  return at::TensorIteratorConfig()
      .set_check_mem_overlap(true)
      .add_output(out)
      .add_const_input(a)
      .add_const_input(b)
      .allow_cpu_scalars(true)
      .promote_inputs_to_common_dtype(true)
      .cast_common_dtype_to_outputs(true)
      .enforce_safe_casting_to_output(true)
      .resize_outputs(!in_place)
      .build();
}

// at::result_type of two tensors; tensors of one dtype (the common case)
// promote to it whatever their dims, so the dispatcher call is skipped.
at::ScalarType common_type(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() == b.scalar_type()) return a.scalar_type();
  return at::result_type(a, b);
}

// alpha as the CPU's kernels take it: converted to the common dtype (a
// 16-bit alpha is rounded, as add's scalars are), and refused when it does
// not fit there.
double alpha_value(const at::Scalar& alpha, at::ScalarType common) {
  switch (common) {
    case at::kHalf:
      return static_cast<float>(alpha.to<at::Half>());
    case at::kBFloat16:
      return static_cast<float>(alpha.to<at::BFloat16>());
    case at::kFloat:
      return alpha.to<float>();
    default:
      return static_cast<double>(alpha.to<int64_t>());
  }
}

void add_sub(const char* name, VecOp op, const at::Tensor& self,
             const at::Tensor& other, const at::Scalar& alpha,
             const at::Tensor& out) {
  Operands ops;
  ops.common = common_type(self, other);
  at::native::alpha_check(ops.common, alpha);
  auto a = ops.add(self);
  auto b = ops.add(other);
  const bool unit_alpha = alpha.isIntegral(true) ? alpha.to<int64_t>() == 1
                                                 : alpha.to<double>() == 1.0;
  if (unit_alpha) {
    ops.binary(op, a, b);
  } else if (b.id < 0) {
    const double scaled =
        at::isFloatingType(ops.common)
            ? static_cast<double>(
                  static_cast<float>(b.scalar) *
                  static_cast<float>(alpha_value(alpha, ops.common)))
            : static_cast<double>(static_cast<int64_t>(b.scalar) *
                                  alpha.to<int64_t>());
    ops.binary(op, a, {-1, scaled});
  } else {
    const int scaled =
        ops.binary(VecOp::kMul, b, {-1, alpha_value(alpha, ops.common)});
    ops.binary(op, a, {scaled, 0});
  }
  run_steps(name, ops, out);
}

bool add_on_device(const at::Tensor& self, const at::Tensor& other,
                   const at::Tensor* out) {
  const at::ScalarType common = common_type(self, other);
  // Each spyre operand must be of a dtype the device computes with too
  // (int16 only lives in device memory): else the counted CPU fallback.
  auto held = [](const at::Tensor& t) {
    return !t.is_privateuseone() || has_device_dtype(t.scalar_type());
  };
  return device_computes(common) && held(self) && held(other) &&
         (out == nullptr || device_computes(out->scalar_type()));
}

template <VecOp kOp>
constexpr const char* add_sub_name() {
  return kOp == VecOp::kAdd ? "add" : "sub";
}

// The output of a functional binary op: the common case (two contiguous
// spyre tensors of one shape and dtype) skips TensorIterator,
// whose checks cannot fail there and whose output would be the same
// contiguous tensor.
at::Tensor binary_output(const at::Tensor& self, const at::Tensor& other) {
  const bool simple = self.is_privateuseone() && other.is_privateuseone() &&
                      self.scalar_type() == other.scalar_type() &&
                      self.sizes() == other.sizes() && self.is_contiguous() &&
                      other.is_contiguous() && self.device() == other.device();
  if (simple) return at::empty(self.sizes(), self.options());
  return binary_iter(self, other, at::Tensor(), false).output();
}

at::Tensor add_tensor(const at::Tensor& self, const at::Tensor& other,
                      const at::Scalar& alpha) {
  if (!add_on_device(self, other, nullptr)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::add_Tensor>::call(self, other,
                                                                    alpha);
  }
  at::Tensor out = binary_output(self, other);
  add_sub("add", VecOp::kAdd, self, other, alpha, out);
  return out;
}

at::Tensor& add_inplace(at::Tensor& self, const at::Tensor& other,
                        const at::Scalar& alpha) {
  if (!add_on_device(self, other, &self)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::add__Tensor>::call(self,
                                                                     other,
                                                                     alpha);
  }
  binary_iter(self, other, self, true);
  add_sub("add", VecOp::kAdd, self, other, alpha, self);
  return self;
}

at::Tensor& add_out(const at::Tensor& self, const at::Tensor& other,
                    const at::Scalar& alpha, at::Tensor& out) {
  if (!add_on_device(self, other, &out)) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::add_out>::call(
        self, other, alpha, out);
  }
  binary_iter(self, other, out, false);
  add_sub("add", VecOp::kAdd, self, other, alpha, out);
  return out;
}

at::Tensor sub_tensor(const at::Tensor& self, const at::Tensor& other,
                      const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  if (!add_on_device(self, other, nullptr)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::sub_Tensor>::call(self, other,
                                                                    alpha);
  }
  at::Tensor out = binary_output(self, other);
  add_sub("sub", VecOp::kSub, self, other, alpha, out);
  return out;
}

at::Tensor& sub_inplace(at::Tensor& self, const at::Tensor& other,
                        const at::Scalar& alpha) {
  at::native::sub_check(self, other);
  if (!add_on_device(self, other, &self)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::sub__Tensor>::call(self,
                                                                     other,
                                                                     alpha);
  }
  binary_iter(self, other, self, true);
  add_sub("sub", VecOp::kSub, self, other, alpha, self);
  return self;
}

at::Tensor& sub_out(const at::Tensor& self, const at::Tensor& other,
                    const at::Scalar& alpha, at::Tensor& out) {
  at::native::sub_check(self, other);
  if (!add_on_device(self, other, &out)) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::sub_out>::call(
        self, other, alpha, out);
  }
  binary_iter(self, other, out, false);
  add_sub("sub", VecOp::kSub, self, other, alpha, out);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(add_tensor));
  m.impl("add_.Tensor", TORCH_FN(add_inplace));
  m.impl("add.out", TORCH_FN(add_out));
  m.impl("sub.Tensor", TORCH_FN(sub_tensor));
  m.impl("sub_.Tensor", TORCH_FN(sub_inplace));
  m.impl("sub.out", TORCH_FN(sub_out));
}

}  // namespace spyre::torch_glue::ops
