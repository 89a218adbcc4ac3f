// scatter (a scalar or a source tensor written at the places an index
// names along a dim; mixture-of-experts routers build their group masks
// with it) written from other device ops, so it adds no program kind of
// its own: each place along the dim is compared with every index entry of
// its line, a place some entry names takes the value (the source element of
// the last such entry, as the CPU's loop leaves it), and the others keep
// self's. It reads and writes the whole region the index covers; the
// comparison is [..., places, entries] per line. scatter_reduce (sum, mean,
// amax, amin) and index_add reduce the matched entries instead. The reduce=
// forms of scatter and scatter_reduce's prod take the counted CPU fallback;
// indices outside the dim raise PyTorch's error.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/any.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/index_add_ops.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_ops.h>
#include <ATen/ops/scatter_reduce_ops.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// Comparisons of one scatter ([region elements x entries along the dim])
// beyond this many elements take the counted CPU fallback.
constexpr int64_t kMaxCompares = int64_t{1} << 24;

void check_scatter(const at::Tensor& self, int64_t d, const at::Tensor& index,
                   const at::Tensor* src) {
  TORCH_CHECK(
      index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
      "scatter(): Expected dtype int32/int64 for index");
  TORCH_CHECK(index.dim() == self.dim() || index.numel() == 0,
              "Index tensor must have the same number of dimensions as self "
              "tensor");
  if (src != nullptr) {
    TORCH_CHECK(src->scalar_type() == self.scalar_type(),
                "scatter(): Expected self.dtype to be equal to src.dtype");
  }
  if (index.numel() == 0) return;
  for (int64_t k = 0; k < self.dim(); ++k) {
    TORCH_CHECK(k == d || index.size(k) <= self.size(k), "Expected index ",
                index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d);
    TORCH_CHECK(src == nullptr || index.size(k) <= src->size(k),
                "Expected index ", index.sizes(), " to be no larger than src ",
                src->sizes());
  }
}

bool on_device(const at::Tensor& self, int64_t dim, const at::Tensor& index,
               const at::Tensor* src) {
  if (!self.is_privateuseone() || !has_device_dtype(self.scalar_type()) ||
      !index.is_privateuseone() || self.dim() == 0) {
    return false;
  }
  if (src != nullptr && !src->is_privateuseone()) return false;
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  return index.numel() * self.size(d) <= kMaxCompares;
}

// How a scatter's index meets the places of `out` along d: the region the
// index covers (every place along d), its lines along d (that dim last),
// every place compared with every index entry of its line, and the places
// some entry names. An index outside the dim raises PyTorch's error.
struct Matches {
  int64_t d = 0;
  at::Tensor index, region, lines, hits, named;

  // `src`'s entries over the index's extent, d last: [..., n].
  at::Tensor entries_of(const at::Tensor& src) const {
    at::Tensor source = src;
    for (int64_t k = 0; k < src.dim(); ++k) {
      source = source.narrow(k, 0, index.size(k));
    }
    return source.movedim(d, -1);
  }
  // Writes the lines' new values back, in self's own dim order (a copy
  // into the permuted view `lines` of a narrowed region is a case the copy
  // kernel cannot address).
  void write(const at::Tensor& written) const {
    region.copy_(written.movedim(-1, d));
  }
};

Matches match(at::Tensor& out, int64_t d, const at::Tensor& index,
              const char* name) {
  const int64_t places = out.size(d);
  const bool outside = at::logical_or(at::lt(index, 0), at::ge(index, places))
                           .any()
                           .item<bool>();
  TORCH_CHECK_INDEX(!outside, name, "(): index out of bounds for dimension ", d,
                    " with size ", places);
  Matches m;
  m.d = d;
  m.index = index;
  m.region = out;
  for (int64_t k = 0; k < out.dim(); ++k) {
    if (k != d) m.region = m.region.narrow(k, 0, index.size(k));
  }
  m.lines = m.region.movedim(d, -1);  // [..., places]
  const at::Tensor positions =
      at::arange(places, index.options()).unsqueeze(-1);
  m.hits = at::eq(index.movedim(d, -1).unsqueeze(-2),
                  positions);  // [..., places, n]
  m.named = at::any(m.hits, -1);
  return m;
}

