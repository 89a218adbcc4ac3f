// Formula expansion (spyre/kernels/formulas.h): a unary op of a formula's
// name becomes its chain of vector ops, and the ops after it and the stores
// follow it to their new numbers. The values themselves are checked against
// the CPU's functions, eager and compiled, in test_ops_math.py and
// test_eager_compiled_agree.py.
#include "spyre/kernels/formulas.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace spyre::kernels {
namespace {

LoopOp unary(std::string name, uint32_t arg, double value = 0,
             double value2 = 0) {
  LoopOp op;
  op.kind = LoopOpKind::kUnary;
  op.name = std::move(name);
  op.args = {arg};
  op.value = value;
  op.value2 = value2;
  return op;
}

// x, f(x), f(x) * x stored: the formula op in the middle of a chain.
LoopKernel kernel_around(LoopOp formula) {
  LoopKernel k;
  k.name = "formula";
  k.cols = 8;
  k.nodes.resize(1);
  LoopOp x;
  x.kind = LoopOpKind::kConstant;
  x.value = 0.25;
  k.ops.push_back(x);
  k.ops.push_back(std::move(formula));
  LoopOp product;
  product.kind = LoopOpKind::kBinary;
  product.name = "mul";
  product.args = {1, 0};
  k.ops.push_back(product);
  k.stores.push_back(LoopStore{0, 2, "out", std::nullopt});
  return k;
}

TEST(Formulas, AKernelWithoutOneIsLeftAsItIs) {
  EXPECT_FALSE(expand_formulas(kernel_around(unary("exp", 0))).has_value());
  EXPECT_FALSE(is_formula("exp"));
  EXPECT_FALSE(is_formula("log1p"));  // emitted as such, not a chain
}

TEST(Formulas, EachBecomesItsChainAndTheOpsAfterItFollow) {
  for (const LoopOp& formula :
       {unary("acos", 0), unary("erfinv", 0), unary("softplus", 0, 2, 20),
        unary("trunc", 0), unary("round", 0), unary("frac", 0)}) {
    ASSERT_TRUE(is_formula(formula.name));
    const auto expanded = expand_formulas(kernel_around(formula));
    ASSERT_TRUE(expanded.has_value()) << formula.name;
    const LoopKernel& k = *expanded;
    validate_loop_kernel(k);  // every arg names an earlier op
    EXPECT_GT(k.ops.size(), 5u) << formula.name;
    EXPECT_TRUE(std::none_of(k.ops.begin(), k.ops.end(), [](const LoopOp& op) {
      return op.kind == LoopOpKind::kUnary && is_formula(op.name);
    }));
    // The product is last, reads the chain's result and x (still op 0), and
    // is what is stored.
    const uint32_t last = static_cast<uint32_t>(k.ops.size() - 1);
    EXPECT_EQ(k.ops[last].name, "mul");
    EXPECT_EQ(k.ops[last].args[0], last - 1);
    EXPECT_EQ(k.ops[last].args[1], 0u);
    EXPECT_EQ(k.stores[0].value, last);
  }
}

TEST(Formulas, SoftplusTakesItsParametersFromTheOp) {
  const auto expanded =
      expand_formulas(kernel_around(unary("softplus", 0, 2, 20)));
  ASSERT_TRUE(expanded.has_value());
  std::vector<double> constants;
  for (const LoopOp& op : expanded->ops) {
    if (op.kind == LoopOpKind::kConstant) constants.push_back(op.value);
  }
  // x, then beta (x * beta), beta (/ beta), threshold (x * beta > threshold)
  EXPECT_EQ(constants, (std::vector<double>{0.25, 2, 2, 20}));
}

}  // namespace
}  // namespace spyre::kernels
