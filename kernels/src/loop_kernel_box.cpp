// Scratchpad regions and stick boxes of loop kernels (loop_kernel.h): which
// sticks of a buffer one block touches and the DMA transfers that move them.
#include <algorithm>

#include "loop_kernel_internal.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels::loop {

namespace {

uint64_t stick_round(uint64_t bytes) {
  return std::max<uint64_t>(rt::kStickBytes, rt::round_up_to_sticks(bytes));
}

struct Walk {
  LoopRole role;
  int64_t count;
  int64_t step;  // lins: device byte stride; sticks: elements a step
};

}  // namespace

uint64_t RegionAllocator::alloc(uint64_t bytes) {
  bytes = stick_round(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const uint64_t offset = it->first;
    if (it->second == bytes) {
      free_.erase(it);
    } else {
      *it = {offset + bytes, it->second - bytes};
    }
    return offset;
  }
  const uint64_t offset = top_;
  top_ += bytes;
  peak_ = std::max(peak_, top_);
  return offset;
}

void RegionAllocator::free(uint64_t offset, uint64_t bytes) {
  bytes = stick_round(bytes);
  free_.emplace_back(offset, bytes);
  std::sort(free_.begin(), free_.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& [o, s] : free_) {
    if (!merged.empty() && merged.back().first + merged.back().second == o) {
      merged.back().second += s;
    } else {
      merged.emplace_back(o, s);
    }
  }
  if (!merged.empty() && merged.back().first + merged.back().second == top_) {
    top_ = merged.back().first;
    merged.pop_back();
  }
  free_ = std::move(merged);
}

std::optional<int64_t> Fixed::value(LoopRole role, uint32_t index) const {
  const std::vector<int64_t>* values = role == LoopRole::kOuter     ? &outer
                                       : role == LoopRole::kReduced ? &reduced
                                                                    : nullptr;
  if (values == nullptr || index >= values->size()) return std::nullopt;
  return (*values)[index];
}

Box make_box(const LoopKernel& kernel, const LoopBuffer& buffer, uint32_t slot,
             const BufferAccess& access, const Fixed& fixed, int64_t r0,
             int64_t nrows, int64_t ncols, bool worst_alignment) {
  const int64_t es = buffer.element_size();
  const int64_t per_stick = buffer.per_stick();
  const uint32_t rank = buffer.rank();
  std::vector<int64_t> coords = access.base;
  for (const AccessVar& v : access.vars) {
    if (auto x = fixed.value(v.role, v.index)) coords[v.dim] += v.step * *x;
  }
  const AccessVar* row = kernel.rows ? access.find(LoopRole::kRow) : nullptr;
  const AccessVar* col = kernel.cols ? access.find(LoopRole::kCol) : nullptr;
  if (row != nullptr) coords[row->dim] += row->step * r0;
  // the first element: a stick-aligned byte offset and its place in the stick
  auto dram_offset = static_cast<int64_t>(buffer.offset_bytes);
  int64_t e0 = 0;
  if (rank > 0) {
    const int64_t last = coords[rank - 1];
    dram_offset += (last / per_stick) * buffer.stick_stride_bytes;
    for (uint32_t d = 0; d + 1 < rank; ++d) {
      dram_offset += coords[d] * buffer.dim_stride_bytes[d];
    }
    e0 = last % per_stick;
  }
  // lins: vars moving whole sticks (one DMA dim each); sticks: vars walking
  // elements inside the stick dim
  std::vector<Walk> lins, sticks;
  for (auto [role, var, n] : {std::tuple{LoopRole::kRow, row, nrows},
                              std::tuple{LoopRole::kCol, col, ncols}}) {
    if (var == nullptr) continue;
    if (var->dim == rank - 1 && var->step % per_stick != 0) {
      sticks.push_back({role, n, var->step});
    } else if (var->dim == rank - 1) {
      lins.push_back(
          {role, n, (var->step / per_stick) * buffer.stick_stride_bytes});
    } else {
      lins.push_back({role, n, var->step * buffer.dim_stride_bytes[var->dim]});
    }
  }
  int64_t n_sticks = 1;
  if (!sticks.empty()) {
    int64_t last = worst_alignment ? per_stick - 1 : e0;
    for (const Walk& w : sticks) last += w.step * (w.count - 1);
    n_sticks = last / per_stick + 1;
  }
  const int64_t inner = n_sticks * rt::kStickBytes;  // one lin point's run
  Box box;
  int64_t size = inner;
  for (auto it = lins.rbegin(); it != lins.rend(); ++it) {
    (it->role == LoopRole::kRow ? box.row_stride : box.col_stride) = size;
    size *= it->count;
  }
  for (const Walk& w : sticks) {
    (w.role == LoopRole::kRow ? box.row_stride : box.col_stride) = w.step * es;
  }
  rt::StickTransfer run;
  run.dram = rt::SymAddr{slot, static_cast<uint64_t>(dram_offset)};
  const bool sticks_contiguous =
      n_sticks == 1 || buffer.stick_stride_bytes == rt::kStickBytes;
  if (sticks_contiguous) {
    run.run_bytes = static_cast<uint32_t>(inner);
  } else {
    run.run_bytes = rt::kStickBytes;
    run.count1 = static_cast<uint32_t>(n_sticks);
    run.dram_stride1 = buffer.stick_stride_bytes;
    run.spad_stride1 = rt::kStickBytes;
  }
  if (lins.empty()) {
    box.transfers.push_back(run);
  } else if (lins.size() == 1) {
    run.count2 = static_cast<uint32_t>(lins[0].count);
    run.dram_stride2 = lins[0].step;
    run.spad_stride2 = static_cast<uint32_t>(inner);
    box.transfers.push_back(run);
  } else if (sticks_contiguous) {
    // one transfer: count1 walks the inner lin dim, count2 the outer
    run.count1 = static_cast<uint32_t>(lins[1].count);
    run.dram_stride1 = lins[1].step;
    run.spad_stride1 = static_cast<uint32_t>(inner);
    run.count2 = static_cast<uint32_t>(lins[0].count);
    run.dram_stride2 = lins[0].step;
    run.spad_stride2 = static_cast<uint32_t>(lins[1].count * inner);
    box.transfers.push_back(run);
  } else {
    for (int64_t i = 0; i < lins[0].count; ++i) {
      rt::StickTransfer x = run;
      x.dram.offset = static_cast<uint64_t>(dram_offset + i * lins[0].step);
      x.spad = static_cast<uint32_t>(i * lins[1].count * inner);
      x.count2 = static_cast<uint32_t>(lins[1].count);
      x.dram_stride2 = lins[1].step;
      x.spad_stride2 = static_cast<uint32_t>(inner);
      box.transfers.push_back(x);
    }
  }
  for (const auto* walks : {&lins, &sticks}) {
    for (const Walk& w : *walks) {
      (w.role == LoopRole::kRow ? box.has_rows : box.has_cols) = true;
    }
  }
  // the padding fill of a store needs one var along the sticks, or rows and
  // cols that tile them jointly (row step = the cols' extent)
  const auto joint = [&] {
    if (sticks.size() != 2 || sticks[0].role == sticks[1].role) return false;
    const Walk& r = sticks[0].role == LoopRole::kRow ? sticks[0] : sticks[1];
    const Walk& c = sticks[0].role == LoopRole::kRow ? sticks[1] : sticks[0];
    return c.step == 1 && r.step == c.count;
  };
  if (sticks.size() == 1 && sticks[0].step == 1) {
    box.stick_walk =
        sticks[0].role == LoopRole::kRow ? StickWalk::kRow : StickWalk::kCol;
    box.valid = sticks[0].count;
  } else if (joint()) {
    const Walk& r = sticks[0].role == LoopRole::kRow ? sticks[0] : sticks[1];
    box.stick_walk = lins.empty() ? StickWalk::kJoint : StickWalk::kJointLins;
    box.valid = r.count * r.step;
  }
  box.bytes = static_cast<uint64_t>(size);
  box.elem_offset = static_cast<uint32_t>(e0 * es);
  box.stick_count = n_sticks;
  box.sticks_apart = !sticks_contiguous;
  return box;
}