// Writes the scatter into `out`, which already holds self's values.
void scatter_into(at::Tensor& out, int64_t d, const at::Tensor& index,
                  const at::Tensor* src, const at::Scalar& value) {
  if (index.numel() == 0) return;
  const Matches m = match(out, d, index, "scatter");
  if (src == nullptr) {
    m.write(at::where(m.named, at::scalar_tensor(value, m.lines.options()),
                      m.lines));
    return;
  }
  // The last entry naming each place: hits weighted 1..n, the largest.
  const int64_t n = index.size(d);
  const at::Tensor order = at::arange(1, n + 1, index.options());
  const at::Tensor last = at::argmax(at::mul(m.hits, order), -1);
  m.write(
      at::where(m.named, at::gather(m.entries_of(*src), -1, last), m.lines));
}

// scatter_reduce's reductions on the device, and index_add's sum.
enum class Reduction : uint8_t { kSum, kMean, kAmax, kAmin };

std::optional<Reduction> reduction_of(std::string_view reduce) {
  if (reduce == "sum") return Reduction::kSum;
  if (reduce == "mean") return Reduction::kMean;
  if (reduce == "amax") return Reduction::kAmax;
  if (reduce == "amin") return Reduction::kAmin;
  return std::nullopt;  // prod: the CPU fallback
}

// Each named place of `out` becomes the reduction of the source entries
// naming it (with its own value when include_self), in fp32 for floating
// data (int64 for integers, exact); other places keep their values. NaN
// propagates through amax and amin, as on the CPU.
void scatter_reduce_into(at::Tensor& out, int64_t d, const at::Tensor& index,
                         const at::Tensor& src, Reduction reduction,
                         bool include_self) {
  if (index.numel() == 0) return;
  const Matches m = match(out, d, index, "scatter_reduce");
  const at::ScalarType compute =
      at::isFloatingType(out.scalar_type()) ? at::kFloat : at::kLong;
  const at::Tensor entries = m.entries_of(src).to(compute).unsqueeze(-2);
  const at::Tensor own = m.lines.to(compute);
  at::Tensor reduced;
  if (reduction == Reduction::kAmax || reduction == Reduction::kAmin) {
    const bool is_max = reduction == Reduction::kAmax;
    const double inf = std::numeric_limits<double>::infinity();
    const at::Tensor none =
        compute == at::kFloat
            ? at::scalar_tensor(is_max ? -inf : inf, entries.options())
            : (is_max ? at::amin(entries) : at::amax(entries));
    const at::Tensor candidates = at::where(m.hits, entries, none);
    reduced = is_max ? at::amax(candidates, -1) : at::amin(candidates, -1);
    if (include_self) {
      reduced = is_max ? at::maximum(own, reduced) : at::minimum(own, reduced);
    }
  } else {
    reduced = at::sum(
        at::where(m.hits, entries, at::zeros({}, entries.options())), -1);
    if (include_self) reduced = at::add(own, reduced);
    if (reduction == Reduction::kMean) {
      at::Tensor count = at::sum(m.hits.to(compute), -1);
      // Unnamed places keep their values: a count of 1 keeps them finite.
      count = include_self ? at::add(count, 1) : at::clamp_min(count, 1);
      reduced = compute == at::kFloat ? at::div(reduced, count)
                                      : at::floor_divide(reduced, count);
    }
  }
  m.write(at::where(m.named, reduced.to(out.scalar_type()), m.lines));
}

at::Tensor& scatter_out(const at::Tensor& self, int64_t dim,
                        const at::Tensor& index, const at::Tensor* src,
                        const at::Scalar& value, at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  check_scatter(self, d, index, src);
  if (src != nullptr) {
    check_out_apart(out, {index, *src});
  } else {
    check_out_apart(out, {index});
  }
  if (!out.is_same(self)) write_result(self, out);
  scatter_into(out, d, index, src, value);
  return out;
}

at::Tensor& value_out(const at::Tensor& self, int64_t dim,
                      const at::Tensor& index, const at::Scalar& value,
                      at::Tensor& out) {
  if (!on_device(self, dim, index, nullptr) || !out.is_privateuseone()) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::scatter_value_out>::call(self, dim, index,
                                                          value, out);
  }
  return scatter_out(self, dim, index, nullptr, value, out);
}

at::Tensor& src_out(const at::Tensor& self, int64_t dim,
                    const at::Tensor& index, const at::Tensor& src,
                    at::Tensor& out) {
  if (!on_device(self, dim, index, &src) || !out.is_privateuseone()) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::scatter_src_out>::call(self, dim, index, src,
                                                        out);
  }
  return scatter_out(self, dim, index, &src, 0, out);
}

