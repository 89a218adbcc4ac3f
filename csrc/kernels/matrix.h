// How a 2-D operand lies in device memory, and the stick transfers that
// move a tile of it to or from a scratchpad.
#pragma once

#include <cstdint>

#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class MatrixKind : uint8_t {
  // Row r at byte r * row_pitch; row_pitch a multiple of 128.
  kRowMajor,
  // The device's default layout of a 2-D tensor [rows, cols]:
  // device_size [ceil(cols / E), rows, E]: all rows' first stick, then all
  // rows' second stick, ...
  kStickColumns,
};

struct Matrix {
  uint64_t rows = 0;
  uint64_t cols = 0;
  rt::DType dtype = rt::DType::kFloat16;
  MatrixKind kind = MatrixKind::kRowMajor;
  uint64_t row_pitch = 0;  // kRowMajor only; 0 means the padded row size

  static Matrix row_major(uint64_t rows, uint64_t cols, rt::DType dtype);
  static Matrix stick_columns(uint64_t rows, uint64_t cols, rt::DType dtype);

  uint32_t elements_per_stick() const { return rt::elements_per_stick(dtype); }
  uint64_t sticks_per_row() const;
  uint64_t pitch() const;  // bytes between rows (kRowMajor)
  uint64_t bytes() const;  // device bytes the matrix occupies

  // Moves rows [row0, row0 + nrows) x columns [col0, col0 + ncols) between
  // this matrix (argument `slot`) and a row-major scratchpad tile at `spad`
  // whose rows are `spad_pitch` bytes apart. col0 must start a stick; the
  // tile covers whole sticks, so up to one stick of padding is moved.
  rt::StickTransfer tile(uint32_t slot, uint64_t row0, uint64_t nrows,
                         uint64_t col0, uint64_t ncols, uint32_t spad,
                         uint32_t spad_pitch) const;
};

// Scratchpad bytes of one row of `cols` elements, padded to whole sticks.
uint32_t padded_row_bytes(uint64_t cols, rt::DType dtype);

}  // namespace spyre::kernels
