// Floating functions the vector unit has no op for, as chains of its ops
// (elementwise_steps.h): each appends its steps to `ops`, reading value `x`
// (fp32), and returns the number of the value it makes. Each follows the
// CPU's formula (or, where that calls a libm function with no vector op, an
// accurate rewrite of it), with its special values handled as the CPU does.
#pragma once

#include "ops/elementwise_steps.h"

namespace spyre::torch_glue::ops {

// log(1 + x) and exp(x) - 1, accurate near 0: one step each, the loop
// kernel's unary ops of those names (Goldberg's rewrites, written once in
// kernels/src/loop_kernel_emit.cpp for eager and compiled code).
int log1p_steps(Operands& ops, int x);
int expm1_steps(Operands& ops, int x);
// softplus as the CPU computes it: x where x * beta > threshold, else
// log1p(exp(x * beta)) / beta.
int softplus_steps(Operands& ops, int x, double beta, double threshold);
// acos from the asin polynomial of Cephes' asinf (within 2 ulps in fp32),
// through asin(sqrt((1 - |x|) / 2)) for |x| > 0.5; NaN outside [-1, 1].
int acos_steps(Operands& ops, int x);
// erfinv as the CPU's calc_erfinv: a rational first guess (central range
// |y| <= 0.7, else the tail form) and two Newton steps; +-inf at +-1, NaN
// beyond.
int erfinv_steps(Operands& ops, int x);

}  // namespace spyre::torch_glue::ops
