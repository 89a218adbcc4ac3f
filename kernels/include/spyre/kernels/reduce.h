// Reductions (sum, max, min, prod, argmax, argmin) of strided matrices,
// work split across cores. Two forms cover a reduction over any set of
// dimensions of a stick-layout tensor (the caller composes them, one launch
// per step, keeping fp32 partials between steps):
//   along sticks: each row of `in` (its last, stick dimension) -> one value;
//     the outputs of one run of in's innermost row dimension form one row of
//     `out` (which is how the result tensor is laid out: its stick dimension
//     is the input's next-to-last dimension).
//   along rows: in's innermost row dimension is reduced, columns kept.
// Floating inputs accumulate in fp32 and round once into out's dtype (after
// `scale`, which turns a sum into a mean). Arg reductions write int64 indices
// (first index on ties, NaN wins, as PyTorch) and need the reduced extent in
// one scratchpad tile.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd, kArgMax, kArgMin };

bool is_arg_reduction(ReduceOp op);
const char* reduce_op_name(ReduceOp op);

struct ReduceOptions {
  Target target;     // the device planned for (program_builder.h)
  double scale = 1;  // multiplies the result before rounding (mean: 1 / n)
};

// Slots: 0 = in, 1 = out. out.rows * out.cols == in.rows and out.cols is the
// size of in's innermost row dimension (1 when in has one row).
rt::Program build_reduce_along_sticks(const Matrix& in, const Matrix& out,
                                      ReduceOp op,
                                      const ReduceOptions& options);

// Slots: 0 = in, 1 = out. out.rows == in.rows / R, where R is the size of
// in's innermost row dimension (the one reduced), and out.cols == in.cols.
rt::Program build_reduce_along_rows(const Matrix& in, const Matrix& out,
                                    ReduceOp op, const ReduceOptions& options);

// Shared by the row-wise kernels (reductions, norms): a work item is one
// output row's column chunk [col0, col0 + cols) of whole sticks.
struct RowChunk {
  uint64_t row, col0, cols;
};
// Chunks of `out` (multiples of `quantum` columns, at most `max_chunk`) cut
// so that the work spreads over `cores`.
std::vector<RowChunk> row_chunks(const Matrix& out, uint64_t quantum,
                                 uint32_t cores, uint64_t max_chunk);
uint64_t widest_chunk(const std::vector<RowChunk>& chunks);
// Gives each used core a contiguous run of chunks, in order.
void for_each_chunk_on_cores(
    ProgramBuilder& builder, const std::vector<RowChunk>& chunks,
    const std::function<void(CoreBuilder&, const RowChunk&)>& emit);
// One Reduce instruction: each of the `rows` rows (`cols` wide) of `src`
// into one value of `dst`, combined with what `dst` holds when `accumulate`.
rt::Reduce row_reduce(rt::RedOp op, rt::Tile dst, rt::Tile src, uint64_t rows,
                      uint64_t cols, bool accumulate = false);
// Rounds chunk.cols values of `acc_dtype` at scratchpad `acc` (times
// `scale`) into out's dtype at `staging`, and stores them as the chunk of
// out (argument `slot`).
void store_chunk(CoreBuilder& core, const Matrix& out, uint32_t slot,
                 const RowChunk& chunk, uint32_t acc, rt::DType acc_dtype,
                 uint32_t staging, double scale = 1);

}  // namespace spyre::kernels
