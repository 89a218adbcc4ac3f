// Row-wise kernels of eager ops (norms, softmax) written as loop-kernel
// descriptions (loop_kernel.h), the form the compiler gives a fused graph,
// and built by the same builder: one program generator for both paths, so an
// eager op and its compiled form agree bit for bit.
//
// The iteration space is a matrix's: an outer var per batch dim and per row
// dim but the innermost, the row var over the innermost row dim (split
// across cores), the col var over the columns (the stick dim, whole in a
// block). Operands are matrices over the same rows (each split to the
// space's row dims), column vectors broadcast over the rows, and per-row
// statistics laid out as a reduction's result (reduce.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spyre/kernels/loop_kernel.h"
#include "spyre/kernels/matrix.h"

namespace spyre::kernels {

class RowKernelWriter {
 public:
  RowKernelWriter(std::string name, const Matrix& space);

  // Argument slots, in slot order. Each throws KernelBuildError when the
  // matrix does not cover the space as stated. A rows operand of one
  // column holds one value per row (each in a stick of its own, when the
  // rows step whole sticks).
  void rows_operand(const std::string& name, const Matrix& m, bool is_output);
  void col_vector(const std::string& name, const Matrix& m);  // 1 x cols
  // rows = the space's rows / inner, cols = inner (the innermost row dim)
  void row_stats(const std::string& name, const Matrix& m, bool is_output);

  // Starts the next fused node (the first is open from the start).
  void next_node();
  // An argument's value at the current point (fp32 for floating buffers),
  // or a value an earlier node stored under `buffer` without a slot.
  uint32_t load(const std::string& buffer);
  uint32_t constant(double value);
  uint32_t unary(const std::string& name, uint32_t x);
  uint32_t binary(const std::string& name, uint32_t a, uint32_t b);
  // a comparison ("eq", "lt", ...): a bool value
  uint32_t compare(const std::string& name, uint32_t a, uint32_t b);
  // `cond` ? a : b, in fp32
  uint32_t select(uint32_t cond, uint32_t a, uint32_t b);
  uint32_t reduction(const std::string& name, uint32_t x, uint32_t part = 0);
  uint32_t round_to(uint32_t x, rt::DType dtype);
  // `value` into the argument `buffer` (rounded to its dtype), or kept for
  // later nodes when `buffer` names no argument.
  void store(const std::string& buffer, uint32_t value);

  LoopKernel finish() &&;

 private:
  // a new op of the current node; the caller sets its other fields
  uint32_t add(LoopOpKind kind, std::vector<uint32_t> args,
               std::string name = {});
  void add_buffer(const std::string& name, const Matrix& m, bool is_output,
                  std::vector<int64_t> host_sizes,
                  std::vector<int64_t> dim_strides, BufferAccess access);

  LoopKernel k_;
  std::vector<int64_t> row_sizes_;  // outer sizes, then the row var's
  std::vector<std::pair<std::string, BufferAccess>> accesses_;
};

}  // namespace spyre::kernels
