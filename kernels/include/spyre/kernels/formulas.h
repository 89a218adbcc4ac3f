// Floating functions the vector unit has no op for, written once as chains
// of its ops. An eager kernel (an ElementwiseStep of the function's kind) and
// a compiled one (a unary op of the function's name in a loop kernel
// description) both reach build_loop_kernel, which expands the op into its
// chain: the same instructions, so the same bits, either way.
#pragma once

#include <optional>
#include <string_view>

#include "spyre/kernels/loop_kernel.h"

namespace spyre::kernels {

// Whether `name` (a kUnary op's name) is one of these functions:
//   acos    from the asin polynomial of Cephes' asinf (within 2 ulps in
//           fp32), through asin(sqrt((1 - |x|) / 2)) for |x| > 0.5; NaN
//           outside [-1, 1];
//   erfinv  as the CPU's calc_erfinv: a rational first guess (central range
//           |y| <= 0.7, else the tail form) and two Newton steps; +-inf at
//           +-1, NaN beyond;
//   softplus  as the CPU computes it, with beta the op's value and threshold
//           its value2: x where x * beta > threshold, else
//           log1p(exp(x * beta)) / beta;
//   trunc, frac, round  toward zero, x - trunc(x), and to nearest with ties
//           to even, from floor; signed zeros and non-finite values as the
//           CPU's.
bool is_formula(std::string_view name);

// The kernel with every unary op of a formula's name replaced by its chain
// (fp32 ops of the same node), ops and stores renumbered; nullopt when the
// kernel has none.
std::optional<LoopKernel> expand_formulas(const LoopKernel& kernel);

}  // namespace spyre::kernels
