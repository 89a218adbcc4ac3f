// Reductions written from other device ops (so each runs as a few device
// launches, never on the CPU): all/any (boolean reductions, which Hugging
// Face models use to build attention masks), linalg_vector_norm
// (sentence-transformers' normalisation) and isin (generate()'s stop
// checks). Every step is a device kernel of its own family (comparisons,
// conversions, amin/amax/sum, sqrt), so these add no program kind of their
// own.
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/floor.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/histc_ops.h>
#include <ATen/ops/isin_ops.h>
#include <ATen/ops/le.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/sqrt.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

// The dims a reduction over `dims` covers, wrapped: all of them for None
// (and for an empty list when `empty_is_all`, as norms and amax read it).
std::vector<int64_t> covered_dims(const at::Tensor& self,
                                  at::OptionalIntArrayRef dims,
                                  bool empty_is_all) {
  std::vector<int64_t> out;
  if (!dims.has_value() || (dims->empty() && empty_is_all)) {
    for (int64_t d = 0; d < self.dim(); ++d) out.push_back(d);
    return out;
  }
  const auto mask = at::dim_list_to_bitset(*dims, self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (mask[d]) out.push_back(d);
  }
  return out;
}

// all (every element nonzero) or any (some element nonzero) over `dims`:
// the elements' nonzero flags as 1.0/0.0, their minimum (all) or maximum
// (any), and that compared with 0. The result is bool, or uint8 for uint8
// input, as PyTorch gives.
at::Tensor all_or_any(const at::Tensor& self, at::OptionalIntArrayRef dims,
                      bool keepdim, bool all) {
  // all/any over an empty dim list reduce nothing (each result is its
  // element's flag), unlike amin/amax, where it means every dim.
  const std::vector<int64_t> covered = covered_dims(self, dims, false);
  const at::ScalarType result =
      self.scalar_type() == at::kByte ? at::kByte : at::kBool;
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    const bool reduced =
        std::find(covered.begin(), covered.end(), d) != covered.end();
    if (!reduced || keepdim) shape.push_back(reduced ? 1 : self.size(d));
  }
  const auto options = self.options().dtype(result);
  int64_t count = 1;
  for (int64_t d : covered) count *= self.size(d);
  if (count == 0) return at::empty(shape, options).fill_(all ? 1 : 0);
  at::Tensor out = at::empty(shape, options);
  if (covered.empty()) {
    at::ne_out(out, self, 0);
    return out;
  }
  at::Tensor flags = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  at::ne_out(flags, self, 0);
  const at::Tensor folded = all ? at::amin(flags, covered, keepdim)
                                : at::amax(flags, covered, keepdim);
  at::ne_out(out, folded, 0);
  return out;
}

at::Tensor& into(const at::Tensor& value, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == value.scalar_type() ||
                  out.scalar_type() == at::kBool,
              "all/any: expected out of dtype ", value.scalar_type(),
              " but got ", out.scalar_type());
  return write_result(value, out);
}

template <bool kAll>
at::Tensor full_kernel(const at::Tensor& self) {
  return all_or_any(self, std::nullopt, false, kAll);
}
template <bool kAll>
at::Tensor dim_kernel(const at::Tensor& self, int64_t dim, bool keepdim) {
  return all_or_any(self, at::IntArrayRef(dim), keepdim, kAll);
}
template <bool kAll>
at::Tensor dims_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                       bool keepdim) {
  // dim=None reduces everything; dim=[] too (as PyTorch's all/any).
  return all_or_any(self, dim, keepdim, kAll);
}
template <bool kAll>
at::Tensor& full_out_kernel(const at::Tensor& self, at::Tensor& out) {
  check_out_apart(out, {self});
  return into(all_or_any(self, std::nullopt, false, kAll), out);
}
template <bool kAll>
at::Tensor& dim_out_kernel(const at::Tensor& self, int64_t dim, bool keepdim,
                           at::Tensor& out) {
  check_out_apart(out, {self});
  return into(all_or_any(self, at::IntArrayRef(dim), keepdim, kAll), out);
}
template <bool kAll>
at::Tensor& dims_out_kernel(const at::Tensor& self, at::OptionalIntArrayRef dim,
                            bool keepdim, at::Tensor& out) {
  check_out_apart(out, {self});
  return into(all_or_any(self, dim, keepdim, kAll), out);
}

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// ||x||_ord over `dim` for ord 2 (sqrt of the sum of squares), 1 (sum of
// magnitudes), inf and -inf (largest and smallest magnitude), in fp32 with
// one rounding into the result dtype, as the CPU kernel accumulates 16-bit
// inputs. Other orders and non-floating inputs take the counted fallback.
at::Tensor& vector_norm_out(const at::Tensor& self, const at::Scalar& ord,
                            at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype,
                            at::Tensor& out) {
  const double p = ord.toDouble();
  const at::ScalarType result = dtype.value_or(self.scalar_type());
  const bool supported = p == 2 || p == 1 || std::isinf(p);
  if (!supported || !floating(self.scalar_type()) || !floating(result) ||
      self.numel() == 0) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::linalg_vector_norm_out>::call(self, ord, dim,
                                                               keepdim, dtype,
                                                               out);
  }
  const std::vector<int64_t> covered = covered_dims(self, dim, true);
  const at::Tensor x = self.to(at::kFloat);
  at::Tensor norm;
  if (p == 2) {
    norm = at::sqrt(at::sum(at::mul(x, x), covered, keepdim));
  } else if (p == 1) {
    norm = at::sum(at::abs(x), covered, keepdim);
  } else {
    norm = p > 0 ? at::amax(at::abs(x), covered, keepdim)
                 : at::amin(at::abs(x), covered, keepdim);
  }
  return write_result(norm, out);
}