void check_store_box(const LoopKernel& kernel, const LoopBuffer& buffer,
                     const Box& box, const BufferAccess& access) {
  const std::string& what = kernel.name;
  if (box.elem_offset != 0 && !buffer.shares_sticks) {
    throw KernelBuildError(rt::str(what, ": the store into ", buffer.name,
                                   " does not start a stick"));
  }
  const uint32_t rank = buffer.rank();
  if (rank == 0) return;
  const int64_t per_stick = buffer.per_stick();
  const AccessVar* row = kernel.rows ? access.find(LoopRole::kRow) : nullptr;
  const AccessVar* col = kernel.cols ? access.find(LoopRole::kCol) : nullptr;
  // rows stepping by the cols' extent and cols by one element tile one run
  // of the stick dim jointly (a [.., h, d] value stored into sticks of h*d)
  const bool joint = row != nullptr && col != nullptr && row->dim == rank - 1 &&
                     col->dim == rank - 1 && col->step == 1 &&
                     row->step == kernel.col_count();
  if (box.stick_walk == StickWalk::kJointLins &&
      box.stick_count * per_stick != box.valid) {
    throw KernelBuildError(rt::str(
        what, ": a store into ", buffer.name,
        " tiling its sticks with rows and cols leaves padding it cannot "
        "fill"));
  }
  bool walks_sticks = false;
  for (const AccessVar* var : {row, col}) {
    if (var == nullptr || var->dim != rank - 1) continue;
    if (var->step == 1) {
      walks_sticks = true;
    } else if (var->step % per_stick != 0 && !(joint && var == row)) {
      // whole-stick steps are fine; so are rows tiling the sticks with the
      // cols (blocks of whole sticks: the row quantum)
      throw KernelBuildError(
          rt::str(what, ": strided store into the sticks of ", buffer.name));
    }
  }
  if (buffer.shares_sticks && walks_sticks &&
      box.stick_walk == StickWalk::kNone) {
    throw KernelBuildError(rt::str(
        what, ": a store into part of the sticks of ", buffer.name,
        " writes them in pieces; a write mask covers one run of elements per "
        "run of sticks"));
  }
  if (!walks_sticks && buffer.host_sizes.back() > 1) {
    std::string sizes = "[";
    for (size_t i = 0; i < buffer.host_sizes.size(); ++i) {
      sizes += (i ? ", " : "") + std::to_string(buffer.host_sizes[i]);
    }
    throw KernelBuildError(rt::str(
        what, ": the store into ", buffer.name, " ", sizes,
        "] does not walk its stick dim inside a block (blocks would share "
        "sticks); no device lowering"));
  }
}

}  // namespace spyre::kernels::loop
