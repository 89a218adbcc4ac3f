#include "spyre/kernels/norm.h"

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/row_kernel.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

void check(const NormShape& s, const NormOptions& o) {
  auto row_vector = [&](const std::optional<Matrix>& m, const char* what) {
    if (m && (m->rows != 1 || m->cols != s.in.cols)) {
      throw KernelBuildError(rt::str("norm: ", what, " must be 1 x ", s.in.cols,
                                     ", got ", m->rows, " x ", m->cols));
    }
  };
  if (s.in.rows != s.out.rows || s.in.cols != s.out.cols) {
    throw KernelBuildError("norm: input and output shapes differ");
  }
  if (!rt::is_floating(s.in.dtype) || s.in.dtype != s.out.dtype) {
    throw KernelBuildError(
        "norm needs a floating-point input and an output of the same dtype");
  }
  if (s.in.rows == 0 || s.in.cols == 0) {
    throw KernelBuildError("a norm of an empty tensor needs no program");
  }
  row_vector(s.weight, "weight");
  row_vector(s.bias, "bias");
  if (o.rms && (s.bias || s.mean)) {
    throw KernelBuildError("RMS norm has no bias and no mean");
  }
}

}  // namespace

LoopKernel describe_norm(const NormShape& s, const NormOptions& o) {
  check(s, o);
  RowKernelWriter w(o.rms ? "rms_norm" : "layer_norm", s.in);
  w.rows_operand("input", s.in, false);
  w.rows_operand("output", s.out, true);
  if (s.weight) w.col_vector("weight", *s.weight);
  if (s.bias) w.col_vector("bias", *s.bias);
  // statistics in a reduction's layout, or one value per row
  const auto stats = [&](const char* name, const Matrix& m) {
    if (m.cols == 1 && m.rows == s.in.rows) {
      w.rows_operand(name, m, true);
    } else {
      w.row_stats(name, m, true);
    }
  };
  if (s.mean) stats("mean", *s.mean);
  if (s.rstd) stats("rstd", *s.rstd);
  const double n = static_cast<double>(s.in.cols);
  // The compiler's form of the graph PyTorch decomposes a norm into. Node 0:
  // the row statistics (a Welford pass: mean = sum / n and the sum of
  // squared deviations; RMS norm: the sum of squares).
  uint32_t x = w.load("input");
  if (o.rms) {
    w.store("squares", w.reduction("sum", w.binary("mul", x, x)));
  } else {
    const uint32_t mean = w.reduction("welford_reduce", x, 0);
    w.store("row_mean", mean);
    w.store("row_m2", w.reduction("welford_reduce", x, 1));
    if (s.mean) w.store("mean", mean);
  }
  // Node 1: rstd = 1 / sqrt(sum / n + eps) (the biased variance, as
  // PyTorch), then the output with one rounding, as PyTorch's CPU kernels.
  // (A single node computing the centred rows once keeps them live longer
  // and plans fewer rows per block: measured slower.)
  w.next_node();
  x = w.load("input");
  const uint32_t sum = w.load(o.rms ? "squares" : "row_m2");
  const uint32_t rstd = w.unary(
      "rsqrt",
      w.binary("add", w.binary("div", sum, w.constant(n)), w.constant(o.eps)));
  uint32_t y = o.rms ? x : w.binary("sub", x, w.load("row_mean"));
  y = w.binary("mul", y, rstd);
  if (s.weight) y = w.binary("mul", y, w.load("weight"));
  if (s.bias) y = w.binary("add", y, w.load("bias"));
  w.store("output", y);
  if (s.rstd) w.store("rstd", rstd);
  return std::move(w).finish();
}

rt::Program build_norm(const NormShape& s, const NormOptions& o) {
  return build_loop_kernel(describe_norm(s, o), {o.target}).program;
}

}  // namespace spyre::kernels
