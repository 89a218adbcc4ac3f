// Factories and fills that run as device programs: arange (iota), uniform_
// and normal_ (Philox RandFill from the device generator; rand, randn and
// normal build on them), triu/tril (index compare and select), eye (rows
// compared with columns). fill_, zero_,
// full, zeros and ones reach the device through fill_ (factory.cpp).
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/eye_ops.h>
#include <ATen/ops/normal_ops.h>
#include <ATen/ops/tril_ops.h>
#include <ATen/ops/triu_ops.h>
#include <ATen/ops/uniform_ops.h>
#include <torch/library.h>

#include <cmath>
#include <mutex>

#include "generator.h"
#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

using kernels::ElementwiseStep;
using Kind = kernels::ElementwiseStep::Kind;

bool floating_on_device(at::ScalarType type) {
  return type == at::kHalf || type == at::kBFloat16 || type == at::kFloat;
}

// ---- arange ----------------------------------------------------------------

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end,
                       const at::Scalar& step, at::Tensor& out) {
  if (!has_device_dtype(out.scalar_type()) || out.scalar_type() == at::kBool) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::arange_start_out>::call(start, end, step, out);
  }
  const double xstart = start.to<double>(), xend = end.to<double>(),
               xstep = step.to<double>();
  TORCH_CHECK(xstep > 0 || xstep < 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(xstart) && std::isfinite(xend),
              "unsupported range: ", xstart, " -> ", xend);
  TORCH_CHECK(
      ((xstep > 0) && (xend >= xstart)) || ((xstep < 0) && (xend <= xstart)),
      "upper bound and larger bound inconsistent with step sign");
  const bool integral = !at::isFloatingType(out.scalar_type());
  // As PyTorch: the size from double arithmetic for floating outputs, from
  // int64 for integer ones.
  const int64_t size =
      integral
          ? static_cast<int64_t>(std::ceil(
                static_cast<double>(end.to<int64_t>() - start.to<int64_t>()) /
                static_cast<double>(step.to<int64_t>())))
          : static_cast<int64_t>(std::ceil((xend - xstart) / xstep));
  TORCH_CHECK(size >= 0, "invalid size, possible overflow?");
  if (out.numel() != size) out.resize_({size});
  if (size == 0) return out;
  const rt::DType compute = integral ? rt::DType::kInt64 : rt::DType::kFloat32;
  launch_elementwise(
      "arange", {}, out,
      {kernels::index_step(Kind::kColIndex,
                           integral ? start.to<int64_t>() : xstart,
                           integral ? step.to<int64_t>() : xstep, compute),
       kernels::copy_step(0)});
  return out;
}

