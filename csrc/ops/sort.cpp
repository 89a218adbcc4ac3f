// Orderings written from other device ops (comparisons, sums, arg
// reductions, gather), so they add no program kind of their own: sort,
// topk (mixture-of-experts routing picks the top experts of each token and
// sorts the expert ids), and max/min along a dim (values and indices).
//
// Every ordering here is stable and total: NaN counts as larger than every
// number (as the CPU orders it), equal keys keep their index order, and
// values are gathered from the input at the chosen indices, so they are the
// input's bits (-0.0 stays -0.0). That is the CPU's order for stable=True;
// for stable=False PyTorch leaves the order of ties open, and the CPU's
// differs: the values are the same, the indices are another valid choice.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/add.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/argmin.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/full.h>
#include <ATen/ops/gather.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/min_ops.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sort_ops.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/topk_ops.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <limits>
#include <tuple>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using PairRef = std::tuple<at::Tensor&, at::Tensor&>;

// Rows whose pairwise comparison ([rows, n, n] elements) fits this many
// elements are ranked at once; longer rows are walked one pick at a time.
constexpr int64_t kMaxPairwise = int64_t{1} << 24;
// Picks one at a time cost about a dozen launches each: beyond this many
// (a long row and a large k) the counted CPU fallback is used instead.
constexpr int64_t kMaxPicks = 256;

bool orderable(const at::Tensor& t) {
  return t.is_privateuseone() && has_device_dtype(t.scalar_type()) &&
         t.scalar_type() != at::kBool;
}

// The ranks of each row's elements (last dim) in the stable order: the
// number of elements that come before each. j comes before i when its key
// is strictly first in the order (NaN first when descending, last when
// ascending), or equal and j < i. One [rows, n, n] comparison, summed.
at::Tensor stable_ranks(const at::Tensor& keys, bool descending) {
  const int64_t n = keys.size(-1);
  const at::Tensor mine = keys.unsqueeze(-1);    // [..., n(i), 1]
  const at::Tensor theirs = keys.unsqueeze(-2);  // [..., 1, n(j)]
  at::Tensor first = descending ? at::gt(theirs, mine) : at::lt(theirs, mine);
  at::Tensor tie = at::eq(theirs, mine);
  if (at::isFloatingType(keys.scalar_type())) {
    const at::Tensor nan = at::isnan(keys);
    const at::Tensor nan_mine = nan.unsqueeze(-1),
                     nan_theirs = nan.unsqueeze(-2);
    // NaN precedes every number when descending and follows it ascending.
    const at::Tensor nan_first =
        descending ? at::logical_and(nan_theirs, at::logical_not(nan_mine))
                   : at::logical_and(nan_mine, at::logical_not(nan_theirs));
    first = at::logical_or(first, nan_first);
    tie = at::logical_or(tie, at::logical_and(nan_mine, nan_theirs));
  }
  const at::Tensor positions = at::arange(n, keys.options().dtype(at::kLong));
  const at::Tensor earlier = at::lt(positions, positions.unsqueeze(-1));
  const at::Tensor before =
      at::logical_or(first, at::logical_and(tie, earlier));
  return at::sum(before, -1);
}

// For each place p < k, the index of the element of rank p (each rank is
// held by exactly one element of the row).
at::Tensor indices_of_ranks(const at::Tensor& ranks, int64_t k) {
  const at::Tensor places = at::arange(k, ranks.options()).unsqueeze(-1);
  at::Tensor holds = at::empty({0}, ranks.options().dtype(at::kByte));
  at::eq_out(holds, ranks.unsqueeze(-2), places);  // [..., k, n]
  return at::argmax(holds, -1);
}

