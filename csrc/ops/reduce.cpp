// Reductions as device programs (kernels/reduce.h): sum, mean, prod, amax,
// amin, argmax, argmin, var, std over any dims, keepdim, full reductions.
// A reduction over several dims is a chain of launches, one dim each (the
// stick dim first), with fp32 partials between them and one rounding into
// the result dtype at the end (mean's 1/n folded into that last step).
// var/std: two passes (mean, then the mean of squared deviations) in fp32.
// Floating dtypes (fp16, bf16, fp32) run on the device; others go to the
// counted CPU fallback.
#include "spyre/kernels/reduce.h"

#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/amin_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/argmin_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/prod_ops.h>
#include <ATen/ops/std_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/var_ops.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"
#include "spyre/kernels/program_builder.h"

namespace spyre::torch_glue::ops {
namespace {

using kernels::ReduceOp;

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// Integer data reduces in int64 on the device (exact, wrapping as int64
// tensors do): sums, extremes and their indices of token ids and masks.
bool integer(at::ScalarType t) {
  return t == at::kLong || t == at::kInt || t == at::kChar || t == at::kByte ||
         t == at::kShort;
}

bool reducible(at::ScalarType t) {
  return (floating(t) || integer(t)) && has_device_dtype(t);
}

// Reduced dims, sorted, without repeats; none named means all.
std::vector<int64_t> reduced_dims(const at::Tensor& x,
                                  at::OptionalIntArrayRef dim) {
  const int64_t n = x.dim();
  std::vector<int64_t> dims;
  if (!dim.has_value() || dim->empty()) {
    for (int64_t d = 0; d < std::max<int64_t>(n, 1); ++d) dims.push_back(d);
    return dims;
  }
  const auto mask = at::dim_list_to_bitset(*dim, std::max<int64_t>(n, 1));
  for (int64_t d = 0; d < std::max<int64_t>(n, 1); ++d) {
    if (mask[d]) dims.push_back(d);
  }
  return dims;
}

std::vector<int64_t> shape_without(const at::Tensor& x,
                                   const std::vector<int64_t>& dims) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      shape.push_back(x.size(d));
    }
  }
  return shape;
}

at::Tensor keep_dims(at::Tensor result, const std::vector<int64_t>& dims,
                     int64_t input_dim) {
  if (input_dim == 0) return result;
  for (int64_t d : dims) result = result.unsqueeze(d);
  return result;
}

// One launch: `x` reduced along its last dim (along sticks) or along dim
// `d` (along rows) into a fresh tensor of `dtype`.
at::Tensor reduce_one(at::Tensor x, int64_t d, ReduceOp op,
                      at::ScalarType dtype, double scale) {
  const int64_t n = x.dim();
  const bool along_sticks = d == n - 1;
  at::Tensor out =
      at::empty(shape_without(x, {d}),
                x.options().dtype(dtype).memory_format(std::nullopt));
  std::optional<kernels::Matrix> in;
  auto view = [&]() {
    if (along_sticks) return matrix_view(x, 0);
    std::vector<int64_t> rows = dims_except(n - 1, {d});
    rows.push_back(d);
    return matrix_view(x, {}, rows);
  };
  in = view();
  if (!in) {
    x = materialize(x);
    in = view();
  }
  const kernels::Matrix out_m = *matrix_view(out, 0);
  kernels::KeyWriter key;
  key.add("reduce").add(op).add(along_sticks).add(scale);
  append_key(key, *in);
  append_key(key, out_m);
  launch_cached(
      x.device().index(), ProgramKey(std::move(key)),
      [&] {
        kernels::ReduceOptions options;
        options.target = {device_chip(x.device().index())};
        options.scale = scale;
        return along_sticks
                   ? kernels::build_reduce_along_sticks(*in, out_m, op, options)
                   : kernels::build_reduce_along_rows(*in, out_m, op, options);
      },
      {x, out});
  return out;
}

// `x` reduced over `dims` (sorted) by `op`, non-keepdim shape, `dtype`.
at::Tensor reduce_dims(at::Tensor x, std::vector<int64_t> dims, ReduceOp op,
                       at::ScalarType dtype, double scale) {
  if (x.dim() == 0) {
    x = x.reshape({1});
    dims = {0};
  }
  std::sort(dims.rbegin(), dims.rend());  // highest first: indices stay valid
  for (size_t i = 0; i < dims.size(); ++i) {
    const bool last = i + 1 == dims.size();
    const bool exact =
        kernels::is_arg_reduction(op) || integer(x.scalar_type());
    const at::ScalarType step_dtype =
        last ? dtype : (exact ? at::kLong : at::kFloat);
    x = reduce_one(x, dims[i], op, step_dtype, last ? scale : 1);
  }
  return x;
}