// ---- eye -------------------------------------------------------------------

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  if (!has_device_dtype(out.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::eye_m_out>::call(n, m, out);
  }
  out.resize_({n, m});
  if (out.numel() == 0) return out;
  const auto positions = out.options().dtype(at::kLong);
  out.copy_(
      at::eq(at::arange(n, positions).unsqueeze(1), at::arange(m, positions)));
  return out;
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

// ---- random ----------------------------------------------------------------

// Reserves numel counters of the generator: (seed, offset).
std::pair<uint64_t, uint64_t> draw(const at::Tensor& self,
                                   std::optional<at::Generator> generator) {
  auto* gen = at::get_generator_or_default<SpyreGeneratorImpl>(
      generator, default_generator(self.device().index()));
  std::lock_guard<std::mutex> lock(gen->mutex_);
  return gen->philox_engine_inputs(static_cast<uint64_t>(self.numel()));
}

at::Tensor& random_fill(at::Tensor& self, rt::RandDist dist, double a, double b,
                        std::optional<at::Generator> generator) {
  if (self.numel() == 0) return self;
  const auto [seed, offset] = draw(self, generator);
  launch_elementwise(dist == rt::RandDist::kUniform ? "uniform" : "normal", {},
                     self,
                     {kernels::random_step(dist, a, b, seed, offset,
                                           device_dtype(self.scalar_type()))});
  return self;
}

at::Tensor& uniform_inplace(at::Tensor& self, double from, double to,
                            std::optional<at::Generator> generator) {
  if (!floating_on_device(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::uniform_>::call(self, from,
                                                                  to,
                                                                  generator);
  }
  TORCH_CHECK(from <= to,
              "uniform_ expects to return a [from, to) range, but "
              "found from=",
              from, " > to=", to);
  return random_fill(self, rt::RandDist::kUniform, from, to, generator);
}

at::Tensor& normal_inplace(at::Tensor& self, double mean, double std,
                           std::optional<at::Generator> generator) {
  if (!floating_on_device(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::normal_>::call(
        self, mean, std, generator);
  }
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  return random_fill(self, rt::RandDist::kNormal, mean, std, generator);
}

// ---- triu / tril -----------------------------------------------------------

// The iteration's cols and rows are the last two dims when both exceed 1
// and out's memory order keeps them innermost (see launch_elementwise).
bool index_masks_apply(const at::Tensor& out) {
  const int64_t n = out.dim();
  if (n < 2 || out.size(-1) < 2 || out.size(-2) < 2) return false;
  if (!(out.stride(-1) < out.stride(-2))) return false;
  for (int64_t d = 0; d + 2 < n; ++d) {
    if (out.size(d) > 1 && out.stride(d) <= out.stride(-2)) return false;
  }
  return true;
}

// out = self where (col - row) >= k (upper) or <= k (lower), else 0.
void triangle(const at::Tensor& self, int64_t k, bool upper,
              const at::Tensor& out) {
  const rt::DType dtype = device_dtype(self.scalar_type());
  const rt::DType index = rt::DType::kInt64;
  launch_elementwise(
      upper ? "triu" : "tril", {self}, out,
      {kernels::index_step(Kind::kColIndex, 0, 1, index),             // 1
       kernels::index_step(Kind::kRowIndex, 0, 1, index),             // 2
       kernels::binary_step(rt::VecOp::kSub, 1, 2, index),            // 3
       kernels::scalar_step(upper ? rt::VecOp::kGe : rt::VecOp::kLe,  // 4
                            3, static_cast<double>(k), rt::DType::kBool),
       kernels::fill_step(0, dtype),  // 5
       kernels::select_step(4, 0, 5, dtype)});
}

template <bool kUpper>
at::Tensor& triangle_out(const at::Tensor& self, int64_t k, at::Tensor& out) {
  TORCH_CHECK(self.dim() >= 2, kUpper ? "triu" : "tril",
              ": input tensor must have at least 2 dimensions");
  at::native::resize_output(out, self.sizes());
  if (!has_device_dtype(self.scalar_type()) ||
      out.scalar_type() != self.scalar_type() || !index_masks_apply(out)) {
    using Op =
        std::conditional_t<kUpper, at::_ops::triu_out, at::_ops::tril_out>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, k, out);
  }
  triangle(self, k, kUpper, out);
  return out;
}

template <bool kUpper>
at::Tensor triangle_functional(const at::Tensor& self, int64_t k) {
  at::Tensor out = at::empty({0}, self.options());
  return triangle_out<kUpper>(self, k, out);
}

template <bool kUpper>
at::Tensor& triangle_inplace(at::Tensor& self, int64_t k) {
  return triangle_out<kUpper>(self, k, self);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("arange.start_out", TORCH_FN(arange_out));
  m.impl("eye.m_out", TORCH_FN(eye_m_out));
  m.impl("eye.out", TORCH_FN(eye_out));
  m.impl("uniform_", TORCH_FN(uniform_inplace));
  m.impl("normal_", TORCH_FN(normal_inplace));
  m.impl("triu", TORCH_FN(triangle_functional<true>));
  m.impl("triu_", TORCH_FN(triangle_inplace<true>));
  m.impl("triu.out", TORCH_FN(triangle_out<true>));
  m.impl("tril", TORCH_FN(triangle_functional<false>));
  m.impl("tril_", TORCH_FN(triangle_inplace<false>));
  m.impl("tril.out", TORCH_FN(triangle_out<false>));
}

}  // namespace spyre::torch_glue::ops
