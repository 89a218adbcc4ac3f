#include "ops/math_steps.h"

#include <cmath>
#include <initializer_list>
#include <limits>

namespace spyre::torch_glue::ops {
namespace {

using rt::VecOp;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Steps over fp32 values by number, written as the formulas read.
class Chain {
 public:
  explicit Chain(Operands& ops) : ops_(ops) {}

  int unary(VecOp op, int a) {
    return ops_.push(kernels::unary_step(op, a, kF32));
  }
  int op(VecOp op, int a, int b) {
    return ops_.push(kernels::binary_step(op, a, b, kF32));
  }
  int op(VecOp op, int a, double b) {
    return ops_.push(kernels::scalar_step(op, a, b, kF32));
  }
  // A bool value: a compared with b.
  int test(VecOp op, int a, double b) {
    return ops_.push(kernels::scalar_step(op, a, b, rt::DType::kBool));
  }
  int select(int cond, int if_true, int if_false) {
    return ops_.push(kernels::select_step(cond, if_true, if_false, kF32));
  }
  int constant(double value) {
    return ops_.push(kernels::fill_step(value, kF32));
  }
  // c[0] * z^n + c[1] * z^(n-1) + ... + c[n], by Horner's rule.
  int polynomial(int z, std::initializer_list<double> c) {
    auto it = c.begin();
    int p = constant(*it++);
    for (; it != c.end(); ++it) p = op(VecOp::kAdd, op(VecOp::kMul, p, z), *it);
    return p;
  }

 private:
  static constexpr rt::DType kF32 = rt::DType::kFloat32;
  Operands& ops_;
};

}  // namespace

int log1p_steps(Operands& ops, int x) {
  return ops.push(kernels::near_zero_step(false, x, rt::DType::kFloat32));
}

int expm1_steps(Operands& ops, int x) {
  return ops.push(kernels::near_zero_step(true, x, rt::DType::kFloat32));
}

int softplus_steps(Operands& ops, int x, double beta, double threshold) {
  Chain c(ops);
  const int scaled = c.op(VecOp::kMul, x, beta);
  const int soft =
      c.op(VecOp::kDiv, log1p_steps(ops, c.unary(VecOp::kExp, scaled)), beta);
  return c.select(c.test(VecOp::kGt, scaled, threshold), x, soft);
}

int acos_steps(Operands& ops, int x) {
  Chain c(ops);
  const int magnitude = c.unary(VecOp::kAbs, x);
  const int outer = c.test(VecOp::kGt, magnitude, 0.5);
  // s: the argument of asin, |s| <= 0.5 (NaN for |x| > 1).
  const int half_gap =
      c.op(VecOp::kMul, c.op(VecOp::kAdd, c.unary(VecOp::kNeg, magnitude), 1.0),
           0.5);
  const int s = c.select(outer, c.unary(VecOp::kSqrt, half_gap), x);
  const int z = c.op(VecOp::kMul, s, s);
  const int p =
      c.polynomial(z, {4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2,
                       7.4953002686e-2, 1.6666752422e-1});
  const int asin_s =
      c.op(VecOp::kAdd, c.op(VecOp::kMul, c.op(VecOp::kMul, p, z), s), s);
  // x > 0.5: 2 asin(s); x < -0.5: pi - 2 asin(s); else pi/2 - asin(x).
  const int twice = c.op(VecOp::kMul, asin_s, 2.0);
  const int negative_outer =
      c.op(VecOp::kAdd, c.unary(VecOp::kNeg, twice), M_PI);
  const int inner = c.op(VecOp::kAdd, c.unary(VecOp::kNeg, asin_s), M_PI_2);
  const int outer_value =
      c.select(c.test(VecOp::kLt, x, 0.0), negative_outer, twice);
  return c.select(outer, outer_value, inner);
}

int erfinv_steps(Operands& ops, int y) {
  Chain c(ops);
  const int magnitude = c.unary(VecOp::kAbs, y);
  // Central range: y * num(y^2) / den(y^2).
  const int z = c.op(VecOp::kMul, y, y);
  const int num =
      c.polynomial(z, {-0.140543331, 0.914624893, -1.645349621, 0.886226899});
  const int den = c.polynomial(
      z, {0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0});
  const int central = c.op(VecOp::kDiv, c.op(VecOp::kMul, y, num), den);
  // Tail: w = sqrt(-log((1 - |y|) / 2)), copysign(num(w), y) / den(w).
  const int gap =
      c.op(VecOp::kDiv, c.op(VecOp::kAdd, c.unary(VecOp::kNeg, magnitude), 1.0),
           2.0);
  const int w =
      c.unary(VecOp::kSqrt, c.unary(VecOp::kNeg, c.unary(VecOp::kLog, gap)));
  const int tail_num =
      c.polynomial(w, {1.641345311, 3.429567803, -1.624906493, -1.970840454});
  const int tail_den = c.polynomial(w, {1.637067800, 3.543889200, 1.0});
  const int signed_num = c.select(c.test(VecOp::kLt, y, 0.0),
                                  c.unary(VecOp::kNeg, tail_num), tail_num);
  const int tail = c.op(VecOp::kDiv, signed_num, tail_den);
  int x = c.select(c.test(VecOp::kLe, magnitude, 0.7), central, tail);
  // Two Newton steps: x -= (erf(x) - y) / (2 / sqrt(pi) * exp(-x^2)).
  for (int step = 0; step < 2; ++step) {
    const int residual = c.op(VecOp::kSub, c.unary(VecOp::kErf, x), y);
    const int slope = c.op(
        VecOp::kMul,
        c.unary(VecOp::kExp, c.unary(VecOp::kNeg, c.op(VecOp::kMul, x, x))),
        M_2_SQRTPI);
    x = c.op(VecOp::kSub, x, c.op(VecOp::kDiv, residual, slope));
  }
  // |y| == 1: +-inf (the tail form gives inf / inf); |y| > 1 gave NaN.
  const int infinite = c.op(VecOp::kMul, y, kInf);
  return c.select(c.test(VecOp::kEq, magnitude, 1.0), infinite, x);
}

}  // namespace spyre::torch_glue::ops