int64_t count_of(const at::Tensor& x, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.dim() == 0 ? 1 : x.size(d);
  return n;
}

// The reduction of a non-empty `self` over `dims`, each result scaled by
// `factor`, in the shape without those dims. Size-1 dims take no part (and
// would leave results whose last dim is not along sticks): the squeezed
// tensor is reduced and the result viewed back.
at::Tensor reduce_nonempty(const at::Tensor& self,
                           const std::vector<int64_t>& dims, ReduceOp op,
                           at::ScalarType dtype, double factor) {
  const std::vector<int64_t> shape = shape_without(self, dims);
  std::vector<int64_t> kept_sizes, squeezed_dims;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.size(d) == 1) continue;
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      squeezed_dims.push_back(static_cast<int64_t>(kept_sizes.size()));
    }
    kept_sizes.push_back(self.size(d));
  }
  const at::Tensor squeezed = self.reshape(kept_sizes);
  if (!squeezed_dims.empty()) {
    return reduce_dims(squeezed, squeezed_dims, op, dtype, factor)
        .reshape(shape);
  }
  // Only size-1 dims reduced: each result is its one element.
  if (kernels::is_arg_reduction(op)) {
    return at::empty(shape, self.options().dtype(dtype)).zero_();
  }
  return (factor != 1.0 ? squeezed.mul(factor) : squeezed)
      .to(dtype)
      .reshape(shape);
}

// The reduction of an op with an identity (sum, prod, mean) or none.
at::Tensor reduce(const at::Tensor& self, at::OptionalIntArrayRef dim,
                  bool keepdim, ReduceOp op, at::ScalarType dtype, bool mean,
                  const char* name) {
  const std::vector<int64_t> dims = reduced_dims(self, dim);
  const int64_t count = count_of(self, dims);
  at::Tensor result;
  if (count == 0 || self.numel() == 0) {
    const bool has_identity = op == ReduceOp::kSum || op == ReduceOp::kProd;
    const bool dims_named = dim.has_value() && !dim->empty();
    TORCH_CHECK(has_identity || count != 0 || dims_named, name,
                "(): Expected reduction dim to be specified for "
                "input.numel() == 0. Specify the reduction dim with the 'dim' "
                "argument.");
    // As the CPU: an IndexError naming the first empty reduced dim.
    for (int64_t d : dims) {
      TORCH_CHECK_INDEX(has_identity || self.dim() == 0 || self.size(d) != 0,
                        name, "(): Expected reduction dim ", d,
                        " to have non-zero size.");
    }
    const auto options =
        self.options().dtype(dtype).memory_format(std::nullopt);
    result = at::empty(shape_without(self, dims), options);
    if (result.numel() > 0) {
      result.fill_(mean ? std::numeric_limits<double>::quiet_NaN()
                        : (op == ReduceOp::kProd ? 1.0 : 0.0));
    }
  } else {
    const double factor = mean ? 1.0 / static_cast<double>(count) : 1.0;
    result = reduce_nonempty(self, dims, op, dtype, factor);
  }
  return keepdim ? keep_dims(result, dims, self.dim()) : result;
}

at::ScalarType result_dtype(const at::Tensor& self,
                            std::optional<at::ScalarType> dtype) {
  return dtype.value_or(self.scalar_type());
}

// sum's result dtype: integers (and bool) sum into int64, as in PyTorch.
at::ScalarType sum_dtype(const at::Tensor& self,
                         std::optional<at::ScalarType> dtype) {
  if (dtype.has_value()) return *dtype;
  return integer(self.scalar_type()) ? at::kLong : self.scalar_type();
}

// Counts of true elements (masks summed into lengths) as fp32 sums, exact
// while no count can pass 2^24.
bool countable(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return self.scalar_type() == at::kBool &&
         dtype.value_or(at::kLong) == at::kLong && self.numel() <= (1 << 24);
}

