// softmax and log_softmax as device programs (kernels/softmax.h) along the
// last dim, all leading dims as rows of one launch. Along another dim the
// same math runs as device ops in fp32 (amax, subtract, exp, sum, divide or
// log) and is rounded once at the end.
#include "spyre/kernels/softmax.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_safe_softmax_native.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"

namespace spyre::torch_glue::ops {
namespace {

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// `safe`: rows of nothing but -inf give zeros (_safe_softmax; softmax only).
at::Tensor along_last_dim(at::Tensor x, bool log, bool safe = false) {
  if (x.numel() > 0 && (x.dim() == 0 || x.size(-1) == 1)) {
    // One element per row: log_softmax is x - x, softmax its exp (NaN for a
    // masked -inf or a NaN, as on the CPU; 0 and 1 otherwise).
    const at::Tensor zero = x.sub(x);
    return log ? zero : zero.exp();
  }
  at::Tensor out =
      at::empty(x.sizes(), x.options().memory_format(std::nullopt));
  if (x.numel() == 0) return out;
  const kernels::Matrix in = matrix_operand(x, 0);
  const kernels::Matrix out_m = *matrix_view(out, 0);
  kernels::KeyWriter key;
  key.add("softmax").add(log).add(safe);
  append_key(key, in);
  append_key(key, out_m);
  launch_cached(x.device().index(), ProgramKey(std::move(key)),
                [&] {
                  kernels::SoftmaxOptions options;
                  options.target = {device_chip(x.device().index())};
                  options.log = log;
                  options.safe = safe;
                  return kernels::build_softmax(in, out_m, options);
                },
                {x, out});
  return out;
}

at::Tensor along_dim(const at::Tensor& x, int64_t dim, bool log) {
  const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  const at::Tensor shifted = xf.sub(xf.amax({dim}, true));
  const at::Tensor e = shifted.exp();
  const at::Tensor s = e.sum({dim}, true);
  const at::Tensor r = log ? shifted.sub(s.log()) : e.div(s);
  return r.scalar_type() == x.scalar_type() ? r : r.to(x.scalar_type());
}

at::Tensor softmax_impl(const at::Tensor& self, int64_t dim, bool half_to_float,
                        bool log) {
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const at::Tensor x = half_to_float ? self.to(at::kFloat) : self;
  if (x.dim() == 0 || d == x.dim() - 1) return along_last_dim(x, log);
  if (x.numel() == 0) {
    return at::empty(x.sizes(), x.options().memory_format(std::nullopt));
  }
  return along_dim(x, d, log);
}

at::Tensor softmax_kernel(const at::Tensor& self, int64_t dim,
                          bool half_to_float) {
  if (!floating(self.scalar_type())) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::_softmax>::call(self, dim, half_to_float);
  }
  return softmax_impl(self, dim, half_to_float, false);
}

at::Tensor log_softmax_kernel(const at::Tensor& self, int64_t dim,
                              bool half_to_float) {
  if (!floating(self.scalar_type())) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::_log_softmax>::call(self, dim, half_to_float);
  }
  return softmax_impl(self, dim, half_to_float, true);
}

at::Tensor& softmax_out_kernel(const at::Tensor& self, int64_t dim,
                               bool half_to_float, at::Tensor& out) {
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, self);  // in place is row by row
  at::Tensor r = softmax_kernel(self, dim, half_to_float);
  return write_result(r, out);
}

at::Tensor& log_softmax_out_kernel(const at::Tensor& self, int64_t dim,
                                   bool half_to_float, at::Tensor& out) {
  at::assert_no_internal_overlap(out);
  at::assert_no_partial_overlap(out, self);  // in place is row by row
  at::Tensor r = log_softmax_kernel(self, dim, half_to_float);
  return write_result(r, out);
}

// Attention's softmax (scaled_dot_product_attention's math path): one
// program where a row is fully masked. Elsewhere (another dim, one element
// per row, integer input) ATen's composite form runs on the device ops.
at::Tensor safe_softmax_kernel(const at::Tensor& self, int64_t dim,
                               std::optional<at::ScalarType> dtype) {
  const at::Tensor x = dtype ? self.to(*dtype) : self;
  const int64_t d = at::maybe_wrap_dim(dim, x.dim());
  if (floating(x.scalar_type()) && x.dim() > 0 && d == x.dim() - 1 &&
      x.size(-1) > 1) {
    return along_last_dim(x, false, true);
  }
  return at::native::_safe_softmax(x, dim, std::nullopt);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_safe_softmax", safe_softmax_kernel);
  m.impl("_softmax", softmax_kernel);
  m.impl("_softmax.out", softmax_out_kernel);
  m.impl("_log_softmax", log_softmax_kernel);
  m.impl("_log_softmax.out", log_softmax_out_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
