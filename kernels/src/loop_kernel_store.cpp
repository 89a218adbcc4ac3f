// A loop kernel's stores (loop_kernel.h): the box of whole sticks a block
// writes, the value copied (or made straight) into it, the layout's padding
// zeroed, and the DMA back to device memory, masked to the block's elements
// when the buffer's sticks hold other data.
#include <algorithm>
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
  // a box into shared sticks may start anywhere in a stick
  b.bytes = make_box(k_, *b.buffer, slot, *st.access, s.fixed, 0, R_alloc_,
                     K_alloc_, b.buffer->shares_sticks)
                .bytes;
  if (b.box.bytes > b.bytes) {
    throw std::logic_error("loop kernel: box overflow");
  }
  b.offset = alloc_.alloc(b.bytes);
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
  // zeros after the valid elements of the last stick (the layout's padding:
  // unspecified after a kernel, zeroed as it costs one fill). Shared sticks
  // hold other data there: their stores are masked to the elements.
  const int64_t es = buffer.element_size();
  const int64_t pad = box.stick_count * buffer.per_stick() - box.valid;
  if (!buffer.shares_sticks && box.stick_walk != StickWalk::kNone &&
      box.stick_walk != StickWalk::kJointLins && pad > 0) {
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
  // the bytes of a lin point's run of sticks holding the block's elements
  const int64_t extent = box.stick_walk == StickWalk::kNone ? 1 : box.valid;
  const uint64_t begin = box.elem_offset;
  const uint64_t end = begin + static_cast<uint64_t>(extent * es);
  for (rt::StickTransfer x : box.transfers) {
    x.spad += static_cast<uint32_t>(region_ + b.offset);
    if (out_ == nullptr) continue;
    if (buffer.shares_sticks) {
      emit_masked_stores(b, x, begin, end);
    } else {
      out_->emit(rt::DmaStore{x});
    }
  }
  alloc_.free(b.offset, b.bytes);
}

// The stores of `x` writing bytes [begin, end) of each lin point's run of
// sticks. Sticks apart in device memory are one transfer a stick (count1):
// the first and last stick get their own masks, the ones between none.
void BlockEmitter::emit_masked_stores(const StoreBox& b,
                                      const rt::StickTransfer& x,
                                      uint64_t begin, uint64_t end) {
  const auto emit = [&](const rt::StickTransfer& y, uint64_t lo, uint64_t hi) {
    if (lo == 0 && hi == y.run_bytes) {
      out_->emit(rt::DmaStore{y});
    } else {
      out_->emit(rt::DmaStore{y, static_cast<uint32_t>(lo),
                              static_cast<uint32_t>(hi)});
    }
  };
  if (!b.box.sticks_apart) {
    emit(x, begin, end);
    return;
  }
  const auto sticks = [&](uint32_t first, uint32_t count) {
    rt::StickTransfer y = x;
    y.dram.offset += static_cast<uint64_t>(first * x.dram_stride1);
    y.spad += first * x.spad_stride1;
    y.count1 = count;
    return y;
  };
  const uint32_t n = x.count1;
  const uint64_t last = uint64_t{n - 1} * rt::kStickBytes;
  emit(sticks(0, 1), begin, std::min<uint64_t>(end, rt::kStickBytes));
  if (n > 2) emit(sticks(1, n - 2), 0, rt::kStickBytes);
  if (n > 1) emit(sticks(n - 1, 1), 0, end - last);
}

}  // namespace spyre::kernels::loop
