// convolution on spyre dispatches to convolution_overrideable. Forward
// convolutions over one or two spatial dims (Mamba-style causal depthwise
// conv1d, ConvBERT's and SqueezeBERT's grouped convolutions, Nystromformer's
// depthwise conv2d) are written from other device ops, so they add no
// program kind of their own: the input is padded once, and each kernel tap
// is a view of it shifted by the tap's offset (strided by the stride).
//   depthwise (one input channel per group): the taps' views scaled by their
//     weights and summed, elementwise;
//   otherwise: the taps stacked into columns [N, groups, C_in/groups * taps,
//     L] and one batched matmul with the weights [groups, C_out/groups,
//     C_in/groups * taps].
// 16-bit inputs compute in fp32 and round once. im2col (nn.Unfold) is the
// stacked taps themselves. Transposed convolutions,
// more spatial dims and other dtypes run aten::convolution on the CPU (the
// CPU has no convolution_overrideable): the counted fallback.
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/im2col_ops.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// Depthwise convolutions sum their taps one launch pair each: beyond this
// many taps the columns and one matmul are fewer launches.
constexpr int64_t kMaxDepthwiseTaps = 128;

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

struct Geometry {
  int64_t spatial = 0;               // spatial dims: 1 or 2
  std::vector<int64_t> kernel, out;  // per spatial dim
  int64_t taps = 1;                  // product of the kernel sizes
};

bool on_device(const at::Tensor& input, const at::Tensor& weight,
               const std::optional<at::Tensor>& bias, bool transposed,
               int64_t groups) {
  const bool biased = bias.has_value() && bias->defined();
  if (transposed || groups < 1 || (input.dim() != 3 && input.dim() != 4) ||
      weight.dim() != input.dim() || !input.is_privateuseone() ||
      !weight.is_privateuseone() || !floating(input.scalar_type()) ||
      weight.scalar_type() != input.scalar_type()) {
    return false;
  }
  if (biased && (!bias->is_privateuseone() ||
                 bias->scalar_type() != input.scalar_type())) {
    return false;
  }
  return input.size(1) == weight.size(1) * groups &&
         weight.size(0) % groups == 0;
}

// Output sizes as PyTorch computes them; nullopt when one is not positive
// (the CPU's error then).
std::optional<Geometry> geometry(const at::Tensor& input,
                                 at::IntArrayRef kernel, at::IntArrayRef stride,
                                 at::IntArrayRef padding,
                                 at::IntArrayRef dilation) {
  Geometry g;
  g.spatial = input.dim() - 2;
  if (static_cast<int64_t>(kernel.size()) != g.spatial ||
      static_cast<int64_t>(stride.size()) != g.spatial ||
      static_cast<int64_t>(padding.size()) != g.spatial ||
      static_cast<int64_t>(dilation.size()) != g.spatial) {
    return std::nullopt;
  }
  for (int64_t i = 0; i < g.spatial; ++i) {
    const int64_t k = kernel[i];
    const int64_t span = dilation[i] * (k - 1) + 1;
    const int64_t o =
        (input.size(2 + i) + 2 * padding[i] - span) / stride[i] + 1;
    if (k < 1 || o <= 0 || stride[i] < 1 || dilation[i] < 1 || padding[i] < 0) {
      return std::nullopt;
    }
    g.kernel.push_back(k);
    g.out.push_back(o);
    g.taps *= k;
  }
  return g;
}

// The view of the padded input that kernel tap `tap` (flat, row-major
// over the kernel's dims) reads: [N, C_in, out...].
at::Tensor tap_view(const at::Tensor& padded, const Geometry& g, int64_t tap,
                    at::IntArrayRef stride, at::IntArrayRef dilation) {
  at::Tensor view = padded;
  for (int64_t i = g.spatial - 1; i >= 0; --i) {
    const int64_t k = tap % g.kernel[i];
    tap /= g.kernel[i];
    const int64_t start = k * dilation[i];
    view = view.slice(2 + i, start, start + stride[i] * (g.out[i] - 1) + 1,
                      stride[i]);
  }
  return view;
}

// Every tap's view, stacked: [N, C, taps, out...].
at::Tensor tap_columns(const at::Tensor& padded, const Geometry& g,
                       at::IntArrayRef stride, at::IntArrayRef dilation) {
  if (g.taps == 1) return tap_view(padded, g, 0, stride, dilation).unsqueeze(2);
  std::vector<at::Tensor> taps;
  for (int64_t t = 0; t < g.taps; ++t) {
    taps.push_back(tap_view(padded, g, t, stride, dilation));
  }
  return at::stack(taps, 2);
}

// The input padded with zeros on both sides of each spatial dim.
at::Tensor padded_input(const at::Tensor& x, at::IntArrayRef padding) {
  std::vector<int64_t> pads;  // constant_pad_nd: last dim first
  for (int64_t i = static_cast<int64_t>(padding.size()) - 1; i >= 0; --i) {
    pads.push_back(padding[i]);
    pads.push_back(padding[i]);
  }
  const bool padded_at_all =
      std::any_of(padding.begin(), padding.end(), [](int64_t p) { return p; });
  return padded_at_all ? at::constant_pad_nd(x, pads, 0) : x;
}