at::Tensor sum_dim_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          bool keepdim, std::optional<at::ScalarType> dtype) {
  if (countable(self, dtype)) {
    return reduce(self.to(at::kFloat), dim, keepdim, ReduceOp::kSum, at::kFloat,
                  false, "sum")
        .to(at::kLong);
  }
  const at::ScalarType result = sum_dtype(self, dtype);
  const bool exact = integer(self.scalar_type()) && result == at::kLong;
  const bool floats = floating(self.scalar_type()) && floating(result);
  if (!(exact || floats) || !reducible(self.scalar_type())) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::sum_dim_IntList>::call(self, dim, keepdim,
                                                        dtype);
  }
  return reduce(self, dim, keepdim, ReduceOp::kSum, result, false, "sum");
}

at::Tensor sum_kernel(const at::Tensor& self,
                      std::optional<at::ScalarType> dtype) {
  return sum_dim_kernel(self, std::nullopt, false, dtype);
}

at::Tensor& sum_out_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                           bool keepdim, std::optional<at::ScalarType> dtype,
                           at::Tensor& out) {
  check_out_apart(out, {self});
  at::Tensor r =
      sum_dim_kernel(self, dim, keepdim, dtype.value_or(out.scalar_type()));
  return write_result(r, out);
}

at::Tensor mean_dim_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                           bool keepdim, std::optional<at::ScalarType> dtype) {
  if (!floating(self.scalar_type()) || !floating(result_dtype(self, dtype))) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::mean_dim>::call(self, dim,
                                                                  keepdim,
                                                                  dtype);
  }
  return reduce(self, dim, keepdim, ReduceOp::kSum, result_dtype(self, dtype),
                true, "mean");
}

at::Tensor mean_kernel(const at::Tensor& self,
                       std::optional<at::ScalarType> dtype) {
  return mean_dim_kernel(self, std::nullopt, false, dtype);
}

at::Tensor& mean_out_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                            bool keepdim, std::optional<at::ScalarType> dtype,
                            at::Tensor& out) {
  check_out_apart(out, {self});
  at::Tensor r =
      mean_dim_kernel(self, dim, keepdim, dtype.value_or(out.scalar_type()));
  return write_result(r, out);
}

at::Tensor prod_dim_kernel(const at::Tensor& self, int64_t dim, bool keepdim,
                           std::optional<at::ScalarType> dtype) {
  if (!floating(self.scalar_type()) || !floating(result_dtype(self, dtype))) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::prod_dim_int>::call(self, dim,
                                                                      keepdim,
                                                                      dtype);
  }
  return reduce(self, at::IntArrayRef{dim}, keepdim, ReduceOp::kProd,
                result_dtype(self, dtype), false, "prod");
}

at::Tensor prod_kernel(const at::Tensor& self,
                       std::optional<at::ScalarType> dtype) {
  if (!floating(self.scalar_type()) || !floating(result_dtype(self, dtype))) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::prod>::call(
        self, dtype);
  }
  return reduce(self, std::nullopt, false, ReduceOp::kProd,
                result_dtype(self, dtype), false, "prod");
}