at::Tensor value_functional(const at::Tensor& self, int64_t dim,
                            const at::Tensor& index, const at::Scalar& value) {
  at::Tensor out = at::empty_like(self);
  return value_out(self, dim, index, value, out);
}

at::Tensor src_functional(const at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Tensor& src) {
  at::Tensor out = at::empty_like(self);
  return src_out(self, dim, index, src, out);
}

at::Tensor& value_inplace(at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Scalar& value) {
  return value_out(self, dim, index, value, self);
}

at::Tensor& src_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& src) {
  return src_out(self, dim, index, src, self);
}

// ---- scatter_reduce (TAPAS' segment means) --------------------------------

at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim,
                               const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, bool include_self,
                               at::Tensor& out) {
  const std::optional<Reduction> reduction = reduction_of(reduce);
  if (!reduction || !on_device(self, dim, index, &src) ||
      !out.is_privateuseone() || self.scalar_type() == at::kBool) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::scatter_reduce_two_out>::call(self, dim, index,
                                                               src, reduce,
                                                               include_self,
                                                               out);
  }
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  check_scatter(self, d, index, &src);
  check_out_apart(out, {index, src});
  if (!out.is_same(self)) write_result(self, out);
  scatter_reduce_into(out, d, index, src, *reduction, include_self);
  return out;
}

at::Tensor scatter_reduce(const at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Tensor& src,
                          c10::string_view reduce, bool include_self) {
  at::Tensor out = at::empty_like(self);
  return scatter_reduce_out(self, dim, index, src, reduce, include_self, out);
}

at::Tensor& scatter_reduce_inplace(at::Tensor& self, int64_t dim,
                                   const at::Tensor& index,
                                   const at::Tensor& src,
                                   c10::string_view reduce, bool include_self) {
  return scatter_reduce_out(self, dim, index, src, reduce, include_self, self);
}

// ---- index_add (MoE experts' outputs summed into their tokens) -----------
//
// A scatter-sum of alpha * source by the index spread over source's shape:
// every place along dim gains the slices whose index names it (repeated
// indices summed).

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim,
                          const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const bool shaped =
      self.dim() > 0 && source.dim() == self.dim() && index.dim() <= 1 &&
      source.size(d) == index.numel() &&
      source.scalar_type() == self.scalar_type() &&
      (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt);
  std::vector<int64_t> spread_shape(self.dim(), 1);
  if (shaped) spread_shape[d] = index.numel();
  if (!shaped || self.scalar_type() == at::kBool ||
      !on_device(self, dim, index, &source) || !out.is_privateuseone() ||
      index.numel() * self.numel() > kMaxCompares) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::index_add_out>::call(self, dim, index, source,
                                                      alpha, out);
  }
  for (int64_t k = 0; k < self.dim(); ++k) {
    TORCH_CHECK_INDEX(k == d || source.size(k) == self.size(k),
                      "index_add_(): source ", source.sizes(),
                      " must match self ", self.sizes(), " apart from dim ", d);
  }
  check_out_apart(out, {index, source});
  if (!out.is_same(self)) write_result(self, out);
  const at::Tensor spread =
      index.to(at::kLong).reshape(spread_shape).expand(source.sizes());
  const at::Tensor scaled =
      alpha.toDouble() == 1 ? source : at::mul(source, alpha);
  scatter_reduce_into(out, d, spread, scaled, Reduction::kSum,
                      /*include_self=*/true);
  return out;
}

at::Tensor index_add(const at::Tensor& self, int64_t dim,
                     const at::Tensor& index, const at::Tensor& source,
                     const at::Scalar& alpha) {
  at::Tensor out = at::empty_like(self);
  return index_add_out(self, dim, index, source, alpha, out);
}

at::Tensor& index_add_inplace(at::Tensor& self, int64_t dim,
                              const at::Tensor& index, const at::Tensor& source,
                              const at::Scalar& alpha) {
  return index_add_out(self, dim, index, source, alpha, self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("scatter_reduce.two", scatter_reduce);
  m.impl("scatter_reduce.two_out", scatter_reduce_out);
  m.impl("scatter_reduce_.two", scatter_reduce_inplace);
  m.impl("index_add", index_add);
  m.impl("index_add.out", index_add_out);
  m.impl("index_add_", index_add_inplace);
  m.impl("scatter.value", value_functional);
  m.impl("scatter.value_out", value_out);
  m.impl("scatter_.value", value_inplace);
  m.impl("scatter.src", src_functional);
  m.impl("scatter.src_out", src_out);
  m.impl("scatter_.src", src_inplace);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
