// How a 2-D operand lies in device memory, and the stick transfers that
// move a tile of it to or from a scratchpad.
//
// Besides the two plain forms (row-major and the default stick-columns
// layout of a 2-D tensor), a matrix can be strided: its rows are the
// flattened index space of one or more row dimensions, each with a byte
// stride, and its columns run along sticks with a byte stride between
// consecutive sticks of a row. That form describes any tensor in a stick
// layout whose last dimension is the stick dimension (N-d tensors, batches,
// slices along non-stick dimensions, expanded rows) without copying it.
#pragma once

#include <cstdint>
#include <vector>

#include "spyre/runtime/program.h"

namespace spyre::kernels {

enum class MatrixKind : uint8_t {
  // Row r at byte r * row_pitch; row_pitch a multiple of 128.
  kRowMajor,
  // The device's default layout of a 2-D tensor [rows, cols]:
  // device_size [ceil(cols / E), rows, E]: all rows' first stick, then all
  // rows' second stick, ...
  kStickColumns,
  // Rows from `row_dims`, sticks `stick_stride` bytes apart, from `offset`.
  kStrided,
};

// One dimension of a strided index space: `size` steps of `stride` bytes
// (a multiple of 128; 0 repeats the same bytes, as an expanded view does).
struct StridedDim {
  uint64_t size = 1;
  int64_t stride = 0;
};

struct Matrix {
  uint64_t rows = 0;
  uint64_t cols = 0;
  rt::DType dtype = rt::DType::kFloat16;
  MatrixKind kind = MatrixKind::kRowMajor;
  uint64_t row_pitch = 0;  // kRowMajor only; 0 means the padded row size
  // kStrided only.
  uint64_t offset = 0;  // byte offset of element (0, 0)
  std::vector<StridedDim>
      row_dims{};            // outermost first; sizes multiply to rows
  int64_t stick_stride = 0;  // bytes between sticks of one row
  // Batch dimensions (any kind): matrix b starts batch_offset(b) bytes later.
  // Operands of one batched kernel list the same sizes; a stride of 0
  // broadcasts the matrix across that dimension.
  std::vector<StridedDim> batch_dims{};

  static Matrix row_major(uint64_t rows, uint64_t cols, rt::DType dtype);
  static Matrix stick_columns(uint64_t rows, uint64_t cols, rt::DType dtype);
  static Matrix strided(rt::DType dtype, uint64_t offset,
                        std::vector<StridedDim> row_dims, uint64_t cols,
                        int64_t stick_stride);

  uint32_t elements_per_stick() const { return rt::elements_per_stick(dtype); }
  uint64_t sticks_per_row() const;
  uint64_t pitch() const;  // bytes between rows (kRowMajor)
  // Device bytes the matrix (all batches) reaches from the slot's start.
  uint64_t bytes() const;

  uint64_t batch_count() const;  // product of batch sizes (1 without)
  uint64_t batch_offset(uint64_t batch) const;
  // The same matrix in the strided form, one batch: `batch` selected.
  Matrix strided_form(uint64_t batch = 0) const;

  // Moves rows [row0, row0 + nrows) x columns [col0, col0 + ncols) of batch
  // `batch` between this matrix (argument `slot`) and a row-major scratchpad
  // tile at `spad` whose rows are `spad_pitch` bytes apart. col0 must start
  // a stick; the tile covers whole sticks, so up to one stick of padding is
  // moved. One transfer per run of the innermost row dimension.
  std::vector<rt::StickTransfer> tiles(uint32_t slot, uint64_t row0,
                                       uint64_t nrows, uint64_t col0,
                                       uint64_t ncols, uint32_t spad,
                                       uint32_t spad_pitch,
                                       uint64_t batch = 0) const;
  // The same when the tile is known to need one transfer (plain forms, or a
  // strided matrix with a single row dimension); throws otherwise.
  rt::StickTransfer tile(uint32_t slot, uint64_t row0, uint64_t nrows,
                         uint64_t col0, uint64_t ncols, uint32_t spad,
                         uint32_t spad_pitch, uint64_t batch = 0) const;
};

// Scratchpad bytes of one row of `cols` elements, padded to whole sticks.
uint32_t padded_row_bytes(uint64_t cols, rt::DType dtype);

// A scratchpad tile view of `dtype` elements, rows `pitch` bytes apart.
rt::Tile spad_tile(uint32_t offset, rt::DType dtype, uint32_t pitch);
// The same tile read transposed (its columns as rows).
rt::Tile transposed(rt::Tile tile);

}  // namespace spyre::kernels
