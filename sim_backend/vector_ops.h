// Classes of vector ops that both the vector unit's semantics
// (kernels_vector.cpp) and its cost model (timing.cpp) depend on, kept in one
// place so a new op is classified once for both.
#pragma once

#include "spyre/runtime/program.h"

namespace spyre::sim {

// Functions of one operand computed by a transcendental routine (exp, log,
// tanh, the activations, erf, sin, cos).
inline bool is_transcendental_unary(rt::VecOp op) {
  using rt::VecOp;
  switch (op) {
    case VecOp::kExp:
    case VecOp::kLog:
    case VecOp::kTanh:
    case VecOp::kSigmoid:
    case VecOp::kGelu:
    case VecOp::kGeluTanh:
    case VecOp::kSilu:
    case VecOp::kErf:
    case VecOp::kSin:
    case VecOp::kCos:
      return true;
    default:
      return false;
  }
}

// Square roots and reciprocals: computed by the divider.
inline bool is_root_or_reciprocal(rt::VecOp op) {
  using rt::VecOp;
  return op == VecOp::kSqrt || op == VecOp::kRsqrt || op == VecOp::kRecip;
}

}  // namespace spyre::sim
