// 2-d pooling (Funnel Transformer pools its sequence with avg_pool2d and
// its attention mask with max_pool2d) written from other device ops, as
// convolution.cpp does: the input padded once, each window tap a strided
// view of it.
//   avg_pool2d: the taps summed in fp32 and divided by each window's
//     divisor as the CPU counts it (padding in or out, ceil-mode windows
//     clipped at the padded edge, divisor_override), rounded once;
//   max_pool2d_with_indices: a running maximum over the taps in the CPU's
//     order (row by row), a later tap taking over where it is larger or
//     NaN, as the CPU's loop does; indices into each input plane, a window
//     with only -inf keeping its first element inside the input.
// Other dtypes and invalid shapes take the counted CPU fallback (which
// raises the CPU's errors).
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add.h>
#include <ATen/ops/avg_pool2d_ops.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/max_pool2d_with_indices_ops.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// One spatial dim of a pooling: its sizes and the window placement.
struct Axis {
  int64_t in = 0, kernel = 1, stride = 1, pad = 0, dilation = 1, out = 0;

  int64_t start(int64_t o) const { return o * stride - pad; }
  // Padding needed after the input so every tap view is in range.
  int64_t pad_after() const {
    return std::max<int64_t>(
        0, (out - 1) * stride + dilation * (kernel - 1) + 1 - in - pad);
  }
};

// PyTorch's pooling output size; nullopt where the CPU would refuse.
std::optional<Axis> axis(int64_t in, int64_t kernel, int64_t stride,
                         int64_t pad, int64_t dilation, bool ceil_mode) {
  if (kernel < 1 || stride < 1 || dilation < 1 || pad < 0 || pad > kernel / 2) {
    return std::nullopt;
  }
  const int64_t span = dilation * (kernel - 1) + 1;
  const int64_t numerator = in + 2 * pad - span + (ceil_mode ? stride - 1 : 0);
  if (numerator < 0) return std::nullopt;
  int64_t out = numerator / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  if (out < 1) return std::nullopt;
  return Axis{in, kernel, stride, pad, dilation, out};
}

// kernel_size, stride (empty: the kernel), padding, dilation as two axes of
// the input's last two dims.
std::optional<std::array<Axis, 2>> axes(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  auto pick = [](at::IntArrayRef v, size_t i, int64_t fallback) {
    return v.empty() ? fallback : v[v.size() == 1 ? 0 : i];
  };
  if ((self.dim() != 3 && self.dim() != 4) || kernel.empty() ||
      kernel.size() > 2 || stride.size() > 2 || padding.size() > 2 ||
      dilation.size() > 2) {
    return std::nullopt;
  }
  std::array<Axis, 2> result;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t k = pick(kernel, i, 1);
    auto a = axis(self.size(self.dim() - 2 + i), k, pick(stride, i, k),
                  pick(padding, i, 0), pick(dilation, i, 1), ceil_mode);
    if (!a) return std::nullopt;
    result[i] = *a;
  }
  return result;
}

// The input padded with `value` so that every tap's view is in range.
at::Tensor padded_input(const at::Tensor& x, const std::array<Axis, 2>& a,
                        double value) {
  return at::constant_pad_nd(
      x, {a[1].pad, a[1].pad_after(), a[0].pad, a[0].pad_after()}, value);
}

at::Tensor tap_view(const at::Tensor& padded, const std::array<Axis, 2>& a,
                    int64_t kh, int64_t kw) {
  const int64_t h = kh * a[0].dilation, w = kw * a[1].dilation;
  return padded.slice(-2, h, h + a[0].stride * (a[0].out - 1) + 1, a[0].stride)
      .slice(-1, w, w + a[1].stride * (a[1].out - 1) + 1, a[1].stride);
}

// A [out_h, out_w] table computed on the host from the shapes alone.
template <class T, class F>
at::Tensor table(const std::array<Axis, 2>& a, at::ScalarType dtype,
                 const at::Device& device, F value) {
  std::vector<T> values;
  for (int64_t oh = 0; oh < a[0].out; ++oh) {
    for (int64_t ow = 0; ow < a[1].out; ++ow) values.push_back(value(oh, ow));
  }
  return at::tensor(values, at::TensorOptions().dtype(dtype))
      .reshape({a[0].out, a[1].out})
      .to(device);
}

// ---- avg_pool2d ------------------------------------------------------------

