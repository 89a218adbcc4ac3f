#include "kernels/matrix.h"

#include "kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {

Matrix Matrix::row_major(uint64_t rows, uint64_t cols, rt::DType dtype) {
  return Matrix{rows, cols, dtype, MatrixKind::kRowMajor, 0};
}

Matrix Matrix::stick_columns(uint64_t rows, uint64_t cols, rt::DType dtype) {
  return Matrix{rows, cols, dtype, MatrixKind::kStickColumns, 0};
}

uint64_t Matrix::sticks_per_row() const {
  return ceil_div(cols, elements_per_stick());
}

uint64_t Matrix::pitch() const {
  return row_pitch != 0 ? row_pitch : sticks_per_row() * rt::kStickBytes;
}

uint64_t Matrix::bytes() const {
  if (kind == MatrixKind::kStickColumns) {
    return sticks_per_row() * rows * rt::kStickBytes;
  }
  return rows * pitch();
}

uint32_t padded_row_bytes(uint64_t cols, rt::DType dtype) {
  return static_cast<uint32_t>(ceil_div(cols, rt::elements_per_stick(dtype)) *
                               rt::kStickBytes);
}

rt::StickTransfer Matrix::tile(uint32_t slot, uint64_t row0, uint64_t nrows,
                               uint64_t col0, uint64_t ncols, uint32_t spad,
                               uint32_t spad_pitch) const {
  const uint64_t per_stick = elements_per_stick();
  rt::check(col0 % per_stick == 0, rt::ErrorCode::kInvalidArgument,
            "tile column ", col0, " does not start a stick of ", per_stick,
            " elements");
  rt::check(
      row0 + nrows <= rows && col0 + ncols <= cols && nrows > 0 && ncols > 0,
      rt::ErrorCode::kInvalidArgument, "tile [", row0, "+", nrows, ", ", col0,
      "+", ncols, ") outside a ", rows, "x", cols, " matrix");
  const uint64_t stick0 = col0 / per_stick;
  const uint64_t nsticks = ceil_div(ncols, per_stick);
  rt::StickTransfer x;
  x.spad = spad;
  if (kind == MatrixKind::kRowMajor) {
    // One run per row: the row's sticks are contiguous on both sides.
    x.dram = {slot, row0 * pitch() + stick0 * rt::kStickBytes};
    x.run_bytes = static_cast<uint32_t>(nsticks * rt::kStickBytes);
    x.count1 = static_cast<uint32_t>(nrows);
    x.dram_stride1 = static_cast<int64_t>(pitch());
    x.spad_stride1 = spad_pitch;
    return x;
  }
  // Stick columns: consecutive rows of one stick column are contiguous in
  // device memory, but land one tile row apart in the scratchpad.
  x.dram = {slot, (stick0 * rows + row0) * rt::kStickBytes};
  x.run_bytes = rt::kStickBytes;
  x.count1 = static_cast<uint32_t>(nrows);
  x.dram_stride1 = rt::kStickBytes;
  x.spad_stride1 = spad_pitch;
  x.count2 = static_cast<uint32_t>(nsticks);
  x.dram_stride2 = static_cast<int64_t>(rows * rt::kStickBytes);
  x.spad_stride2 = rt::kStickBytes;
  return x;
}

}  // namespace spyre::kernels
