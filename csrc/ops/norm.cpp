// Layer norm and RMS norm as device programs (kernels/norm.h):
// layer_norm (what nn.LayerNorm and F.layer_norm reach; without autograd
// one kernel that writes no statistics), native_layer_norm, rms_norm and
// _fused_rms_norm (F.rms_norm reaches rms_norm, which PyTorch only routes to
// _fused_rms_norm on its own devices; both are registered). Normalised over
// the last dims: several are flattened into one (a materialized reshape).
// fp16, bf16 and fp32; statistics in the input's dtype as on the CPU.
#include "spyre/kernels/norm.h"

#include <ATen/core/grad_mode.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_fused_rms_norm_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <limits>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"

namespace spyre::torch_glue::ops {
namespace {

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// Whether the norm's statistics can be written in their own layout: a
// block of whole sticks of their rows fits the scratchpad. Found by
// planning the kernel once per shape.
bool stats_fit_inline(const kernels::NormShape& shape,
                      const kernels::NormOptions& options) {
  kernels::KeyWriter key;
  key.add(options.rms).add(options.target.scratchpad_budget());
  append_key(key, shape.in);
  append_key(key, *shape.rstd);
  key.add(shape.weight.has_value()).add(shape.bias.has_value());
  static std::mutex mutex;
  static std::unordered_map<std::string, bool> fits;
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = fits.try_emplace(std::string(key.bytes()), true);
  if (inserted) {
    try {
      kernels::build_norm(shape, options);
    } catch (const kernels::LoopKernelTooLarge&) {
      it->second = false;
    }
  }
  return it->second;
}

struct NormResult {
  at::Tensor out, mean, rstd;  // stats in the input dims minus the normed ones
};

// Normalises `input` over its last `normed` dims; the statistics (mean and
// rstd; RMS norm: rstd) only `with_stats`.
NormResult run_norm(const at::Tensor& input, int64_t normed,
                    const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, double eps, bool rms,
                    bool with_stats = true) {
  const int64_t outer_dims = input.dim() - normed;
  const std::vector<int64_t> outer(input.sizes().begin(),
                                   input.sizes().begin() + outer_dims);
  int64_t cols = 1;
  for (int64_t d = outer_dims; d < input.dim(); ++d) cols *= input.size(d);
  // Size-1 outer dims are dropped for the kernel: stats laid out with
  // their last dim along sticks.
  std::vector<int64_t> rows_shape, squeezed_outer;
  for (int64_t size : outer) {
    if (size != 1) squeezed_outer.push_back(size);
  }
  rows_shape = squeezed_outer;
  rows_shape.push_back(cols);
  const auto tensor_options = input.options().memory_format(std::nullopt);
  NormResult r;
  r.out = at::empty(input.sizes(), tensor_options);
  if (with_stats && !rms) r.mean = at::empty(squeezed_outer, tensor_options);
  if (with_stats) r.rstd = at::empty(squeezed_outer, tensor_options);
  if (input.numel() == 0) {
    if (with_stats && !rms && r.mean.numel() > 0) {
      r.mean.fill_(std::numeric_limits<double>::quiet_NaN());
      r.rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return r;
  }
  at::Tensor x = input.reshape(rows_shape);
  kernels::NormShape shape;
  shape.in = matrix_operand(x, 0);
  // Several normalised dims flattened into one row: the output's own layout
  // pads its last dim, so that row is no matrix view of it. Write a flat
  // tensor then and copy it into the output's layout.
  at::Tensor out2 = r.out.view(rows_shape);
  std::optional<kernels::Matrix> out_view = matrix_view(out2, 0);
  const bool out_direct = out_view.has_value();
  if (!out_direct) {
    out2 = at::empty(rows_shape, tensor_options);
    out_view = matrix_view(out2, 0);
  }
  shape.out = *out_view;
  std::vector<at::Tensor> args{x, out2};
  auto vector_arg = [&](const at::Tensor& t) {
    at::Tensor flat = t.reshape({1, cols});
    kernels::Matrix m = matrix_operand(flat, 0);
    args.push_back(flat);
    return m;
  };
  if (weight && weight->defined()) shape.weight = vector_arg(*weight);
  if (bias && bias->defined()) shape.bias = vector_arg(*bias);
  kernels::NormOptions options;
  options.target = {device_chip(x.device().index())};
  options.rms = rms;
  options.eps = eps;
  // The statistics in their own layout (the last outer dim along sticks)
  // need blocks of whole sticks of rows; for wide rows those do not fit the
  // scratchpad, and the kernel writes them one value per stick instead (a
  // scratch [rows, E], column 0), copied into place after.
  struct Stat {
    at::Tensor result, written;
    std::optional<kernels::Matrix>* operand;
  };
  std::vector<Stat> stats;
  if (r.mean.defined()) stats.push_back({r.mean, r.mean, &shape.mean});
  if (r.rstd.defined()) stats.push_back({r.rstd, r.rstd, &shape.rstd});
  const auto place_stats = [&](bool in_own_layout) {
    for (Stat& stat : stats) {
      stat.written = stat.result;
      if (!in_own_layout) {
        const int64_t per_stick =
            rt::elements_per_stick(device_dtype(stat.result.scalar_type()));
        stat.written = at::empty({x.numel() / cols, per_stick}, tensor_options)
                           .narrow(1, 0, 1);
      }
      *stat.operand = *matrix_view(stat.written, 0);
    }
  };
  place_stats(true);
  if (!stats.empty() && !stats_fit_inline(shape, options)) place_stats(false);
  for (const Stat& stat : stats) args.push_back(stat.written);
  kernels::KeyWriter key;
  key.add("norm").add(rms).add(eps);
  for (const auto* m : {&shape.in, &shape.out}) append_key(key, *m);
  for (const auto* m : {&shape.weight, &shape.bias, &shape.mean, &shape.rstd}) {
    key.add(m->has_value());
    if (m->has_value()) append_key(key, **m);
  }
  launch_cached(
      input.device().index(), ProgramKey(std::move(key)),
      [&] { return kernels::build_norm(shape, options); }, args);
  for (const Stat& stat : stats) {
    if (!stat.written.is_same(stat.result)) {
      device_copy(stat.written.view(stat.result.sizes()), stat.result);
    }
  }
  if (!out_direct) device_copy(out2.view(input.sizes()), r.out);
  return r;
}

std::vector<int64_t> keep_shape(const at::Tensor& input, int64_t normed) {
  std::vector<int64_t> shape = input.sizes().vec();
  for (int64_t d = input.dim() - normed; d < input.dim(); ++d) shape[d] = 1;
  return shape;
}

void check_normalized_shape(const at::Tensor& input, at::IntArrayRef shape,
                            const char* op) {
  const int64_t n = static_cast<int64_t>(shape.size());
  TORCH_CHECK(n >= 1, op, ": normalized_shape must have at least one dim");
  TORCH_CHECK(
      input.dim() >= n && input.sizes().slice(input.dim() - n).equals(shape),
      "Given normalized_shape=", shape, ", expected input with shape [*, ",
      shape, "], but got input of size", input.sizes());
}

bool params_ok(const at::Tensor& input, const std::optional<at::Tensor>& p) {
  return !p || !p->defined() || p->scalar_type() == input.scalar_type();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_kernel(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps) {
  const auto normalized_shape =
      c10::asIntArrayRefUnchecked(normalized_shape_sym);
  check_normalized_shape(input, normalized_shape, "layer_norm");
  if (!floating(input.scalar_type()) || !params_ok(input, weight) ||
      !params_ok(input, bias)) {
    return at::native::call_fallback_fn_symint<
        &cpu_fallback, at::_ops::native_layer_norm>::call(input,
                                                          normalized_shape_sym,
                                                          weight, bias, eps);
  }
  const int64_t normed = static_cast<int64_t>(normalized_shape.size());
  NormResult r = run_norm(input, normed, weight, bias, eps, false);
  const auto stats = keep_shape(input, normed);
  return {r.out, r.mean.reshape(stats), r.rstd.reshape(stats)};
}

// layer_norm is composite (native_layer_norm, its output kept): run as one
// kernel that writes no statistics, unless autograd or a tracer must see
// native_layer_norm (which saves them for the backward).
at::Tensor layer_norm_kernel(const at::Tensor& input,
                             c10::SymIntArrayRef normalized_shape_sym,
                             const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps,
                             bool /*cudnn_enable*/) {
  const auto normalized_shape =
      c10::asIntArrayRefUnchecked(normalized_shape_sym);
  check_normalized_shape(input, normalized_shape, "layer_norm");
  if (!floating(input.scalar_type()) || !params_ok(input, weight) ||
      !params_ok(input, bias)) {
    return std::get<0>(at::_ops::native_layer_norm::call(
        input, normalized_shape_sym, weight, bias, eps));
  }
  return run_norm(input, static_cast<int64_t>(normalized_shape.size()), weight,
                  bias, eps, false, false)
      .out;
}

at::Tensor layer_norm_autograd_kernel(const at::Tensor& input,
                                      c10::SymIntArrayRef normalized_shape,
                                      const std::optional<at::Tensor>& weight,
                                      const std::optional<at::Tensor>& bias,
                                      double eps, bool cudnn_enable) {
  if (composite_must_decompose(
          {&input, weight ? &*weight : nullptr, bias ? &*bias : nullptr})) {
    return std::get<0>(at::_ops::native_layer_norm::call(
        input, normalized_shape, weight, bias, eps));
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return layer_norm_kernel(input, normalized_shape, weight, bias, eps,
                           cudnn_enable);
}

double rms_eps(const at::Tensor& input, std::optional<double> eps) {
  if (eps) return *eps;
  return input.scalar_type() == at::kHalf       ? 0.0009765625
         : input.scalar_type() == at::kBFloat16 ? 0.0078125
                                                : 1.1920928955078125e-07;
}

std::tuple<at::Tensor, at::Tensor> fused_rms_norm_kernel(
    const at::Tensor& input, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  check_normalized_shape(input, normalized_shape, "rms_norm");
  if (!floating(input.scalar_type()) || !params_ok(input, weight)) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::_fused_rms_norm>::call(input, normalized_shape,
                                                        weight, eps);
  }
  const int64_t normed = static_cast<int64_t>(normalized_shape.size());
  NormResult r =
      run_norm(input, normed, weight, std::nullopt, rms_eps(input, eps), true);
  return {r.out, r.rstd.reshape(keep_shape(input, normed))};
}

// PyTorch's decomposition of rms_norm (in the input's opmath dtype), for
// autograd: each step records its graph.
at::Tensor rms_norm_decomposed(const at::Tensor& input,
                               c10::SymIntArrayRef normalized_shape,
                               const std::optional<at::Tensor>& weight,
                               std::optional<double> eps) {
  const auto shape = c10::asIntArrayRefUnchecked(normalized_shape);
  check_normalized_shape(input, shape, "rms_norm");
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    dims.push_back(input.dim() - 1 - i);
  }
  const bool upcast =
      input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const at::Tensor x = upcast ? input.to(at::kFloat) : input;
  at::Tensor r =
      x.mul(x.pow(2).mean(dims, true).add(rms_eps(input, eps)).rsqrt());
  if (upcast) r = r.to(input.scalar_type());
  if (weight && weight->defined()) r = r.mul(*weight);
  return r;
}

at::Tensor rms_norm_kernel(const at::Tensor& input,
                           c10::SymIntArrayRef normalized_shape,
                           const std::optional<at::Tensor>& weight,
                           std::optional<double> eps) {
  if (!floating(input.scalar_type()) || !params_ok(input, weight)) {
    return rms_norm_decomposed(input, normalized_shape, weight, eps);
  }
  const auto shape = c10::asIntArrayRefUnchecked(normalized_shape);
  check_normalized_shape(input, shape, "rms_norm");
  // rms_norm returns no statistics: the kernel writes none
  return run_norm(input, static_cast<int64_t>(shape.size()), weight,
                  std::nullopt, rms_eps(input, eps), true, false)
      .out;
}

// rms_norm is composite: keep PyTorch's decomposition where autograd or a
// tracer must see its parts.
at::Tensor rms_norm_autograd_kernel(const at::Tensor& input,
                                    c10::SymIntArrayRef normalized_shape,
                                    const std::optional<at::Tensor>& weight,
                                    std::optional<double> eps) {
  if (composite_must_decompose({&input, weight ? &*weight : nullptr})) {
    return rms_norm_decomposed(input, normalized_shape, weight, eps);
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return rms_norm_kernel(input, normalized_shape, weight, eps);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_layer_norm", native_layer_norm_kernel);
  m.impl("layer_norm", layer_norm_kernel);
  m.impl("_fused_rms_norm", fused_rms_norm_kernel);
  m.impl("rms_norm", rms_norm_kernel);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("rms_norm", rms_norm_autograd_kernel);
  m.impl("layer_norm", layer_norm_autograd_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