// The first k of each row in the stable order, one pick per launch round:
// the extreme of the numbers not yet taken, the first untaken element equal
// to it (or, NaN being an extreme of its own, the first untaken NaN).
at::Tensor first_k_by_picks(const at::Tensor& keys, int64_t k,
                            bool descending) {
  const int64_t n = keys.size(-1);
  const bool floating = at::isFloatingType(keys.scalar_type());
  const auto long_options = keys.options().dtype(at::kLong);
  const at::Tensor positions = at::arange(n, long_options);
  const at::Tensor nan = floating ? at::isnan(keys) : at::Tensor();
  const at::Tensor numbers = floating ? at::logical_not(nan) : at::Tensor();
  // Taken places read as a key no open key passes in the direction of the
  // search (the row's opposite extreme; infinity for floating keys, whose
  // extremes may be NaN).
  at::Tensor sentinel;
  if (floating) {
    const double inf = std::numeric_limits<double>::infinity();
    sentinel = at::full({}, descending ? -inf : inf, keys.options());
  } else {
    sentinel = descending ? at::amin(keys, -1, true) : at::amax(keys, -1, true);
  }
  at::Tensor taken = at::zeros(keys.sizes(), keys.options().dtype(at::kBool));
  std::vector<at::Tensor> picks;
  for (int64_t r = 0; r < k; ++r) {
    const at::Tensor open = at::logical_not(taken);
    const at::Tensor open_numbers =
        floating ? at::logical_and(open, numbers) : open;
    const at::Tensor masked = at::where(open_numbers, keys, sentinel);
    const at::Tensor extreme =
        descending ? at::amax(masked, -1, true) : at::amin(masked, -1, true);
    const at::Tensor hit = at::logical_and(open_numbers, at::eq(keys, extreme));
    at::Tensor score = hit.to(at::kByte);
    if (floating) {
      // NaN first when descending (before any number), else after them.
      const at::Tensor open_nan = at::logical_and(open, nan).to(at::kByte);
      score = descending ? at::add(at::mul(open_nan, 2), score)
                         : at::add(at::mul(score, 2), open_nan);
    }
    const at::Tensor pick = at::argmax(score, -1, true);
    picks.push_back(pick);
    taken = at::logical_or(taken, at::eq(positions, pick));
  }
  return at::cat(picks, -1);
}

// The indices of the first k elements of each row (last dim) of `keys`,
// in the stable order; nullopt when the row is too long for either way.
std::optional<at::Tensor> first_k_indices(const at::Tensor& keys, int64_t k,
                                          bool descending) {
  const int64_t n = keys.size(-1);
  if (keys.numel() / n * n * n <= kMaxPairwise) {
    return indices_of_ranks(stable_ranks(keys, descending), k);
  }
  if (k <= kMaxPicks) return first_k_by_picks(keys, k, descending);
  return std::nullopt;
}

// Values and indices of the first k elements along `dim` in the stable
// order, or nullopt (the caller falls back to the CPU).
std::optional<Pair> first_k(const at::Tensor& self, int64_t dim, int64_t k,
                            bool descending) {
  if (self.dim() == 0) {
    if (k == 0) return std::nullopt;  // rare; the CPU shapes it
    return Pair{self.clone(), at::zeros({}, self.options().dtype(at::kLong))};
  }
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> shape = self.sizes().vec();
  shape[d] = k;
  if (k == 0 || self.numel() == 0) {
    return Pair{at::empty(shape, self.options()),
                at::empty(shape, self.options().dtype(at::kLong))};
  }
  const at::Tensor rows = self.movedim(d, -1);
  std::optional<at::Tensor> index = first_k_indices(rows, k, descending);
  if (!index) return std::nullopt;
  const at::Tensor values = at::gather(rows, -1, *index);
  return Pair{values.movedim(-1, d).contiguous(),
              index->movedim(-1, d).contiguous()};
}

void check_outputs(const at::Tensor& self, const at::Tensor& values,
                   const at::Tensor& indices) {
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "expected values to have dtype ", self.scalar_type(), " but got ",
              values.scalar_type());
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "expected indices to have dtype Long but got ",
              indices.scalar_type());
  check_out_apart(values, {self, indices});
  check_out_apart(indices, {self});
}

