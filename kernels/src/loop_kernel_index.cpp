// Values a loop kernel (loop_kernel.h) makes from the iteration itself: index
// expressions (iota) and random draws (RandFill), both affine in the block's
// row and col vars.
#include "loop_kernel_internal.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels::loop {

BlockEmitter::Affine BlockEmitter::affine_in_block(const LoopOp& op,
                                                   const Shape& s) const {
  Affine e{0, 0, op.constant};
  for (const IndexTerm& t : op.terms) {
    if (t.role == LoopRole::kRow && k_.rows) {
      e.row += t.coeff;
    } else if (t.role == LoopRole::kCol && k_.cols) {
      e.col += t.coeff;
    } else if (auto x = s.fixed.value(t.role, t.index)) {
      e.rest += t.coeff * *x;
    } else {
      fail("index expression is not affine in the block's loop variables");
    }
  }
  e.rest += e.row * s.r0;
  return e;
}

BlockEmitter::TileId BlockEmitter::index_tile(const LoopOp& op,
                                              const Shape& s) {
  const Affine e = affine_in_block(op, s);
  const rt::DType dtype = op.dtype.value_or(kF32);
  const double start = op.value + op.scale * static_cast<double>(e.rest);
  const double row_step = op.scale * static_cast<double>(e.row);
  const double col_step = op.scale * static_cast<double>(e.col);
  // One iota when the rows continue each other's columns (an iota counts
  // r * cols + c): the one rounding of an eager arange.
  if (e.col != 0 && (e.row == e.col * s.K || (e.row != 0 && s.R == 1))) {
    const TileId dst = new_tile(dtype, true, true);
    vec(rt::VecOp::kIota, dst, {}, s.R, s.K, start, col_step);
    return dst;
  }
  if (e.row != 0 && e.col != 0) {
    const TileId rows = new_tile(dtype, true, false);
    vec(rt::VecOp::kIota, rows, {}, s.R, 1, start, row_step);
    const TileId cols = new_tile(dtype, false, true);
    vec(rt::VecOp::kIota, cols, {}, 1, s.K, 0.0, col_step);
    const TileId dst = new_tile(dtype, true, true);
    vec(rt::VecOp::kAdd, dst, {rows, cols}, s.R, s.K);
    free_tile(rows);
    free_tile(cols);
    return dst;
  }
  const bool has_rows = e.row != 0, has_cols = e.col != 0;
  const TileId dst = new_tile(dtype, has_rows, has_cols);
  if (has_rows || has_cols) {
    vec(rt::VecOp::kIota, dst, {}, has_rows ? s.R : 1, has_cols ? s.K : 1,
        start, has_rows ? row_step : col_step);
  } else {
    vec(rt::VecOp::kFill, dst, {}, 1, 1, start);
  }
  return dst;
}

BlockEmitter::TileId BlockEmitter::random_tile(const LoopOp& op,
                                               const Shape& s) {
  const Affine e = affine_in_block(op, s);
  if (e.col != 1 || e.rest < 0) {
    fail("random draws must take consecutive counters along the columns");
  }
  const bool has_rows = e.row != 0;
  const int64_t rows = has_rows ? s.R : 1;
  auto in_box = in_place(op, *op.dtype, has_rows, true);
  const TileId dst = in_box ? *in_box : new_tile(*op.dtype, has_rows, true);
  if (out_ == nullptr) return dst;
  // A RandFill counts r * cols + c: one for the block when its rows continue
  // each other's counters, else one a row.
  const bool whole = rows == 1 || e.row == s.K;
  for (int64_t r = 0; r < (whole ? 1 : rows); ++r) {
    rt::RandFill f;
    f.dst = device_tile(dst);
    f.dst.offset += static_cast<uint32_t>(r * tiles_[dst].row_stride);
    f.rows = static_cast<uint32_t>(whole ? rows : 1);
    f.cols = static_cast<uint32_t>(s.K);
    f.dist =
        op.name == "normal" ? rt::RandDist::kNormal : rt::RandDist::kUniform;
    f.seed = op.seed;
    f.offset = op.counter + static_cast<uint64_t>(e.rest + r * e.row);
    f.a = op.value;
    f.b = op.value2;
    out_->emit(f);
  }
  return dst;
}

}  // namespace spyre::kernels::loop
