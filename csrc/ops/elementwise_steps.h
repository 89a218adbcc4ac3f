// What the elementwise operators (elementwise.cpp, add_sub.cpp) share: an
// op's operands as the inputs and steps of one elementwise launch
// (launch_elementwise), computed in fp32 for floating types (int64 for
// integers) and rounded once to the result dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "spyre/kernels/elementwise.h"

namespace spyre::torch_glue::ops {

// The dtype vector steps compute in for a result of `type`: fp32 for
// floating types, int64 for integers.
rt::DType compute_dtype(at::ScalarType type);

// A scalar operand as PyTorch's CPU kernels see it: cast to the common
// dtype first (fp16 2.1 is 2.0996...), then widened to the compute dtype.
double compute_scalar(const at::Scalar& value, at::ScalarType common);

// A parameter (softplus' beta and threshold, a mul's or div's scalar) in
// the compute dtype, not rounded to the common dtype first.
double compute_parameter(const at::Scalar& value, at::ScalarType common);

// Operands of an elementwise op: spyre tensors become kernel inputs (values
// 0..n-1), CPU scalars immediates.
struct Operands {
  std::vector<at::Tensor> tensors;
  std::vector<kernels::ElementwiseStep> steps;
  at::ScalarType common = at::kFloat;
  // The dtype of the last step's value before it meets out (bool for
  // comparisons): when out's differs, a final step converts it.
  std::optional<at::ScalarType> result;
  // PyTorch's CPU multiplies and divides a 16-bit float tensor by a scalar
  // in fp32 with the scalar as given; add, sub, pow and comparisons round
  // the scalar to the 16-bit dtype first (compute_scalar).
  bool scalars_unrounded = false;

  // A value a step can use: an input number, or a scalar.
  struct Value {
    int id = -1;
    double scalar = 0;
  };

  Value add(const at::Tensor& t) {
    if (t.is_cpu() && t.dim() == 0) {
      return Value{-1, scalars_unrounded && at::isFloatingType(common)
                           ? compute_parameter(t.item(), common)
                           : compute_scalar(t.item(), common)};
    }
    tensors.push_back(t);
    return Value{static_cast<int>(tensors.size()) - 1, 0};
  }
  int next_id() const {
    return static_cast<int>(tensors.size() + steps.size());
  }
  // Steps refer to inputs by number, so inputs are all added first.
  int push(kernels::ElementwiseStep step) {
    steps.push_back(step);
    return next_id() - 1;
  }
  // A value as a step source: scalars are filled into a temporary.
  int materialized(const Value& v) {
    if (v.id >= 0) return v.id;
    return push(kernels::fill_step(v.scalar, compute_dtype(common)));
  }
  int binary(rt::VecOp op, const Value& a, const Value& b) {
    return binary(op, a, b, compute_dtype(common));
  }
  int binary(rt::VecOp op, const Value& a, const Value& b, rt::DType dtype) {
    if (b.id < 0)
      return push(kernels::scalar_step(op, materialized(a), b.scalar, dtype));
    return push(kernels::binary_step(op, materialized(a), b.id, dtype));
  }
};

// Runs the steps into `out`; the last step's value is rounded to the common
// dtype first when out's dtype differs (as PyTorch casts the result).
void run_steps(const char* name, Operands& ops, const at::Tensor& out);

}  // namespace spyre::torch_glue::ops
