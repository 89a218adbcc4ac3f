// Elementwise operators as device programs: PyTorch's TensorIterator decides
// shapes, type promotion, output allocation and overlap checks; the kernel is
// a short list of vector steps (kernels/elementwise.h) computed in fp32 for
// floating types (int64 for integers) and rounded once to the result dtype.
// Dtypes the device cannot compute go to the counted CPU fallback.
#include <ATen/TensorIterator.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sub_ops.h>
#include <torch/library.h>

#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

using kernels::ElementwiseStep;
using rt::VecOp;

// The dtype vector steps compute in for a result of `type`: fp32 for
// floating types, int64 for integers.
rt::DType compute_dtype(at::ScalarType type) {
  return at::isFloatingType(type) ? rt::DType::kFloat32 : rt::DType::kInt64;
}

// A scalar as the compute dtype sees it (fp32 or int64 exactly).
double compute_scalar(const at::Scalar& value, at::ScalarType common) {
  if (at::isFloatingType(common)) {
    return static_cast<double>(value.to<float>());
  }
  return static_cast<double>(value.to<int64_t>());
}

// Operands of an elementwise op: spyre tensors become kernel inputs (values
// 0..n-1), CPU scalars immediates.
struct Operands {
  std::vector<at::Tensor> tensors;
  std::vector<ElementwiseStep> steps;
  at::ScalarType common = at::kFloat;

  // A value a step can use: an input number, or a scalar.
  struct Value {
    int id = -1;
    double scalar = 0;
  };

  Value add(const at::Tensor& t) {
    if (t.is_cpu() && t.dim() == 0) {
      return Value{-1, compute_scalar(t.item(), common)};
    }
    tensors.push_back(t);
    return Value{static_cast<int>(tensors.size()) - 1, 0};
  }
  int next_id() const {
    return static_cast<int>(tensors.size() + steps.size());
  }
  // Steps refer to inputs by number, so inputs are all added first.
  int push(ElementwiseStep step) {
    steps.push_back(step);
    return next_id() - 1;
  }
  // A value as a step source: scalars are filled into a temporary.
  int materialized(const Value& v) {
    if (v.id >= 0) return v.id;
    return push(kernels::fill_step(v.scalar, compute_dtype(common)));
  }
  int binary(VecOp op, const Value& a, const Value& b) {
    const rt::DType dtype = compute_dtype(common);
    if (b.id < 0)
      return push(kernels::scalar_step(op, materialized(a), b.scalar, dtype));
    return push(kernels::binary_step(op, materialized(a), b.id, dtype));
  }
};

// Runs the steps into `out`; the last step's value is rounded to the common
// dtype first when out's dtype differs (as PyTorch casts the result).
void run(const char* name, Operands& ops, const at::Tensor& out) {
  if (out.numel() == 0) return;
  if (out.scalar_type() != ops.common) {
    ops.steps.back().dtype = device_dtype(ops.common);
    ops.push(kernels::copy_step(ops.next_id() - 1));
  }
  launch_elementwise(name, ops.tensors, out, ops.steps);
}

bool device_computes(at::ScalarType type) {
  return has_device_dtype(type) && type != at::kBool;
}

// ---- add / sub -------------------------------------------------------------

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

void add_sub(const char* name, VecOp op, const at::Tensor& self,
             const at::Tensor& other, const at::Scalar& alpha,
             const at::Tensor& out) {
  Operands ops;
  ops.common = at::result_type(self, other);
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
            ? static_cast<double>(static_cast<float>(b.scalar) *
                                  alpha.to<float>())
            : static_cast<double>(static_cast<int64_t>(b.scalar) *
                                  alpha.to<int64_t>());
    ops.binary(op, a, {-1, scaled});
  } else {
    const int scaled =
        ops.binary(VecOp::kMul, b, {-1, compute_scalar(alpha, ops.common)});
    ops.binary(op, a, {scaled, 0});
  }
  run(name, ops, out);
}

bool add_on_device(const at::Tensor& self, const at::Tensor& other,
                   const at::Tensor* out) {
  const at::ScalarType common = at::result_type(self, other);
  return device_computes(common) &&
         (out == nullptr || device_computes(out->scalar_type()));
}

template <VecOp kOp>
constexpr const char* add_sub_name() {
  return kOp == VecOp::kAdd ? "add" : "sub";
}

at::Tensor add_tensor(const at::Tensor& self, const at::Tensor& other,
                      const at::Scalar& alpha) {
  if (!add_on_device(self, other, nullptr)) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::add_Tensor>::call(self, other,
                                                                    alpha);
  }
  at::TensorIterator iter = binary_iter(self, other, at::Tensor(), false);
  add_sub("add", VecOp::kAdd, self, other, alpha, iter.output());
  return iter.output();
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
  at::TensorIterator iter = binary_iter(self, other, at::Tensor(), false);
  add_sub("sub", VecOp::kSub, self, other, alpha, iter.output());
  return iter.output();
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