PairRef write_pair(const Pair& result, at::Tensor& values,
                   at::Tensor& indices) {
  write_result(std::get<0>(result), values);
  write_result(std::get<1>(result), indices);
  return {values, indices};
}

// ---- sort ------------------------------------------------------------------

PairRef sort_out(const at::Tensor& self, std::optional<bool> stable,
                 int64_t dim, bool descending, at::Tensor& values,
                 at::Tensor& indices) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const int64_t n = self.dim() == 0 ? 1 : self.size(d);
  std::optional<Pair> result;
  if (orderable(self)) result = first_k(self, d, n, descending);
  if (!result) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::sort_values_stable>::call(self, stable, dim,
                                                           descending, values,
                                                           indices);
  }
  check_outputs(self, values, indices);
  return write_pair(*result, values, indices);
}

Pair sort_stable(const at::Tensor& self, std::optional<bool> stable,
                 int64_t dim, bool descending) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  sort_out(self, stable, dim, descending, values, indices);
  return {values, indices};
}

Pair sort_default(const at::Tensor& self, int64_t dim, bool descending) {
  return sort_stable(self, false, dim, descending);
}

PairRef sort_values(const at::Tensor& self, int64_t dim, bool descending,
                    at::Tensor& values, at::Tensor& indices) {
  return sort_out(self, false, dim, descending, values, indices);
}

// ---- topk ------------------------------------------------------------------

PairRef topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
                 bool sorted, at::Tensor& values, at::Tensor& indices) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const int64_t n = self.dim() == 0 ? 1 : self.size(d);
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  std::optional<Pair> result;
  if (orderable(self)) result = first_k(self, d, k, largest);
  if (!result) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::topk_values>::call(self, k, dim, largest,
                                                    sorted, values, indices);
  }
  check_outputs(self, values, indices);
  return write_pair(*result, values, indices);
}

Pair topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest,
          bool sorted) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  topk_out(self, k, dim, largest, sorted, values, indices);
  return {values, indices};
}

// ---- max / min along a dim -------------------------------------------------
//
// The first index of the extreme (of the first NaN, which wins), as the
// device's arg reductions pick it and the CPU does, and the value there.

template <bool kMax>
PairRef extreme_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                        at::Tensor& values, at::Tensor& indices) {
  const char* name = kMax ? "max" : "min";
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (!orderable(self)) {
    using Op =
        std::conditional_t<kMax, at::_ops::max_dim_max, at::_ops::min_dim_min>;
    return at::native::call_fallback_fn<&cpu_fallback, Op>::call(
        self, dim, keepdim, values, indices);
  }
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(d) > 0, name,
                    "(): Expected reduction dim ", d,
                    " to have non-zero size.");
  check_outputs(self, values, indices);
  if (self.dim() == 0) {
    return write_pair(
        {self.clone(), at::zeros({}, self.options().dtype(at::kLong))}, values,
        indices);
  }
  const at::Tensor index = kMax ? at::argmax(self, d, /*keepdim=*/true)
                                : at::argmin(self, d, /*keepdim=*/true);
  const at::Tensor value = at::gather(self, d, index);
  if (keepdim) return write_pair({value, index}, values, indices);
  return write_pair({value.squeeze(d), index.squeeze(d)}, values, indices);
}

template <bool kMax>
Pair extreme_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  extreme_dim_out<kMax>(self, dim, keepdim, values, indices);
  return {values, indices};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sort", sort_default);
  m.impl("sort.stable", sort_stable);
  m.impl("sort.values", sort_values);
  m.impl("sort.values_stable", sort_out);
  m.impl("topk", topk);
  m.impl("topk.values", topk_out);
  m.impl("max.dim", extreme_dim<true>);
  m.impl("max.dim_max", extreme_dim_out<true>);
  m.impl("min.dim", extreme_dim<false>);
  m.impl("min.dim_min", extreme_dim_out<false>);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