at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef kernel,
                           at::IntArrayRef stride, at::IntArrayRef padding,
                           bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override,
                           at::Tensor& out) {
  std::optional<std::array<Axis, 2>> a;
  if (self.is_privateuseone() && floating(self.scalar_type()) &&
      self.numel() > 0 && (!divisor_override || *divisor_override != 0)) {
    a = axes(self, kernel, stride, padding, {}, ceil_mode);
  }
  if (!a) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::avg_pool2d_out>::call(self, kernel, stride,
                                                       padding, ceil_mode,
                                                       count_include_pad,
                                                       divisor_override, out);
  }
  check_out_apart(out, {self});
  const at::Tensor padded = padded_input(self.to(at::kFloat), *a, 0);
  at::Tensor sum;
  for (int64_t kh = 0; kh < (*a)[0].kernel; ++kh) {
    for (int64_t kw = 0; kw < (*a)[1].kernel; ++kw) {
      const at::Tensor tap = tap_view(padded, *a, kh, kw);
      sum = sum.defined() ? at::add(sum, tap) : tap;
    }
  }
  // Each window's divisor as the CPU counts it: the window clipped to the
  // padded input (count_include_pad), or further to the input itself.
  auto extent = [&](const Axis& x, int64_t o) {
    const int64_t start = x.start(o);
    const int64_t end = std::min(start + x.kernel, x.in + x.pad);
    if (count_include_pad) return end - start;
    return std::min(end, x.in) - std::max<int64_t>(start, 0);
  };
  const at::Tensor divisor =
      table<float>(*a, at::kFloat, self.device(), [&](int64_t oh, int64_t ow) {
        return static_cast<float>(divisor_override ? *divisor_override
                                                   : extent((*a)[0], oh) *
                                                         extent((*a)[1], ow));
      });
  return write_result(at::div(sum, divisor).to(self.scalar_type()), out);
}

at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel,
                      at::IntArrayRef stride, at::IntArrayRef padding,
                      bool ceil_mode, bool count_include_pad,
                      std::optional<int64_t> divisor_override) {
  at::Tensor out = at::empty({0}, self.options());
  return avg_pool2d_out(self, kernel, stride, padding, ceil_mode,
                        count_include_pad, divisor_override, out);
}

// ---- max_pool2d_with_indices -----------------------------------------------

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_with_indices_out(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
    at::Tensor& out, at::Tensor& indices) {
  std::optional<std::array<Axis, 2>> a;
  if (self.is_privateuseone() && floating(self.scalar_type()) &&
      self.numel() > 0) {
    a = axes(self, kernel, stride, padding, dilation, ceil_mode);
  }
  if (!a) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::max_pool2d_with_indices_out>::call(self,
                                                                    kernel,
                                                                    stride,
                                                                    padding,
                                                                    dilation,
                                                                    ceil_mode,
                                                                    out,
                                                                    indices);
  }
  check_out_apart(out, {self});
  check_out_apart(indices, {self});
  const Axis& rows = (*a)[0];
  const Axis& cols = (*a)[1];
  const double lowest = -std::numeric_limits<double>::infinity();
  const at::Tensor padded = padded_input(self, *a, lowest);
  // The CPU starts each window at its first element inside the input.
  auto first_inside = [](const Axis& x, int64_t o) {
    int64_t start = x.start(o);
    while (start < 0) start += x.dilation;
    return start;
  };
  at::Tensor index =
      table<int64_t>(*a, at::kLong, self.device(), [&](int64_t oh, int64_t ow) {
        return first_inside(rows, oh) * cols.in + first_inside(cols, ow);
      });
  // Tap (kh, kw)'s element of each window: its top-left corner plus the
  // tap's offset.
  const at::Tensor corner =
      table<int64_t>(*a, at::kLong, self.device(), [&](int64_t oh, int64_t ow) {
        return rows.start(oh) * cols.in + cols.start(ow);
      });
  std::vector<int64_t> out_shape = self.sizes().vec();
  out_shape[self.dim() - 2] = rows.out;
  out_shape[self.dim() - 1] = cols.out;
  at::Tensor best = at::full(out_shape, lowest, self.options());
  index = index.expand(out_shape);
  for (int64_t kh = 0; kh < rows.kernel; ++kh) {
    for (int64_t kw = 0; kw < cols.kernel; ++kw) {
      const at::Tensor tap = tap_view(padded, *a, kh, kw);
      const at::Tensor takes =
          at::logical_or(at::gt(tap, best), at::isnan(tap));
      best = at::where(takes, tap, best);
      const int64_t offset = kh * rows.dilation * cols.in + kw * cols.dilation;
      index = at::where(takes, at::add(corner, offset), index);
    }
  }
  write_result(best, out);
  write_result(index, indices);
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(
    const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  at::Tensor out = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  max_pool2d_with_indices_out(self, kernel, stride, padding, dilation,
                              ceil_mode, out, indices);
  return {out, indices};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("avg_pool2d", avg_pool2d);
  m.impl("avg_pool2d.out", avg_pool2d_out);
  m.impl("max_pool2d_with_indices", max_pool2d_with_indices);
  m.impl("max_pool2d_with_indices.out", max_pool2d_with_indices_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
