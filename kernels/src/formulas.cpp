#include "spyre/kernels/formulas.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "spyre/runtime/program.h"

namespace spyre::kernels {
namespace {

using rt::VecOp;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr rt::DType kF32 = rt::DType::kFloat32;

// Appends ops of one node, written as the formulas read; each call returns
// the id of the op it made.
class Chain {
 public:
  Chain(std::vector<LoopOp>& ops, uint32_t node) : ops_(ops), node_(node) {}

  uint32_t unary(VecOp op, uint32_t a) {
    return push(LoopOpKind::kUnary, vec_op_name(op), {a}, kF32);
  }
  uint32_t op(VecOp op, uint32_t a, uint32_t b) {
    return push(LoopOpKind::kBinary, vec_op_name(op), {a, b}, kF32);
  }
  uint32_t op(VecOp op, uint32_t a, double b) {
    return this->op(op, a, constant(b));
  }
  // A bool value: a compared with b.
  uint32_t test(VecOp op, uint32_t a, double b) {
    return push(LoopOpKind::kBinary, vec_op_name(op), {a, constant(b)},
                rt::DType::kBool);
  }
  uint32_t select(uint32_t cond, uint32_t if_true, uint32_t if_false) {
    return push(LoopOpKind::kSelect, "", {cond, if_true, if_false}, kF32);
  }
  uint32_t constant(double value) {
    LoopOp op;
    op.kind = LoopOpKind::kConstant;
    op.node = node_;
    op.dtype = kF32;
    op.value = value;
    ops_.push_back(std::move(op));
    return last();
  }
  // A unary op the emitter knows by name (log1p, expm1).
  uint32_t named(std::string_view name, uint32_t a) {
    return push(LoopOpKind::kUnary, name, {a}, kF32);
  }
  // c[0] * z^n + c[1] * z^(n-1) + ... + c[n], by Horner's rule.
  uint32_t polynomial(uint32_t z, std::initializer_list<double> c) {
    auto it = c.begin();
    uint32_t p = constant(*it++);
    for (; it != c.end(); ++it) p = op(VecOp::kAdd, op(VecOp::kMul, p, z), *it);
    return p;
  }

 private:
  uint32_t push(LoopOpKind kind, std::string_view name,
                std::vector<uint32_t> args, rt::DType dtype) {
    LoopOp op;
    op.kind = kind;
    op.node = node_;
    op.name = std::string(name);
    op.args = std::move(args);
    op.dtype = dtype;
    ops_.push_back(std::move(op));
    return last();
  }
  uint32_t last() const { return static_cast<uint32_t>(ops_.size() - 1); }

