// Activations with more than one output, written from elementwise device
// ops: log_sigmoid_forward (xLSTM's gates), whose second output is the
// buffer the CPU's kernel keeps for the backward, exp(-|x|).
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/log1p.h>
#include <ATen/ops/log_sigmoid_forward_ops.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/sub.h>
#include <torch/library.h>

#include <tuple>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// min(x, 0) - log1p(exp(-|x|)) in fp32, rounded once to the dtype, as the
// CPU's kernel computes 16-bit inputs.
std::tuple<at::Tensor&, at::Tensor&> log_sigmoid_forward_out(
    const at::Tensor& self, at::Tensor& output, at::Tensor& buffer) {
  if (!floating(self.scalar_type()) || !output.is_privateuseone() ||
      !buffer.is_privateuseone()) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::log_sigmoid_forward_output>::call(self, output,
                                                                   buffer);
  }
  check_out_apart(output, {self, buffer});
  check_out_apart(buffer, {self});
  const at::Tensor x = self.to(at::kFloat);
  const at::Tensor decay = at::exp(at::neg(at::abs(x)));
  const at::Tensor result = at::sub(at::clamp_max(x, 0), at::log1p(decay));
  write_result(result.to(self.scalar_type()), output);
  write_result(decay.to(self.scalar_type()), buffer);
  return {output, buffer};
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  at::Tensor output = at::empty({0}, self.options());
  at::Tensor buffer = at::empty({0}, self.options());
  log_sigmoid_forward_out(self, output, buffer);
  return {output, buffer};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("log_sigmoid_forward", log_sigmoid_forward);
  m.impl("log_sigmoid_forward.output", log_sigmoid_forward_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