at::Tensor vector_norm(const at::Tensor& self, const at::Scalar& ord,
                       at::OptionalIntArrayRef dim, bool keepdim,
                       std::optional<at::ScalarType> dtype) {
  at::Tensor out =
      at::empty({0}, self.options().dtype(dtype.value_or(self.scalar_type())));
  return vector_norm_out(self, ord, dim, keepdim, dtype, out);
}

// isin: each element compared with every test element, the matches
// folded by any (eos-token checks of generate(), a few test elements). A
// test set too large to compare against in one piece goes to the counted
// CPU fallback.
constexpr int64_t kMaxIsinTests = 4096;

at::Tensor& isin_out(const at::Tensor& elements, const at::Tensor& tests,
                     bool assume_unique, bool invert, at::Tensor& out) {
  const at::ScalarType common = at::result_type(elements, tests);
  if (!elements.is_privateuseone() || !has_device_dtype(common) ||
      tests.numel() > kMaxIsinTests) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::isin_Tensor_Tensor_out>::call(elements, tests,
                                                               assume_unique,
                                                               invert, out);
  }
  TORCH_CHECK(out.scalar_type() == at::kBool,
              "isin: expected out of dtype Bool, got ", out.scalar_type());
  at::native::resize_output(out, elements.sizes());
  if (elements.numel() == 0) return out;
  if (tests.numel() == 0) return out.fill_(invert);
  const at::Tensor flat_tests = tests.to(elements.device()).reshape({-1});
  const at::Tensor matches = at::eq(elements.unsqueeze(-1), flat_tests);
  const at::Tensor found = all_or_any(matches, at::IntArrayRef(-1), false,
                                      /*all=*/false);
  out.copy_(invert ? at::logical_not(found) : found);
  return out;
}

at::Tensor isin(const at::Tensor& elements, const at::Tensor& tests,
                bool assume_unique, bool invert) {
  at::Tensor out = at::empty({0}, elements.options().dtype(at::kBool));
  return isin_out(elements, tests, assume_unique, invert, out);
}

// histc (mixture-of-experts routing counts the tokens per expert with it,
// on integer expert ids, which the CPU's kernel does not take): an
// element's bin is (x - min) * bins / (max - min), each step rounded to the
// input's dtype as the CPU's kernel computes it, truncated, the last bin
// closed; then each element's bin compared with every bin and the matches
// summed in fp32 (exact up to 2^24 per bin). min == max == 0 takes the
// data's range (a read back of two values); elements outside it and NaN
// are not counted.
constexpr int64_t kMaxHistcCompares = int64_t{1} << 24;

at::Tensor histc_kernel(const at::Tensor& self, int64_t bins,
                        const at::Scalar& min, const at::Scalar& max) {
  TORCH_CHECK(bins > 0, "torch.histc(): bins must be > 0, but got ", bins);
  if (!has_device_dtype(self.scalar_type()) ||
      self.scalar_type() == at::kBool ||
      self.numel() * bins > kMaxHistcCompares) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::histc>::call(
        self, bins, min, max);
  }
  const at::Tensor x = at::isFloatingType(self.scalar_type())
                           ? self.reshape({-1})
                           : self.reshape({-1}).to(at::kFloat);
  double lo = min.toDouble(), hi = max.toDouble();
  if (lo == 0 && hi == 0 && x.numel() > 0) {
    lo = at::amin(x).item<double>();
    hi = at::amax(x).item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "torch.histc(): max must be larger than min");
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi),
              "torch.histc(): range of [", lo, ", ", hi, "] is not finite");
  if (x.numel() == 0) return at::zeros({bins}, self.options());
  const at::Tensor inside = at::logical_and(at::ge(x, lo), at::le(x, hi));
  const at::Tensor position =
      at::floor(at::div(at::mul(at::sub(x, lo), bins), hi - lo)).to(at::kFloat);
  const at::Tensor bin = at::clamp(position, 0, bins - 1);
  const at::Tensor matches = at::logical_and(
      at::eq(bin.unsqueeze(1), at::arange(bins, position.options())),
      inside.unsqueeze(1));
  return at::sum(matches.to(at::kFloat), 0).to(self.scalar_type());
}

at::Tensor& histc_out_kernel(const at::Tensor& self, int64_t bins,
                             const at::Scalar& min, const at::Scalar& max,
                             at::Tensor& out) {
  check_out_apart(out, {self});
  const at::Tensor counts = histc_kernel(self, bins, min, max);
  return write_result(counts, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", histc_kernel);
  m.impl("histc.out", histc_out_kernel);
  m.impl("isin.Tensor_Tensor", isin);
  m.impl("isin.Tensor_Tensor_out", isin_out);
  m.impl("all", full_kernel<true>);
  m.impl("all.dim", dim_kernel<true>);
  m.impl("all.dims", dims_kernel<true>);
  m.impl("all.all_out", full_out_kernel<true>);
  m.impl("all.out", dim_out_kernel<true>);
  m.impl("all.dims_out", dims_out_kernel<true>);
  m.impl("any", full_kernel<false>);
  m.impl("any.dim", dim_kernel<false>);
  m.impl("any.dims", dims_kernel<false>);
  m.impl("any.all_out", full_out_kernel<false>);
  m.impl("any.out", dim_out_kernel<false>);
  m.impl("any.dims_out", dims_out_kernel<false>);
  m.impl("linalg_vector_norm", vector_norm);
  m.impl("linalg_vector_norm.out", vector_norm_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
