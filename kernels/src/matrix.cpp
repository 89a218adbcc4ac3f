#include "spyre/kernels/matrix.h"

#include <algorithm>

#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

// Byte offset of the last step of each dimension, summed.
int64_t extent(const std::vector<StridedDim>& dims) {
  int64_t total = 0;
  for (const StridedDim& d : dims) {
    if (d.size > 0) total += static_cast<int64_t>(d.size - 1) * d.stride;
  }
  return total;
}

}  // namespace

Matrix Matrix::row_major(uint64_t rows, uint64_t cols, rt::DType dtype) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.dtype = dtype;
  m.kind = MatrixKind::kRowMajor;
  return m;
}

Matrix Matrix::stick_columns(uint64_t rows, uint64_t cols, rt::DType dtype) {
  Matrix m = row_major(rows, cols, dtype);
  m.kind = MatrixKind::kStickColumns;
  return m;
}

Matrix Matrix::strided(rt::DType dtype, uint64_t offset,
                       std::vector<StridedDim> row_dims, uint64_t cols,
                       int64_t stick_stride) {
  Matrix m = row_major(1, cols, dtype);
  m.kind = MatrixKind::kStrided;
  m.offset = offset;
  m.row_dims = std::move(row_dims);
  for (const StridedDim& d : m.row_dims) m.rows *= d.size;
  m.stick_stride = stick_stride;
  return m;
}

uint64_t Matrix::sticks_per_row() const {
  return ceil_div(cols, elements_per_stick());
}

uint64_t Matrix::pitch() const {
  return row_pitch != 0 ? row_pitch : sticks_per_row() * rt::kStickBytes;
}

uint64_t Matrix::batch_count() const {
  uint64_t n = 1;
  for (const StridedDim& d : batch_dims) n *= d.size;
  return n;
}

uint64_t Matrix::batch_offset(uint64_t batch) const {
  int64_t off = 0;
  for (auto it = batch_dims.rbegin(); it != batch_dims.rend(); ++it) {
    off += static_cast<int64_t>(batch % it->size) * it->stride;
    batch /= it->size;
  }
  return static_cast<uint64_t>(off);
}

Matrix Matrix::strided_form(uint64_t batch) const {
  const uint64_t base = batch_offset(batch);
  if (kind == MatrixKind::kStrided) {
    Matrix m = *this;
    m.offset += base;
    m.batch_dims.clear();
    return m;
  }
  if (kind == MatrixKind::kRowMajor) {
    return strided(dtype, base, {{rows, static_cast<int64_t>(pitch())}}, cols,
                   rt::kStickBytes);
  }
  return strided(dtype, base, {{rows, rt::kStickBytes}}, cols,
                 static_cast<int64_t>(rows * rt::kStickBytes));
}

uint64_t Matrix::bytes() const {
  if (rows == 0 || cols == 0) return offset;
  const int64_t batches = extent(batch_dims);
  if (kind == MatrixKind::kStickColumns) {
    return batches + sticks_per_row() * rows * rt::kStickBytes;
  }
  if (kind == MatrixKind::kRowMajor) return batches + rows * pitch();
  return offset + batches + extent(row_dims) +
         static_cast<int64_t>(sticks_per_row() - 1) * stick_stride +
         rt::kStickBytes;
}

uint32_t padded_row_bytes(uint64_t cols, rt::DType dtype) {
  return static_cast<uint32_t>(ceil_div(cols, rt::elements_per_stick(dtype)) *
                               rt::kStickBytes);
}

rt::Tile spad_tile(uint32_t offset, rt::DType dtype, uint32_t pitch) {
  return {offset, dtype, static_cast<int32_t>(pitch),
          static_cast<int32_t>(rt::element_size(dtype))};
}

rt::Tile transposed(rt::Tile tile) {
  std::swap(tile.row_stride, tile.col_stride);
  return tile;
}

std::vector<rt::StickTransfer> Matrix::tiles(uint32_t slot, uint64_t row0,
                                             uint64_t nrows, uint64_t col0,
                                             uint64_t ncols, uint32_t spad,
                                             uint32_t spad_pitch,
                                             uint64_t batch) const {
  const uint64_t per_stick = elements_per_stick();
  rt::check(col0 % per_stick == 0, rt::ErrorCode::kInvalidArgument,
            "tile column ", col0, " does not start a stick of ", per_stick,
            " elements");
  rt::check(
      row0 + nrows <= rows && col0 + ncols <= cols && nrows > 0 && ncols > 0,
      rt::ErrorCode::kInvalidArgument, "tile [", row0, "+", nrows, ", ", col0,
      "+", ncols, ") outside a ", rows, "x", cols, " matrix");
  const Matrix m = strided_form(batch);
  const uint64_t stick0 = col0 / per_stick;
  const uint64_t nsticks = ceil_div(ncols, per_stick);
  const StridedDim inner =
      m.row_dims.empty() ? StridedDim{1, 0} : m.row_dims.back();
  std::vector<rt::StickTransfer> out;
  for (uint64_t r = row0; r < row0 + nrows;) {
    const uint64_t run =
        std::min(inner.size - r % inner.size, row0 + nrows - r);
    int64_t addr = static_cast<int64_t>(m.offset) +
                   static_cast<int64_t>(stick0) * m.stick_stride;
    uint64_t rest = r;
    for (auto it = m.row_dims.rbegin(); it != m.row_dims.rend(); ++it) {
      addr += static_cast<int64_t>(rest % it->size) * it->stride;
      rest /= it->size;
    }
    rt::StickTransfer x;
    x.dram = {slot, static_cast<uint64_t>(addr)};
    x.spad = spad + static_cast<uint32_t>((r - row0) * spad_pitch);
    x.count1 = static_cast<uint32_t>(run);
    x.dram_stride1 = inner.stride;
    x.spad_stride1 = spad_pitch;
    if (m.stick_stride == rt::kStickBytes || nsticks == 1) {
      // A row's sticks are contiguous on both sides: one run per row.
      x.run_bytes = static_cast<uint32_t>(nsticks * rt::kStickBytes);
    } else {
      x.run_bytes = rt::kStickBytes;
      x.count2 = static_cast<uint32_t>(nsticks);
      x.dram_stride2 = m.stick_stride;
      x.spad_stride2 = rt::kStickBytes;
    }
    out.push_back(x);
    r += run;
  }
  return out;
}

rt::StickTransfer Matrix::tile(uint32_t slot, uint64_t row0, uint64_t nrows,
                               uint64_t col0, uint64_t ncols, uint32_t spad,
                               uint32_t spad_pitch, uint64_t batch) const {
  auto xs = tiles(slot, row0, nrows, col0, ncols, spad, spad_pitch, batch);
  rt::check(xs.size() == 1, rt::ErrorCode::kInvalidArgument, "tile of ", nrows,
            " rows crosses ", xs.size(),
            " runs of the row dimensions; use tiles()");
  return xs.front();
}

}  // namespace spyre::kernels