at::Tensor depthwise(const at::Tensor& padded, const at::Tensor& weight,
                     const Geometry& g, at::IntArrayRef stride,
                     at::IntArrayRef dilation, int64_t groups) {
  const int64_t n = padded.size(0), c_out = weight.size(0);
  const int64_t multiplier = c_out / groups;
  // weight [C_out, 1, k...] as one [1, C_out, 1...] factor per tap
  const at::Tensor factors = weight.reshape({c_out, g.taps});
  std::vector<int64_t> factor_shape(2 + g.spatial, 1);
  factor_shape[1] = c_out;
  std::vector<int64_t> out_shape{n, c_out};
  out_shape.insert(out_shape.end(), g.out.begin(), g.out.end());
  at::Tensor sum;
  for (int64_t t = 0; t < g.taps; ++t) {
    at::Tensor view = tap_view(padded, g, t, stride, dilation);
    if (multiplier > 1) {  // each input channel feeds `multiplier` outputs
      std::vector<int64_t> wide{n, groups, multiplier};
      wide.insert(wide.end(), g.out.begin(), g.out.end());
      view = view.unsqueeze(2).expand(wide).reshape(out_shape);
    }
    const at::Tensor term =
        at::mul(view, factors.select(1, t).reshape(factor_shape));
    sum = sum.defined() ? at::add(sum, term) : term;
  }
  return sum;
}

at::Tensor grouped(const at::Tensor& padded, const at::Tensor& weight,
                   const Geometry& g, at::IntArrayRef stride,
                   at::IntArrayRef dilation, int64_t groups) {
  const int64_t n = padded.size(0), c_out = weight.size(0);
  const int64_t c_group = weight.size(1);
  int64_t places = 1;
  for (int64_t o : g.out) places *= o;
  // Column (c, tap) of each group, as the weight's [C_out, C_in/groups,
  // k...] flattens.
  const at::Tensor columns =
      tap_columns(padded, g, stride, dilation)
          .reshape({n, groups, c_group * g.taps, places});
  const at::Tensor w =
      weight.reshape({groups, c_out / groups, c_group * g.taps});
  std::vector<int64_t> out_shape{n, c_out};
  out_shape.insert(out_shape.end(), g.out.begin(), g.out.end());
  return at::matmul(w, columns).reshape(out_shape);
}

at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups) {
  std::optional<Geometry> g;
  if (on_device(input, weight, bias, transposed, groups)) {
    g = geometry(input, weight.sizes().slice(2), stride, padding, dilation);
  }
  if (!g || input.numel() == 0) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::convolution>::call(input, weight, bias, stride,
                                                    padding, dilation,
                                                    transposed, output_padding,
                                                    groups);
  }
  const at::ScalarType dtype = input.scalar_type();
  const at::Tensor x = input.to(at::kFloat);
  const at::Tensor w = weight.to(at::kFloat);
  const at::Tensor padded = padded_input(x, padding);
  const bool one_channel_per_group = weight.size(1) == 1;
  at::Tensor out = one_channel_per_group && g->taps <= kMaxDepthwiseTaps
                       ? depthwise(padded, w, *g, stride, dilation, groups)
                       : grouped(padded, w, *g, stride, dilation, groups);
  if (bias.has_value() && bias->defined()) {
    std::vector<int64_t> bias_shape(2 + g->spatial, 1);
    bias_shape[1] = weight.size(0);
    out = at::add(out, bias->to(at::kFloat).reshape(bias_shape));
  }
  return out.to(dtype).contiguous();
}

// im2col (nn.Unfold: ConvBERT's span-based dynamic convolution): the taps'
// views stacked, [N, C * taps, L], channels outermost as the CPU orders
// them. Pure data movement; floating dtypes, as on the CPU (other dtypes
// get the CPU's error through the fallback).
at::Tensor& im2col_out(const at::Tensor& self, at::IntArrayRef kernel,
                       at::IntArrayRef dilation, at::IntArrayRef padding,
                       at::IntArrayRef stride, at::Tensor& out) {
  const bool batched = self.dim() == 4;
  std::optional<Geometry> g;
  if (self.is_privateuseone() && floating(self.scalar_type()) &&
      (self.dim() == 3 || batched) && self.numel() > 0) {
    const at::Tensor input = batched ? self : self.unsqueeze(0);
    g = geometry(input, kernel, stride, padding, dilation);
  }
  if (!g) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::im2col_out>::call(self, kernel, dilation,
                                                   padding, stride, out);
  }
  check_out_apart(out, {self});
  const at::Tensor input = batched ? self : self.unsqueeze(0);
  const at::Tensor columns =
      tap_columns(padded_input(input, padding), *g, stride, dilation)
          .reshape(
              {input.size(0), input.size(1) * g->taps, g->out[0] * g->out[1]});
  return write_result(batched ? columns : columns.squeeze(0), out);
}

at::Tensor im2col(const at::Tensor& self, at::IntArrayRef kernel,
                  at::IntArrayRef dilation, at::IntArrayRef padding,
                  at::IntArrayRef stride) {
  at::Tensor out = at::empty({0}, self.options());
  return im2col_out(self, kernel, dilation, padding, stride, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution_overrideable);
  m.impl("im2col", im2col);
  m.impl("im2col.out", im2col_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