at::Tensor amax_kernel(const at::Tensor& self, at::IntArrayRef dim,
                       bool keepdim) {
  if (!reducible(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::amax>::call(
        self, dim, keepdim);
  }
  return reduce(self, dim, keepdim, ReduceOp::kMax, self.scalar_type(), false,
                "amax");
}

at::Tensor amin_kernel(const at::Tensor& self, at::IntArrayRef dim,
                       bool keepdim) {
  if (!reducible(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::amin>::call(
        self, dim, keepdim);
  }
  return reduce(self, dim, keepdim, ReduceOp::kMin, self.scalar_type(), false,
                "amin");
}

at::Tensor& amax_out_kernel(const at::Tensor& self, at::IntArrayRef dim,
                            bool keepdim, at::Tensor& out) {
  check_out_apart(out, {self});
  at::Tensor r = amax_kernel(self, dim, keepdim);
  return write_result(r, out);
}

at::Tensor& amin_out_kernel(const at::Tensor& self, at::IntArrayRef dim,
                            bool keepdim, at::Tensor& out) {
  check_out_apart(out, {self});
  at::Tensor r = amin_kernel(self, dim, keepdim);
  return write_result(r, out);
}

template <class Op>
at::Tensor arg_reduce(const at::Tensor& self, std::optional<int64_t> dim,
                      bool keepdim, ReduceOp op, const char* name) {
  if (!reducible(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, dim,
                                                                 keepdim);
  }
  if (!dim.has_value()) {
    // Indices into the flattened tensor.
    at::Tensor flat = self.reshape({-1});
    at::Tensor r =
        reduce(flat, at::IntArrayRef{0}, false, op, at::kLong, false, name);
    if (!keepdim || self.dim() == 0) return r;
    return r.reshape(std::vector<int64_t>(self.dim(), 1));
  }
  TORCH_CHECK_INDEX(
      self.dim() == 0 || self.size(at::maybe_wrap_dim(*dim, self.dim())) > 0,
      name, "(): Expected reduction dim ", *dim, " to have non-zero size.");
  const int64_t d = at::maybe_wrap_dim(*dim, std::max<int64_t>(self.dim(), 1));
  try {
    return reduce(self, at::IntArrayRef{d}, keepdim, op, at::kLong, false,
                  name);
  } catch (const kernels::KernelBuildError&) {
    // The reduced extent does not fit one scratchpad tile.
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self, dim,
                                                                 keepdim);
  }
}

at::Tensor argmax_kernel(const at::Tensor& self, std::optional<int64_t> dim,
                         bool keepdim) {
  return arg_reduce<at::_ops::argmax>(self, dim, keepdim, ReduceOp::kArgMax,
                                      "argmax");
}

at::Tensor argmin_kernel(const at::Tensor& self, std::optional<int64_t> dim,
                         bool keepdim) {
  return arg_reduce<at::_ops::argmin>(self, dim, keepdim, ReduceOp::kArgMin,
                                      "argmin");
}

// Variance in fp32: mean, then the scaled sum of squared deviations.
at::Tensor variance(const at::Tensor& self, at::OptionalIntArrayRef dim,
                    const std::optional<at::Scalar>& correction, bool keepdim) {
  const std::vector<int64_t> dims = reduced_dims(self, dim);
  const int64_t count = count_of(self, dims);
  const double c = correction ? correction->toDouble() : 1.0;
  const at::Tensor x =
      self.scalar_type() == at::kFloat ? self : self.to(at::kFloat);
  at::Tensor m = reduce(x, dim, true, ReduceOp::kSum, at::kFloat, true, "var");
  at::Tensor dev = x.sub(m);
  at::Tensor sq = dev.mul(dev);
  at::Tensor v =
      reduce_nonempty(sq, dims, ReduceOp::kSum, at::kFloat,
                      1.0 / std::max(0.0, static_cast<double>(count) - c));
  return keepdim ? keep_dims(v, dims, self.dim()) : v;
}

bool var_on_device(const at::Tensor& self) {
  return floating(self.scalar_type()) && self.numel() > 0;
}

at::Tensor var_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                      const std::optional<at::Scalar>& correction,
                      bool keepdim) {
  if (!var_on_device(self)) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::var_correction>::call(self, dim, correction,
                                                       keepdim);
  }
  return variance(self, dim, correction, keepdim).to(self.scalar_type());
}

at::Tensor std_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                      const std::optional<at::Scalar>& correction,
                      bool keepdim) {
  if (!var_on_device(self)) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::std_correction>::call(self, dim, correction,
                                                       keepdim);
  }
  return variance(self, dim, correction, keepdim).sqrt().to(self.scalar_type());
}

// max() and min() of a whole tensor (no dim): its extreme, as amax/amin.
template <bool kMax>
at::Tensor extreme_kernel(const at::Tensor& self) {
  if (!reducible(self.scalar_type())) {
    using Op = std::conditional_t<kMax, at::_ops::max, at::_ops::min>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(self);
  }
  return reduce(self, std::nullopt, false,
                kMax ? ReduceOp::kMax : ReduceOp::kMin, self.scalar_type(),
                false, kMax ? "max" : "min");
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max", extreme_kernel<true>);
  m.impl("min", extreme_kernel<false>);
  m.impl("sum", sum_kernel);
  m.impl("sum.dim_IntList", sum_dim_kernel);
  m.impl("sum.IntList_out", sum_out_kernel);
  m.impl("mean", mean_kernel);
  m.impl("mean.dim", mean_dim_kernel);
  m.impl("mean.out", mean_out_kernel);
  m.impl("prod", prod_kernel);
  m.impl("prod.dim_int", prod_dim_kernel);
  m.impl("amax", amax_kernel);
  m.impl("amax.out", amax_out_kernel);
  m.impl("amin", amin_kernel);
  m.impl("amin.out", amin_out_kernel);
  m.impl("argmax", argmax_kernel);
  m.impl("argmin", argmin_kernel);
  m.impl("var.correction", var_kernel);
  m.impl("std.correction", std_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
