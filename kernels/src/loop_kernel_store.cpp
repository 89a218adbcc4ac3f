// A loop kernel's stores (loop_kernel.h): the box of whole sticks a block
// writes, read first when the buffer's sticks hold other data, the value
// copied (or made straight) into it, the layout's padding zeroed, and the
// DMA back to device memory.
#include <stdexcept>

#include "loop_kernel_internal.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels::loop {

BlockEmitter::StoreBox BlockEmitter::store_box(const LoopStore& st,
                                               const Shape& s) {
  uint32_t slot = 0;
  StoreBox b;
  b.buffer = find_buffer(k_, st.buffer, &slot);
  b.box = make_box(k_, *b.buffer, slot, *st.access, s.fixed, s.r0, s.R, s.K);
  check_store_box(k_, *b.buffer, b.box, *st.access);
  // a read-modify-write box may start anywhere in a stick
  const bool rmw = b.buffer->read_modify_write;
  b.bytes = make_box(k_, *b.buffer, slot, *st.access, s.fixed, 0, R_alloc_,
                     K_alloc_, rmw)
                .bytes;
  if (b.box.bytes > b.bytes) {
    throw std::logic_error("loop kernel: box overflow");
  }
  b.offset = alloc_.alloc(b.bytes);
  if (rmw) {
    for (rt::StickTransfer x : b.box.transfers) {
      x.spad += static_cast<uint32_t>(region_ + b.offset);
      if (out_ != nullptr) out_->emit(rt::DmaLoad{x});
    }
  }
  b.out = Tile{b.offset + b.box.elem_offset,
               b.buffer->dtype,
               b.box.row_stride,
               b.box.col_stride,
               b.box.has_rows,
               b.box.has_cols,
               std::nullopt};
  return b;
}

bool BlockEmitter::may_write_in_place(const LoopStore& st) const {
  const uint32_t v = canonical_[st.value];
  const LoopOp& op = k_.ops[v];
  const LoopBuffer* buffer = find_buffer(k_, st.buffer, nullptr);
  const bool one_instruction =
      op.kind == LoopOpKind::kBinary || op.kind == LoopOpKind::kSelect ||
      op.kind == LoopOpKind::kRandom ||
      (op.kind == LoopOpKind::kUnary && vec_op_from_name(op.name));
  return one_instruction && buffer != nullptr && op.dtype == buffer->dtype &&
         (*remaining_)[v] == 1 && bound_->count(v) == 0 &&
         k_.nodes[op.node].reduced_outer.empty();
}

std::optional<BlockEmitter::TileId> BlockEmitter::in_place(const LoopOp& op,
                                                           rt::DType dtype,
                                                           bool has_rows,
                                                           bool has_cols) {
  if (!store_target_ ||
      store_target_->op != static_cast<uint32_t>(&op - k_.ops.data())) {
    return std::nullopt;
  }
  const Tile box = std::exchange(store_target_, std::nullopt)->box;
  if (box.dtype != dtype || box.has_rows != has_rows ||
      box.has_cols != has_cols) {
    return std::nullopt;  // a broadcast into the box: the store copies it
  }
  tiles_.push_back(box);
  in_place_ = tiles_.size() - 1;
  return in_place_;
}

void BlockEmitter::store(const StoreBox& b, TileId value, const Shape& s) {
  const Box& box = b.box;
  const LoopBuffer& buffer = *b.buffer;
  const int64_t rows = box.has_rows ? s.R : 1;
  const int64_t cols = box.has_cols ? s.K : 1;
  if (std::exchange(in_place_, std::nullopt) != value) {
    vec(rt::VecOp::kCopy, b.out, {tiles_[value]}, rows, cols);
  }
  // zeros after the valid elements of the last stick (the layout's padding;
  // a read-modify-write buffer's sticks hold other data there)
  const int64_t pad = box.stick_count * buffer.per_stick() - box.valid;
  if (!buffer.read_modify_write && box.stick_walk != StickWalk::kNone &&
      box.stick_walk != StickWalk::kJointLins && pad > 0) {
    const int64_t es = buffer.element_size();
    Tile fill{b.offset + static_cast<uint64_t>(box.valid * es),
              buffer.dtype,
              0,
              es,
              false,
              true,
              std::nullopt};
    if (box.stick_walk == StickWalk::kJoint) {
      vec(rt::VecOp::kFill, fill, {}, 1, pad, 0.0);
    } else if (box.stick_walk == StickWalk::kCol) {
      fill.row_stride = box.row_stride;
      vec(rt::VecOp::kFill, fill, {}, rows, pad, 0.0);
    } else {
      fill.row_stride = es;
      fill.col_stride = box.col_stride;
      vec(rt::VecOp::kFill, fill, {}, pad, cols, 0.0);
    }
  }
  for (rt::StickTransfer x : box.transfers) {
    x.spad += static_cast<uint32_t>(region_ + b.offset);
    if (out_ != nullptr) out_->emit(rt::DmaStore{x});
  }
  alloc_.free(b.offset, b.bytes);
}

}  // namespace spyre::kernels::loop
