// linalg_solve_triangular (the chunked gated delta rule of Qwen3-Next,
// Qwen3.5 and OLMo-hybrid solves (I + N) X = B per chunk, N strictly lower)
// written from device matrix products: with A = D (I + N') (D its
// diagonal, N' = D^-1 times A's strictly triangular part, nilpotent),
//   (I + N')^-1 = (I - N')(I + N'^2)(I + N'^4)...(I + N'^(2^k)),
// 2^(k+1) >= n: the Neumann series, which ends at N'^(n-1), as log2(n)
// squarings, so an n x n solve is about 2 log2(n) + 1 batched products
// instead of n dependent steps. fp32 throughout, rounded once. X A = B
// (left=False) solves A^T X^T = B^T.
#include <ATen/ExpandUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_solve_triangular_ops.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/neg.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tril.h>
#include <ATen/ops/triu.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {
namespace {

bool floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// X with A X = B, A [..., n, n] triangular, in fp32.
at::Tensor solve_left(const at::Tensor& a, const at::Tensor& b, bool upper,
                      bool unitriangular) {
  const int64_t n = a.size(-1);
  const at::Tensor identity = at::eye(n, a.options());
  at::Tensor rhs = b;
  at::Tensor diagonal;
  if (!unitriangular) {
    diagonal = at::sum(at::mul(a, identity), -1, true);
    rhs = at::div(b, diagonal);
  }
  if (n == 1) return rhs;  // no strict part (nor a product of 1 x 1 tiles)
  at::Tensor strict = upper ? at::triu(a, 1) : at::tril(a, -1);
  if (!unitriangular) strict = at::div(strict, diagonal);
  const at::Tensor step = at::neg(strict);  // -N'
  at::Tensor inverse = at::add(identity, step);
  at::Tensor power = step;
  for (int64_t terms = 2; terms < n; terms *= 2) {
    power = at::matmul(power, power);
    inverse = at::add(inverse, at::matmul(inverse, power));
  }
  return at::matmul(inverse, rhs);
}

at::Tensor& solve_triangular_out(const at::Tensor& a, const at::Tensor& b,
                                 bool upper, bool left, bool unitriangular,
                                 at::Tensor& out) {
  const bool here = a.is_privateuseone() && b.is_privateuseone() &&
                    floating(a.scalar_type()) &&
                    b.scalar_type() == a.scalar_type() && a.dim() >= 2 &&
                    b.dim() >= 2 && a.size(-1) == a.size(-2) &&
                    a.size(-1) == (left ? b.size(-2) : b.size(-1)) &&
                    a.numel() > 0 && b.numel() > 0;
  if (!here) {
    return at::native::call_fallback_fn<
        &cpu_fallback,
        at::_ops::linalg_solve_triangular_out>::call(a, b, upper, left,
                                                     unitriangular, out);
  }
  check_out_apart(out, {a, b});
  const at::Tensor a32 = a.to(at::kFloat), b32 = b.to(at::kFloat);
  const at::Tensor x =
      left ? solve_left(a32, b32, upper, unitriangular)
           : solve_left(a32.transpose(-1, -2), b32.transpose(-1, -2), !upper,
                        unitriangular)
                 .transpose(-1, -2);
  return write_result(x.to(a.scalar_type()), out);
}

at::Tensor solve_triangular(const at::Tensor& a, const at::Tensor& b,
                            bool upper, bool left, bool unitriangular) {
  // Each matrix of the result column-major, as the CPU's (LAPACK's) and
  // PyTorch's meta function lay it out (compiled code checks the strides).
  std::vector<int64_t> sizes =
      at::infer_size(a.sizes().slice(0, std::max<int64_t>(a.dim() - 2, 0)),
                     b.sizes().slice(0, std::max<int64_t>(b.dim() - 2, 0)));
  sizes.push_back(b.size(-1));
  sizes.push_back(b.size(-2));
  at::Tensor out = at::empty(sizes, b.options()).transpose(-2, -1);
  return solve_triangular_out(a, b, upper, left, unitriangular, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("linalg_solve_triangular", solve_triangular);
  m.impl("linalg_solve_triangular.out", solve_triangular_out);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
