// Packing narrow rows into shared sticks: the copy of a view whose rows are
// each padded to their own stick (an [R, C] tensor with C short of a stick,
// as MoE routing's [tokens, top_k] indices are) into a dense tensor whose
// rows hold several of them ([R * C] flattened, or [R / g, g * C]).
//
// The elementwise copy cannot do it: it reads and writes along the same
// sticks, and here g source sticks feed one destination stick. On chip each
// core loads its source rows stick by stick into its scratchpad, the vector
// unit moves them side by side (one copy per position k < g within a
// destination row: every g-th source row), and the packed rows are stored
// whole.
#pragma once

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

// out row d = in rows [d * g, (d + 1) * g) side by side, where in is
// [R, C], out is [R / g, g * C], same dtype, any stick layouts (Matrix, no
// batches). Slots: 0 = in, 1 = out (output). Throws KernelBuildError when
// the shapes do not pair up or one destination row does not fit a core's
// scratchpad.
rt::Program build_pack_rows(const Matrix& in, const Matrix& out,
                            const Target& target);

}  // namespace spyre::kernels
