// Matrix products as device programs (kernels/matmul.h): mm, bmm, addmm
// (and their out= forms), linear and matmul over N-d inputs. Operands are
// read in place when the kernel can address them, as stored or transposed
// (a weight read as W^T, k^T in attention), so no copy is made for linear
// layers or transposed views; other views are materialized first. Leading
// dims of linear's input stay row dims of one product; matmul's batch dims
// (broadcast by stride 0) stay batch dims of one launch.
//
// linear and matmul are composite in PyTorch; registering them for the
// device keeps their N-d operands whole. Where autograd must record the
// graph (grad mode on, an input requiring grad) the composite runs instead.
#include "spyre/kernels/matmul.h"

#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear_native.h>
#include <ATen/ops/matmul_native.h>
#include <ATen/ops/mm_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <optional>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"
#include "spyre/kernels/program_builder.h"

namespace spyre::torch_glue::ops {
namespace {

bool supported_dtype(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat;
}

// An operand as stored, or transposed (its last two dims swapped reads it as
// stored), or materialized.
struct Operand {
  at::Tensor tensor;
  kernels::Matrix matrix;
  bool transposed = false;
};

std::optional<Operand> addressed(const at::Tensor& t, int64_t batch) {
  if (auto m = matrix_view(t, batch)) return Operand{t, *m, false};
  // A transposed stored matrix has one row dim: the flipped view's
  // next-to-last dim. With more row dims (linear's [B, L, K] input stored
  // as [B, K, L], Mamba's x_proj) the flipped view's rows would run over
  // B and K together: such operands are materialized.
  if (t.dim() - batch == 2) {
    at::Tensor flipped = t.transpose(-1, -2);
    if (auto m = matrix_view(flipped, batch)) return Operand{t, *m, true};
  }
  return std::nullopt;
}

// A materialized [K, 1] column is stored along its rows (the layout drops
// the size-1 dim), so it is read transposed like any other.
Operand operand(const at::Tensor& t, int64_t batch) {
  if (auto o = addressed(t, batch)) return *o;
  auto o = addressed(materialize(t), batch);
  TORCH_INTERNAL_ASSERT(o.has_value(),
                        "spyre: a materialized matmul operand of shape ",
                        t.sizes(), " is not addressable");
  return *o;
}

// alpha * r + beta * bias in fp32, rounded once into out.
void finish_in_fp32(at::Tensor r, const std::optional<at::Tensor>& bias,
                    double alpha, double beta, const at::Tensor& out) {
  if (alpha != 1) r = r.mul(alpha);
  if (bias && beta != 0) r = r.add(bias->to(at::kFloat), beta);
  out.copy_(r.expand(out.sizes()));
}

// Products whose every result is [1, 1] (dot products) have no stick to
// write along, either way round: a device multiply and a reduction in fp32.
void run_dots(const at::Tensor& a, const at::Tensor& b,
              const std::optional<at::Tensor>& bias, double alpha, double beta,
              const at::Tensor& out) {
  finish_in_fp32(a.to(at::kFloat)
                     .mul(b.transpose(-1, -2).to(at::kFloat))
                     .sum(-1, /*keepdim=*/true),
                 bias, alpha, beta, out);
}

// K == 1: each result is one product a[m] * b[n], the broadcast product of
// a [..., M, 1] and b [..., 1, N] (either may be a [.., 1, 1] no matrix
// view addresses: attention over a single key); fp32, rounded once as the
// matrix unit would.
void run_outer(const at::Tensor& a, const at::Tensor& b,
               const std::optional<at::Tensor>& bias, double alpha, double beta,
               const at::Tensor& out) {
  finish_in_fp32(a.to(at::kFloat).mul(b.to(at::kFloat)), bias, alpha, beta,
                 out);
}

// out = alpha * a @ b + beta * bias. a [..., M, K], b [..., K, N] and out
// [..., M, N] (fresh, default layout) share `batch` leading dims (a and b
// may broadcast them by stride 0); `rows_a` says a's leading dims beyond
// the batch are row dims of the product (linear's N-d input). bias, when
// given, is expanded to out's shape.
void run_matmul(const at::Tensor& a, const at::Tensor& b,
                const std::optional<at::Tensor>& bias, double alpha,
                double beta, const at::Tensor& out, int64_t batch) {
  const int64_t k = a.size(-1);
  if (out.numel() == 0) return;
  if (k == 0) {
    out.zero_();
    if (bias && beta != 0) out.add_(*bias, beta);
    return;
  }
  if (k == 1) {
    run_outer(a, b, bias, alpha, beta, out);
    return;
  }
  if (out.size(-1) == 1 && out.size(-2) == 1) {
    run_dots(a, b, bias, alpha, beta, out);
    return;
  }
  if (!matrix_view(out, batch)) {
    // An [M, 1] result cannot be addressed along its sticks (its one
    // column is not the stick dim): compute C^T = B^T A^T into its
    // transposed view instead.
    TORCH_CHECK(out.size(-1) == 1 && out.size(-2) > 1,
                "spyre: matmul result view not addressable");
    std::optional<at::Tensor> bias_t;
    if (bias && beta != 0) bias_t = bias->expand(out.sizes()).transpose(-1, -2);
    run_matmul(b.transpose(-1, -2), a.transpose(-1, -2), bias_t, alpha, beta,
               out.transpose(-1, -2), batch);
    return;
  }
  Operand oa = operand(a, batch);
  Operand ob = operand(b, batch);
  kernels::MatmulShape shape(oa.matrix, ob.matrix, *matrix_view(out, batch));
  shape.a_transposed = oa.transposed;
  shape.b_transposed = ob.transposed;
  shape.alpha = alpha;
  shape.beta = beta;
  std::optional<at::Tensor> bias_tensor;
  if (bias && beta != 0) {
    bias_tensor = bias->expand(out.sizes());
    shape.bias = matrix_operand(*bias_tensor, batch);
  }
  kernels::KeyWriter key;
  key.add("matmul");
  for (const kernels::Matrix* m : {&shape.a, &shape.b, &shape.c}) {
    append_key(key, *m);
  }
  key.add(shape.bias.has_value());
  if (shape.bias) append_key(key, *shape.bias);
  key.add(shape.a_transposed).add(shape.b_transposed).add(alpha).add(beta);
  std::vector<at::Tensor> args{oa.tensor, ob.tensor, out};
  if (bias_tensor) args.push_back(*bias_tensor);
  launch_cached(
      out.device().index(), ProgramKey(std::move(key)),
      [&] {
        kernels::MatmulOptions options;
        options.target = {device_chip(out.device().index())};
        return kernels::build_matmul(
            shape, kernels::plan_matmul(shape, options), options);
      },
      args);
}

void check_same_dtype(const char* op, const at::Tensor& a,
                      const at::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op,
              ": expected both operands to have the same dtype, but got ",
              a.scalar_type(), " and ", b.scalar_type());
}

at::Tensor empty_for(const at::Tensor& like, at::IntArrayRef sizes) {
  return at::empty(sizes, like.options().memory_format(std::nullopt));
}

at::Tensor mm_kernel(const at::Tensor& self, const at::Tensor& mat2) {
  TORCH_CHECK(self.dim() == 2 && mat2.dim() == 2, "mm: expected 2-D tensors");
  TORCH_CHECK(self.size(1) == mat2.size(0),
              "mat1 and mat2 shapes cannot be multiplied (", self.size(0), "x",
              self.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype("mm", self, mat2);
  if (!supported_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::mm>::call(
        self, mat2);
  }
  at::Tensor out = empty_for(self, {self.size(0), mat2.size(1)});
  run_matmul(self, mat2, std::nullopt, 1, 0, out, 0);
  return out;
}

at::Tensor& mm_out_kernel(const at::Tensor& self, const at::Tensor& mat2,
                          at::Tensor& out) {
  check_out_apart(out, {self, mat2});
  return write_result(mm_kernel(self, mat2), out);
}

at::Tensor bmm_kernel(const at::Tensor& self, const at::Tensor& mat2) {
  TORCH_CHECK(self.dim() == 3 && mat2.dim() == 3, "bmm: expected 3-D tensors");
  TORCH_CHECK(self.size(0) == mat2.size(0) && self.size(2) == mat2.size(1),
              "bmm: shapes ", self.sizes(), " and ", mat2.sizes(),
              " cannot be multiplied");
  check_same_dtype("bmm", self, mat2);
  if (!supported_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::bmm>::call(
        self, mat2);
  }
  at::Tensor out = empty_for(self, {self.size(0), self.size(1), mat2.size(2)});
  run_matmul(self, mat2, std::nullopt, 1, 0, out, 1);
  return out;
}

at::Tensor& bmm_out_kernel(const at::Tensor& self, const at::Tensor& mat2,
                           at::Tensor& out) {
  check_out_apart(out, {self, mat2});
  return write_result(bmm_kernel(self, mat2), out);
}

at::Tensor addmm_kernel(const at::Tensor& self, const at::Tensor& mat1,
                        const at::Tensor& mat2, const at::Scalar& beta,
                        const at::Scalar& alpha) {
  TORCH_CHECK(mat1.dim() == 2 && mat2.dim() == 2,
              "addmm: expected 2-D matrices");
  TORCH_CHECK(mat1.size(1) == mat2.size(0),
              "mat1 and mat2 shapes cannot be multiplied (", mat1.size(0), "x",
              mat1.size(1), " and ", mat2.size(0), "x", mat2.size(1), ")");
  check_same_dtype("addmm", mat1, mat2);
  check_same_dtype("addmm", self, mat1);
  if (!supported_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::addmm>::call(
        self, mat1, mat2, beta, alpha);
  }
  at::Tensor out = empty_for(mat1, {mat1.size(0), mat2.size(1)});
  const double b = beta.toDouble();
  run_matmul(mat1, mat2,
             b != 0 ? std::optional<at::Tensor>(self) : std::nullopt,
             alpha.toDouble(), b, out, 0);
  return out;
}

at::Tensor& addmm_out_kernel(const at::Tensor& self, const at::Tensor& mat1,
                             const at::Tensor& mat2, const at::Scalar& beta,
                             const at::Scalar& alpha, at::Tensor& out) {
  // out may be the bias itself (addmm_), not a part of it nor a factor.
  check_out_apart(out, {mat1, mat2});
  if (!out.is_same(self)) at::assert_no_partial_overlap(out, self);
  return write_result(addmm_kernel(self, mat1, mat2, beta, alpha), out);
}

// baddbmm (ALiBi attention scores of BLOOM-style models): one batched
// product with self as its bias, as addmm is for matrices.
at::Tensor baddbmm_kernel(const at::Tensor& self, const at::Tensor& batch1,
                          const at::Tensor& batch2, const at::Scalar& beta,
                          const at::Scalar& alpha) {
  TORCH_CHECK(batch1.dim() == 3, "batch1 must be a 3D tensor");
  TORCH_CHECK(batch2.dim() == 3, "batch2 must be a 3D tensor");
  TORCH_CHECK(
      batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1),
      "baddbmm: shapes ", batch1.sizes(), " and ", batch2.sizes(),
      " cannot be multiplied");
  check_same_dtype("baddbmm", batch1, batch2);
  check_same_dtype("baddbmm", self, batch1);
  if (!supported_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::baddbmm>::call(
        self, batch1, batch2, beta, alpha);
  }
  at::Tensor out =
      empty_for(batch1, {batch1.size(0), batch1.size(1), batch2.size(2)});
  const double b = beta.toDouble();
  run_matmul(batch1, batch2,
             b != 0 ? std::optional<at::Tensor>(self) : std::nullopt,
             alpha.toDouble(), b, out, 1);
  return out;
}

at::Tensor& baddbmm_out_kernel(const at::Tensor& self, const at::Tensor& batch1,
                               const at::Tensor& batch2, const at::Scalar& beta,
                               const at::Scalar& alpha, at::Tensor& out) {
  // out may be self (baddbmm_), not a part of it nor a factor.
  check_out_apart(out, {batch1, batch2});
  if (!out.is_same(self)) at::assert_no_partial_overlap(out, self);
  return write_result(baddbmm_kernel(self, batch1, batch2, beta, alpha), out);
}

at::Tensor& baddbmm_inplace_kernel(at::Tensor& self, const at::Tensor& batch1,
                                   const at::Tensor& batch2,
                                   const at::Scalar& beta,
                                   const at::Scalar& alpha) {
  return baddbmm_out_kernel(self, batch1, batch2, beta, alpha, self);
}

// linear with the input's leading dims kept as row dims of one product:
// out [..., N] = input [..., K] @ weight[N, K]^T + bias.
at::Tensor linear_kernel(const at::Tensor& input, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  const bool bias_used = bias && bias->defined();
  if (input.dim() == 0 || weight.dim() != 2 ||
      !supported_dtype(input.scalar_type()) ||
      input.scalar_type() != weight.scalar_type() ||
      (bias_used && bias->scalar_type() != input.scalar_type())) {
    return at::native::linear(input, weight, bias);
  }
  TORCH_CHECK(input.size(-1) == weight.size(1),
              "mat1 and mat2 shapes cannot be multiplied (",
              input.numel() / std::max<int64_t>(input.size(-1), 1), "x",
              input.size(-1), " and ", weight.size(1), "x", weight.size(0),
              ")");
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = weight.size(0);
  at::Tensor out = empty_for(input, sizes);
  // weight.t() is [K, N]; the operand model reads it as the stored weight.
  run_matmul(input.dim() == 1 ? input.unsqueeze(0) : input, weight.t(),
             bias_used ? std::optional<at::Tensor>(*bias) : std::nullopt, 1, 1,
             input.dim() == 1 ? out.unsqueeze(0) : out, 0);
  return out;
}

at::Tensor linear_autograd_kernel(const at::Tensor& input,
                                  const at::Tensor& weight,
                                  const std::optional<at::Tensor>& bias) {
  if (composite_must_decompose({&input, &weight, bias ? &*bias : nullptr})) {
    return at::native::linear(input, weight, bias);
  }
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return linear_kernel(input, weight, bias);
}

// matmul with both operands at least 2-D: broadcast batch dims, one launch.
at::Tensor matmul_kernel(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() < 1 || b.dim() < 1 || !supported_dtype(a.scalar_type()) ||
      a.scalar_type() != b.scalar_type()) {
    return at::native::matmul(a, b);
  }
  const at::Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const at::Tensor b2 = b.dim() == 1 ? b.unsqueeze(-1) : b;
  TORCH_CHECK(a2.size(-1) == b2.size(-2), "matmul: shapes ", a.sizes(), " and ",
              b.sizes(), " cannot be multiplied");
  const auto batch = at::infer_size(a2.sizes().slice(0, a2.dim() - 2),
                                    b2.sizes().slice(0, b2.dim() - 2));
  std::vector<int64_t> a_sizes = batch, b_sizes = batch, out_sizes = batch;
  a_sizes.insert(a_sizes.end(), {a2.size(-2), a2.size(-1)});
  b_sizes.insert(b_sizes.end(), {b2.size(-2), b2.size(-1)});
  out_sizes.insert(out_sizes.end(), {a2.size(-2), b2.size(-1)});
  at::Tensor out = empty_for(a, out_sizes);
  run_matmul(a2.expand(a_sizes), b2.expand(b_sizes), std::nullopt, 1, 0, out,
             static_cast<int64_t>(batch.size()));
  if (b.dim() == 1) out = out.squeeze(-1);
  if (a.dim() == 1) out = out.squeeze(b.dim() == 1 ? -1 : -2);
  return out;
}

at::Tensor matmul_autograd_kernel(const at::Tensor& a, const at::Tensor& b) {
  if (composite_must_decompose({&a, &b})) return at::native::matmul(a, b);
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  return matmul_kernel(a, b);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm_kernel);
  m.impl("mm.out", mm_out_kernel);
  m.impl("bmm", bmm_kernel);
  m.impl("bmm.out", bmm_out_kernel);
  m.impl("addmm", addmm_kernel);
  m.impl("addmm.out", addmm_out_kernel);
  m.impl("baddbmm", baddbmm_kernel);
  m.impl("baddbmm.out", baddbmm_out_kernel);
  m.impl("baddbmm_", baddbmm_inplace_kernel);
  m.impl("linear", linear_kernel);
  m.impl("matmul", matmul_kernel);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("linear", linear_autograd_kernel);
  m.impl("matmul", matmul_autograd_kernel);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