  std::vector<LoopOp>& ops_;
  uint32_t node_;
};

// softplus as the CPU computes it: x where x * beta > threshold, else
// log1p(exp(x * beta)) / beta.
uint32_t softplus_chain(Chain& c, uint32_t x, const LoopOp& op) {
  const double beta = op.value, threshold = op.value2;
  const uint32_t scaled = c.op(VecOp::kMul, x, beta);
  const uint32_t soft =
      c.op(VecOp::kDiv, c.named("log1p", c.unary(VecOp::kExp, scaled)), beta);
  return c.select(c.test(VecOp::kGt, scaled, threshold), x, soft);
}

uint32_t acos_chain(Chain& c, uint32_t x, const LoopOp&) {
  const uint32_t magnitude = c.unary(VecOp::kAbs, x);
  const uint32_t outer = c.test(VecOp::kGt, magnitude, 0.5);
  // s: the argument of asin, |s| <= 0.5 (NaN for |x| > 1).
  const uint32_t half_gap =
      c.op(VecOp::kMul, c.op(VecOp::kAdd, c.unary(VecOp::kNeg, magnitude), 1.0),
           0.5);
  const uint32_t s = c.select(outer, c.unary(VecOp::kSqrt, half_gap), x);
  const uint32_t z = c.op(VecOp::kMul, s, s);
  const uint32_t p =
      c.polynomial(z, {4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2,
                       7.4953002686e-2, 1.6666752422e-1});
  const uint32_t asin_s =
      c.op(VecOp::kAdd, c.op(VecOp::kMul, c.op(VecOp::kMul, p, z), s), s);
  // x > 0.5: 2 asin(s); x < -0.5: pi - 2 asin(s); else pi/2 - asin(x).
  const uint32_t twice = c.op(VecOp::kMul, asin_s, 2.0);
  const uint32_t negative_outer =
      c.op(VecOp::kAdd, c.unary(VecOp::kNeg, twice), M_PI);
  const uint32_t inner =
      c.op(VecOp::kAdd, c.unary(VecOp::kNeg, asin_s), M_PI_2);
  const uint32_t outer_value =
      c.select(c.test(VecOp::kLt, x, 0.0), negative_outer, twice);
  return c.select(outer, outer_value, inner);
}

uint32_t erfinv_chain(Chain& c, uint32_t y, const LoopOp&) {
  const uint32_t magnitude = c.unary(VecOp::kAbs, y);
  // Central range: y * num(y^2) / den(y^2).
  const uint32_t z = c.op(VecOp::kMul, y, y);
  const uint32_t num =
      c.polynomial(z, {-0.140543331, 0.914624893, -1.645349621, 0.886226899});
  const uint32_t den = c.polynomial(
      z, {0.012229801, -0.329097515, 1.442710462, -2.118377725, 1.0});
  const uint32_t central = c.op(VecOp::kDiv, c.op(VecOp::kMul, y, num), den);
  // Tail: w = sqrt(-log((1 - |y|) / 2)), copysign(num(w), y) / den(w).
  const uint32_t gap =
      c.op(VecOp::kDiv, c.op(VecOp::kAdd, c.unary(VecOp::kNeg, magnitude), 1.0),
           2.0);
  const uint32_t w =
      c.unary(VecOp::kSqrt, c.unary(VecOp::kNeg, c.unary(VecOp::kLog, gap)));
  const uint32_t tail_num =
      c.polynomial(w, {1.641345311, 3.429567803, -1.624906493, -1.970840454});
  const uint32_t tail_den = c.polynomial(w, {1.637067800, 3.543889200, 1.0});
  const uint32_t signed_num = c.select(
      c.test(VecOp::kLt, y, 0.0), c.unary(VecOp::kNeg, tail_num), tail_num);
  const uint32_t tail = c.op(VecOp::kDiv, signed_num, tail_den);
  uint32_t x = c.select(c.test(VecOp::kLe, magnitude, 0.7), central, tail);
  // Two Newton steps: x -= (erf(x) - y) / (2 / sqrt(pi) * exp(-x^2)).
  for (int step = 0; step < 2; ++step) {
    const uint32_t residual = c.op(VecOp::kSub, c.unary(VecOp::kErf, x), y);
    const uint32_t slope = c.op(
        VecOp::kMul,
        c.unary(VecOp::kExp, c.unary(VecOp::kNeg, c.op(VecOp::kMul, x, x))),
        M_2_SQRTPI);
    x = c.op(VecOp::kSub, x, c.op(VecOp::kDiv, residual, slope));
  }
  // |y| == 1: +-inf (the tail form gives inf / inf); |y| > 1 gave NaN.
  const uint32_t infinite = c.op(VecOp::kMul, y, kInf);
  return c.select(c.test(VecOp::kEq, magnitude, 1.0), infinite, x);
}

// Toward zero: floor for x >= 0 (and NaN), ceil = -floor(-x) below, so
// -0.5 gives -0 as on the CPU.
uint32_t trunc_chain(Chain& c, uint32_t x, const LoopOp&) {
  const uint32_t up =
      c.unary(VecOp::kNeg, c.unary(VecOp::kFloor, c.unary(VecOp::kNeg, x)));
  return c.select(c.test(VecOp::kLt, x, 0.0), up, c.unary(VecOp::kFloor, x));
}

// x - trunc(x), as the CPU computes it (NaN for +-inf).
uint32_t frac_chain(Chain& c, uint32_t x, const LoopOp& op) {
  return c.op(VecOp::kSub, x, trunc_chain(c, x, op));
}

// To nearest, ties to even (the CPU's nearbyint): floor(x), plus one when
// the fraction is above a half or exactly a half on an odd floor. x - floor
// is exact in fp32; infinities and NaN keep themselves (their fraction is
// NaN, so no step is added). A zero result takes x's sign (-0.4 gives -0).
uint32_t round_chain(Chain& c, uint32_t x, const LoopOp&) {
  const uint32_t down = c.unary(VecOp::kFloor, x);
  const uint32_t fraction = c.op(VecOp::kSub, x, down);
  const uint32_t half_down =
      c.unary(VecOp::kFloor, c.op(VecOp::kMul, down, 0.5));
  const uint32_t odd =
      c.op(VecOp::kSub, down, c.op(VecOp::kMul, half_down, 2.0));
  const uint32_t at_half =
      c.select(c.test(VecOp::kEq, fraction, 0.5), odd, c.constant(0.0));
  const uint32_t step =
      c.select(c.test(VecOp::kGt, fraction, 0.5), c.constant(1.0), at_half);
  const uint32_t rounded = c.op(VecOp::kAdd, down, step);
  return c.select(c.test(VecOp::kEq, rounded, 0.0), c.op(VecOp::kMul, x, 0.0),
                  rounded);
}

// The chain of a unary op of a formula's name, applied to x; the op itself
// carries the parameters (softplus' beta and threshold).
using ChainFn = uint32_t (*)(Chain&, uint32_t x, const LoopOp& op);

ChainFn chain_named(std::string_view name) {
  if (name == "acos") return acos_chain;
  if (name == "erfinv") return erfinv_chain;
  if (name == "softplus") return softplus_chain;
  if (name == "trunc") return trunc_chain;
  if (name == "round") return round_chain;
  if (name == "frac") return frac_chain;
  return nullptr;
}

ChainFn chain_for(const LoopOp& op) {
  return op.kind == LoopOpKind::kUnary ? chain_named(op.name) : nullptr;
}

}  // namespace

bool is_formula(std::string_view name) { return chain_named(name) != nullptr; }

std::optional<LoopKernel> expand_formulas(const LoopKernel& kernel) {
  bool any = false;
  for (const LoopOp& op : kernel.ops) any = any || chain_for(op) != nullptr;
  if (!any) return std::nullopt;
  LoopKernel out = kernel;
  out.ops.clear();
  std::vector<uint32_t> id_of(kernel.ops.size());  // old op id -> new
  for (size_t i = 0; i < kernel.ops.size(); ++i) {
    LoopOp op = kernel.ops[i];
    for (uint32_t& a : op.args) a = id_of.at(a);
    if (const ChainFn chain = chain_for(op)) {
      Chain c(out.ops, op.node);
      id_of[i] = chain(c, op.args.at(0), op);
      continue;
    }
    out.ops.push_back(std::move(op));
    id_of[i] = static_cast<uint32_t>(out.ops.size() - 1);
  }
  for (LoopStore& store : out.stores) store.value = id_of.at(store.value);
  return out;
}

}  // namespace spyre::kernels
