#include "ops/elementwise_steps.h"

#include <ATen/Dispatch.h>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {

using rt::VecOp;

namespace {

// Floating scalars convert without range checks, as the CPU's kernels
// convert them: 1e5 is inf as fp16, never an error.
float unchecked_float(const at::Scalar& value) {
  return static_cast<float>(value.to<double>());
}

}  // namespace

rt::DType compute_dtype(at::ScalarType type) {
  return at::isFloatingType(type) ? rt::DType::kFloat32 : rt::DType::kInt64;
}

double compute_scalar(const at::Scalar& value, at::ScalarType common) {
  switch (common) {
    case at::kHalf:
      return static_cast<float>(at::Half(unchecked_float(value)));
    case at::kBFloat16:
      return static_cast<float>(at::BFloat16(unchecked_float(value)));
    case at::kFloat:
      return unchecked_float(value);
    case at::kBool:
      return value.to<bool>() ? 1 : 0;
    default:
      break;
  }
  // An integer scalar wraps into the common dtype as TensorIterator casts it
  // (uint8: -1 is 255, -3 is 253, 300 is 44), and only then widens: the
  // device computes in int64, where -5 would stay -5.
  double wrapped = 0;
  AT_DISPATCH_INTEGRAL_TYPES(common, "spyre_compute_scalar", [&] {
    wrapped = static_cast<double>(
        static_cast<scalar_t>(static_cast<uint64_t>(value.to<int64_t>())));
  });
  return wrapped;
}

double compute_parameter(const at::Scalar& value, at::ScalarType common) {
  if (at::isFloatingType(common)) return unchecked_float(value);
  return static_cast<double>(value.to<int64_t>());
}

void run_steps(const char* name, Operands& ops, const at::Tensor& out) {
  if (out.numel() == 0) return;
  const at::ScalarType result = ops.result.value_or(ops.common);
  if (out.scalar_type() != result) {
    ops.steps.back().dtype = device_dtype(result);
    if (out.scalar_type() == at::kBool) {  // nonzero -> true, as a cast does
      ops.push(kernels::scalar_step(VecOp::kNe, ops.next_id() - 1, 0,
                                    rt::DType::kBool));
    } else {
      ops.push(kernels::copy_step(ops.next_id() - 1));
    }
  }
  launch_elementwise(name, ops.tensors, out, ops.steps);
}

}  // namespace spyre::torch_glue::ops
