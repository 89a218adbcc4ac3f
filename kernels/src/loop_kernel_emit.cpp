// One block of a loop kernel (loop_kernel.h): every op of the fused bodies
// as Vector/Reduce instructions on scratchpad tiles, in the order the
// stores need them, each tile freed after its last use.
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <utility>

#include "loop_kernel_internal.h"
#include "spyre/kernels/key.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels::loop {

namespace {

bool commutative(rt::VecOp op) {
  switch (op) {
    case rt::VecOp::kAdd:
    case rt::VecOp::kMul:
    case rt::VecOp::kMax:
    case rt::VecOp::kMin:
    case rt::VecOp::kEq:
    case rt::VecOp::kNe:
    case rt::VecOp::kLogicalAnd:
    case rt::VecOp::kLogicalOr:
    case rt::VecOp::kBitAnd:
    case rt::VecOp::kBitOr:
    case rt::VecOp::kBitXor:
      return true;
    default:
      return false;
  }
}

}  // namespace

// Ops that compute the same value share one tile: the compiler's bodies
// name a load per use and recompute a value in each node that needs it
// (softmax: its input three times, exp(x - max) twice). Excluded: loads of a
// buffer the kernel writes (a store between two loads changes what they
// read) unless kept values of a buffer stored once, reductions, and the ops
// of reductions over several dims (which move with their reduced-outer
// vars).
std::vector<uint32_t> share_equal_values(const LoopKernel& k) {
  std::map<std::string, int> stores;
  for (const LoopStore& st : k.stores) ++stores[st.buffer];
  std::vector<uint32_t> canonical(k.ops.size());
  std::map<std::string, uint32_t, std::less<>> first;
  KeyWriter key;
  for (uint32_t id = 0; id < k.ops.size(); ++id) {
    canonical[id] = id;
    const LoopOp& op = k.ops[id];
    const bool rewritten_load =
        op.kind == LoopOpKind::kLoad &&
        (op.access ? stores.count(op.buffer) > 0 : stores[op.buffer] != 1);
    // (random draws are never shared: each is its own stream of numbers)
    if (rewritten_load || op.kind == LoopOpKind::kReduction ||
        op.kind == LoopOpKind::kRandom ||
        !k.nodes[op.node].reduced_outer.empty()) {
      continue;
    }
    key.clear();
    key.add(op.kind).add(op.name).add(op.dtype.has_value());
    if (op.dtype) key.add(*op.dtype);
    key.add(op.to_float).add(op.value).add(op.buffer).add(op.constant);
    for (uint32_t a : op.args) key.add(canonical[a]);
    if (op.access) {
      key.add_list(op.access->base);
      for (const AccessVar& v : op.access->vars) {
        key.add(v.role).add(v.index).add(v.dim).add(v.step);
      }
    }
    for (const IndexTerm& t : op.terms)
      key.add(t.role).add(t.index).add(t.coeff);
    canonical[id] =
        first.try_emplace(std::string(key.bytes()), id).first->second;
  }
  return canonical;
}

BlockEmitter::BlockEmitter(const LoopKernel& kernel, CoreBuilder* out,
                           uint64_t region, RegionAllocator& alloc)
    : k_(kernel),
      canonical_(share_equal_values(kernel)),
      out_(out),
      region_(region),
      alloc_(alloc) {}

void BlockEmitter::fail(const std::string& what) const {
  throw KernelBuildError(rt::str(k_.name, ": ", what));
}

rt::Tile BlockEmitter::device_tile(const Tile& t) const {
  return rt::Tile{static_cast<uint32_t>(region_ + t.offset), t.dtype,
                  static_cast<int32_t>(t.row_stride),
                  static_cast<int32_t>(t.col_stride)};
}

void BlockEmitter::vec(rt::VecOp op, const Tile& dst,
                       const std::vector<Tile>& srcs, int64_t rows,
                       int64_t cols, std::optional<double> imm, double imm2) {
  if (out_ == nullptr) return;
  // unused sources name the destination (never read)
  rt::Vector v;
  v.op = op;
  v.dst = device_tile(dst);
  rt::Tile* operands[] = {&v.src0, &v.src1, &v.src2};
  for (size_t i = 0; i < 3; ++i) {
    *operands[i] = i < srcs.size() ? device_tile(srcs[i]) : v.dst;
  }
  v.rows = static_cast<uint32_t>(rows);
  v.cols = static_cast<uint32_t>(cols);
  v.src1_is_imm = imm.has_value() && rt::vec_op_arity(op) == 2;
  v.imm = imm.value_or(0.0);
  v.imm2 = imm2;
  out_->emit(v);
}

void BlockEmitter::vec(rt::VecOp op, TileId dst,
                       const std::vector<TileId>& srcs, int64_t rows,
                       int64_t cols, std::optional<double> imm, double imm2) {
  std::vector<Tile> s;
  for (TileId t : srcs) s.push_back(tiles_[t]);
  vec(op, tiles_[dst], s, rows, cols, imm, imm2);
}

void BlockEmitter::reduce(rt::RedOp op, TileId dst, TileId src, int64_t rows,
                          int64_t cols, bool accumulate) {
  if (out_ == nullptr) return;
  out_->emit(rt::Reduce{op, device_tile(dst), device_tile(src),
                        static_cast<uint32_t>(rows),
                        static_cast<uint32_t>(cols), accumulate, 0});
}

BlockEmitter::TileId BlockEmitter::new_tile(rt::DType dtype, bool has_rows,
                                            bool has_cols) {
  // sized for the largest block, so every block of a core plans alike
  const int64_t es = rt::element_size(dtype);
  const int64_t row_bytes = (has_cols ? K_alloc_ : 1) * es;
  const uint64_t bytes =
      static_cast<uint64_t>((has_rows ? R_alloc_ : 1) * row_bytes);
  const uint64_t offset = alloc_.alloc(bytes);
  tiles_.push_back(Tile{offset, dtype, has_rows ? row_bytes : 0,
                        has_cols ? es : 0, has_rows, has_cols,
                        std::pair{offset, bytes}});
  return tiles_.size() - 1;
}

void BlockEmitter::free_tile(TileId t) {
  if (tiles_[t].alloc) {
    alloc_.free(tiles_[t].alloc->first, tiles_[t].alloc->second);
    tiles_[t].alloc.reset();
  }
}

int64_t BlockEmitter::rows_of(TileId t, const Shape& s) const {
  return tiles_[t].has_rows ? s.R : 1;
}

int64_t BlockEmitter::cols_of(TileId t, const Shape& s) const {
  return tiles_[t].has_cols ? s.K : 1;
}

void BlockEmitter::block(const Fixed& fixed, int64_t r0, int64_t R,
                         int64_t R_alloc, std::optional<int64_t> K) {
  K_alloc_ = k_.col_count();
  R_alloc_ = R_alloc;
  const Shape s{fixed, r0, R, K.value_or(k_.col_count())};
  // uses of every op reachable from the stores, not yet emitted
  std::vector<int64_t> remaining(k_.ops.size(), 0);
  std::vector<bool> reachable(k_.ops.size(), false);
  std::function<void(uint32_t)> mark = [&](uint32_t op) {
    if (reachable[op]) return;
    reachable[op] = true;
    for (uint32_t a : k_.ops[op].args) {
      ++remaining[canonical_[a]];
      mark(canonical_[a]);
    }
  };
  for (const LoopStore& st : k_.stores) {
    ++remaining[canonical_[st.value]];
    mark(canonical_[st.value]);
  }
  std::map<uint32_t, TileId> bound;  // op -> its tile
  std::map<TileId, int64_t> refs;    // tile -> live ops (and keeps) using it
  remaining_ = &remaining;
  bound_ = &bound;
  refs_ = &refs;
  const auto release = [&](uint32_t op) {
    op = canonical_[op];
    if (--remaining[op] != 0) return;
    auto it = bound.find(op);
    if (it != bound.end() && --refs[it->second] == 0) free_tile(it->second);
  };
  Eval ev = [&](uint32_t op) -> TileId {
    op = canonical_[op];
    auto it = bound.find(op);
    if (it != bound.end()) return it->second;
    const TileId t = compute(op, ev, s);
    bound[op] = t;
    ++refs[t];
    for (uint32_t a : k_.ops[op].args) release(a);
    return t;
  };
  try {
    for (const LoopStore& st : k_.stores) {
      const bool kept =
          std::any_of(k_.ops.begin(), k_.ops.end(), [&](const LoopOp& later) {
            return later.kind == LoopOpKind::kLoad && later.node > st.node &&
                   reachable[&later - k_.ops.data()] &&
                   later.buffer == st.buffer;
          });
      // the box first when the value may be written straight into it
      std::optional<StoreBox> box;
      if (st.access && !kept && may_write_in_place(st)) {
        box = store_box(st, s);
        store_target_ = StoreTarget{canonical_[st.value], box->out};
      }
      const TileId t = ev(st.value);
      store_target_.reset();
      if (kept) {
        kept_[st.buffer] = t;
        ++refs[t];  // held to the end of the block
      }
      if (st.access) store(box ? *box : store_box(st, s), t, s);
      release(st.value);
    }
  } catch (const PartialSent&) {
    // a helper core of a cross-core reduction is done
  }
  for (const auto& [name, t] : kept_) free_tile(t);
}

// A rounding folds into the op that makes its value when that op is one
// vector instruction whose fp32 result nothing else reads: the instruction
// writes the rounded dtype itself (the same one rounding, one pass fewer).
bool BlockEmitter::rounding_folds_into(uint32_t src) const {
  const LoopOp& op = k_.ops[src];
  if (remaining_ == nullptr || (*remaining_)[src] != 1 || bound_->count(src) ||
      !k_.nodes[op.node].reduced_outer.empty()) {
    return false;
  }
  if (op.kind == LoopOpKind::kBinary) {
    return op.dtype == kF32;
  }
  if (op.kind != LoopOpKind::kUnary || op.name == "square") return false;
  const auto vop = vec_op_from_name(op.name);
  return vop && rt::vec_op_arity(*vop) == 1 && op.name != "logical_not";
}

std::optional<BlockEmitter::TileId> BlockEmitter::dying_tile(
    uint32_t arg) const {
  arg = canonical_[arg];
  if (remaining_ == nullptr || (*remaining_)[arg] != 1) return std::nullopt;
  const auto op = bound_->find(arg);
  if (op == bound_->end() || !tiles_[op->second].alloc) return std::nullopt;
  const auto ref = refs_->find(op->second);
  if (ref == refs_->end() || ref->second != 1) return std::nullopt;
  return op->second;
}

BlockEmitter::TileId BlockEmitter::compute(uint32_t id, const Eval& ev,
                                           const Shape& s) {
  const LoopOp& op = k_.ops[id];
  switch (op.kind) {
    case LoopOpKind::kLoad: {
      auto it = kept_.find(op.buffer);
      if (it != kept_.end()) return it->second;
      if (const auto t = resident_tile(id)) return *t;
      return load_box(op, s);
    }
    case LoopOpKind::kConstant: {
      const TileId t = new_tile(*op.dtype, false, false);
      vec(rt::VecOp::kFill, t, {}, 1, 1, op.value);
      return t;
    }
    case LoopOpKind::kIndex:
      return index_tile(op, s);
    case LoopOpKind::kRandom:
      return random_tile(op, s);
    case LoopOpKind::kToDtype: {
      if (op.dtype && !op.to_float && rt::is_floating(*op.dtype) &&
          rounding_folds_into(canonical_[op.args[0]])) {
        write_dtype_ = *op.dtype;
        return ev(op.args[0]);
      }
      const TileId src = ev(op.args[0]);
      if (op.to_float && rt::is_floating(tiles_[src].dtype)) {
        return src;  // tiles compute in fp32 already
      }
      if (!op.dtype) fail("a conversion to a dtype with no device form");
      const TileId dst =
          new_tile(*op.dtype, tiles_[src].has_rows, tiles_[src].has_cols);
      vec(rt::VecOp::kCopy, dst, {src}, rows_of(src, s), cols_of(src, s));
      return dst;
    }
    case LoopOpKind::kReduction:
      if (!k_.nodes[op.node].reduced_outer.empty()) {
        return reduction_multi(id, s);
      }
      return reduction(id, ev, s);
    case LoopOpKind::kUnary:
      if (op.name == "square") {
        const TileId x = ev(op.args[0]);
        const TileId dst = new_tile(op.dtype.value_or(kF32), tiles_[x].has_rows,
                                    tiles_[x].has_cols);
        vec(rt::VecOp::kMul, dst, {x, x}, rows_of(dst, s), cols_of(dst, s));
        return dst;
      }
      {
        // a rounding folded into this op is its own, not its argument's
        const auto write = std::exchange(write_dtype_, std::nullopt);
        const TileId x = ev(op.args[0]);
        write_dtype_ = write;
        return unary(op, x, s, dying_tile(op.args[0]));
      }
    case LoopOpKind::kBinary:
      return binary(op, ev, s);
    case LoopOpKind::kSelect: {
      const TileId c = ev(op.args[0]);
      const TileId a = ev(op.args[1]);
      const TileId b = ev(op.args[2]);
      const bool hr =
          tiles_[c].has_rows || tiles_[a].has_rows || tiles_[b].has_rows;
      const bool hc =
          tiles_[c].has_cols || tiles_[a].has_cols || tiles_[b].has_cols;
      auto dst = in_place(op, *op.dtype, hr, hc);
      if (!dst) dst = new_tile(*op.dtype, hr, hc);
      vec(rt::VecOp::kSelect, *dst, {c, a, b}, hr ? s.R : 1, hc ? s.K : 1);
      return *dst;
    }
  }
  fail("an op of unknown kind");
}

BlockEmitter::TileId BlockEmitter::load_box(const LoopOp& op, const Shape& s) {
  uint32_t slot = 0;
  const LoopBuffer* buffer = find_buffer(k_, op.buffer, &slot);
  if (buffer == nullptr || !op.access) {
    fail(rt::str("load of ", op.buffer,
                 " which is neither an argument nor made by an earlier node"));
  }
  const Box box =
      make_box(k_, *buffer, slot, *op.access, s.fixed, s.r0, s.R, s.K);
  // sized for the largest block and the worst stick alignment, so every
  // block plans alike
  const uint64_t bytes = make_box(k_, *buffer, slot, *op.access, s.fixed, 0,
                                  R_alloc_, K_alloc_, true)
                             .bytes;
  if (box.bytes > bytes) throw std::logic_error("loop kernel: box overflow");
  const uint64_t offset = alloc_.alloc(bytes);
  for (rt::StickTransfer x : box.transfers) {
    x.spad += static_cast<uint32_t>(region_ + offset);
    if (out_ != nullptr) out_->emit(rt::DmaLoad{x});
  }
  tiles_.push_back(Tile{offset + box.elem_offset, buffer->dtype, box.row_stride,
                        box.col_stride, box.has_rows, box.has_cols,
                        std::pair{offset, bytes}});
  return tiles_.size() - 1;
}

// The tile of a load made once for the core, if `op` is one. It has no
// allocation of the block's region, so nothing frees it or writes over it.
std::optional<BlockEmitter::TileId> BlockEmitter::resident_tile(uint32_t op) {
  if (resident_ == nullptr) return std::nullopt;
  for (const ResidentLoad& r : *resident_) {
    if (r.op != op) continue;
    uint32_t slot = 0;
    const LoopBuffer* buffer = find_buffer(k_, k_.ops[op].buffer, &slot);
    tiles_.push_back(Tile{r.spad - region_ + r.box.elem_offset, buffer->dtype,
                          r.box.row_stride, r.box.col_stride, r.box.has_rows,
                          r.box.has_cols, std::nullopt});
    return tiles_.size() - 1;
  }
  return std::nullopt;
}

// exp(x) - 1 and log(1 + x) accurate near 0 (Goldberg's rewrites), for
// compiled code and eager ops alike (an eager expm1/log1p is one
// ElementwiseStep of kind kExpm1/kLog1p, made into this op): expm1 = (u - 1) *
// (x / log(u)) with u = exp(x) (u infinite: u; u - 1 == -1: -1; u - 1 == 0: x);
// log1p = log(u) * (x / (u - 1)) with u = 1 + x (u - 1 == 0: x; x infinite: x).
void BlockEmitter::accurate_near_zero(bool expm1, TileId x, TileId dst,
                                      int64_t rows, int64_t cols) {
  using rt::VecOp;
  const auto temp = [&](rt::DType dtype) {
    return new_tile(dtype, tiles_[x].has_rows, tiles_[x].has_cols);
  };
  const TileId u = temp(kF32), d = temp(kF32), log_u = temp(kF32);
  const TileId ratio = temp(kF32), test = temp(rt::DType::kBool);
  vec(expm1 ? VecOp::kExp : VecOp::kAdd, u, {x}, rows, cols,
      expm1 ? std::optional<double>() : 1.0);
  vec(VecOp::kSub, d, {u}, rows, cols, 1.0);
  vec(VecOp::kLog, log_u, {u}, rows, cols);
  const double inf = std::numeric_limits<double>::infinity();
  const auto keep_where = [&](TileId tested, double value, TileId kept) {
    vec(VecOp::kEq, test, {tested}, rows, cols, value);
    vec(VecOp::kSelect, dst, {test, kept, dst}, rows, cols);
  };
  if (expm1) {
    vec(VecOp::kDiv, ratio, {x, log_u}, rows, cols);
    vec(VecOp::kMul, dst, {d, ratio}, rows, cols);
    keep_where(u, inf, u);
    keep_where(d, -1.0, d);
    keep_where(d, 0.0, x);
  } else {
    vec(VecOp::kDiv, ratio, {x, d}, rows, cols);
    vec(VecOp::kMul, dst, {log_u, ratio}, rows, cols);
    keep_where(d, 0.0, x);
    keep_where(x, inf, x);
  }
  for (TileId t : {u, d, log_u, ratio, test}) free_tile(t);
}

BlockEmitter::TileId BlockEmitter::unary(const LoopOp& op, TileId x,
                                         const Shape& s,
                                         std::optional<TileId> reuse) {
  const std::string& name = op.name;
  const int64_t rows = rows_of(x, s), cols = cols_of(x, s);
  const rt::DType write =
      std::exchange(write_dtype_, std::nullopt)
          .value_or(name == "logical_not" ? rt::DType::kBool
                                          : op.dtype.value_or(kF32));
  // expm1 and log1p read x after their first step: never over x
  const bool rereads_x = name == "expm1" || name == "log1p";
  const bool has_rows = tiles_[x].has_rows, has_cols = tiles_[x].has_cols;
  // only a single instruction writes straight into a store's box
  std::optional<TileId> in_box;
  if (vec_op_from_name(name)) in_box = in_place(op, write, has_rows, has_cols);
  const TileId dst = in_box ? *in_box
                     : reuse && !rereads_x && tiles_[*reuse].dtype == write
                         ? *reuse
                         : new_tile(write, has_rows, has_cols);
  using rt::VecOp;
  if (name == "exp2") {
    vec(VecOp::kMul, dst, {x}, rows, cols, std::log(2.0));
    vec(VecOp::kExp, dst, {dst}, rows, cols);
  } else if (name == "expm1" || name == "log1p") {
    accurate_near_zero(name == "expm1", x, dst, rows, cols);
  } else if (name == "ceil") {
    vec(VecOp::kNeg, dst, {x}, rows, cols);
    vec(VecOp::kFloor, dst, {dst}, rows, cols);
    vec(VecOp::kNeg, dst, {dst}, rows, cols);
  } else {
    auto op = vec_op_from_name(name);
    if (!op || rt::vec_op_arity(*op) != 1) {
      fail(rt::str("op '", name, "' has no device lowering"));
    }
    vec(*op, dst, {x}, rows, cols);
  }
  return dst;
}

BlockEmitter::TileId BlockEmitter::binary(const LoopOp& op, const Eval& ev,
                                          const Shape& s) {
  auto vop = vec_op_from_name(op.name);
  if (!vop || rt::vec_op_arity(*vop) != 2) {
    fail(rt::str("op '", op.name, "' has no device lowering"));
  }
  const rt::DType dst_dtype =
      std::exchange(write_dtype_, std::nullopt).value_or(*op.dtype);
  uint32_t a = op.args[0], b = op.args[1];
  const auto is_constant = [&](uint32_t x) {
    return k_.ops[x].kind == LoopOpKind::kConstant;
  };
  if (is_constant(a) && !is_constant(b) && commutative(*vop)) std::swap(a, b);
  const TileId ta = ev(a);
  std::vector<TileId> srcs{ta};
  std::optional<double> imm;
  if (is_constant(b)) {
    imm = k_.ops[b].value;  // an immediate operand, no tile
  } else {
    srcs.push_back(ev(b));
  }
  bool hr = false, hc = false;
  for (TileId t : srcs) {
    hr = hr || tiles_[t].has_rows;
    hc = hc || tiles_[t].has_cols;
  }
  // the result goes to its store's box, or overwrites a source of its own
  // shape and dtype that dies here
  std::optional<TileId> dst = in_place(op, dst_dtype, hr, hc);
  for (uint32_t arg : {a, b}) {
    if (is_constant(arg) || dst) continue;
    const auto t = dying_tile(arg);
    if (t && tiles_[*t].dtype == dst_dtype && tiles_[*t].has_rows == hr &&
        tiles_[*t].has_cols == hc) {
      dst = t;
    }
  }
  if (!dst) dst = new_tile(dst_dtype, hr, hc);
  vec(*vop, *dst, srcs, hr ? s.R : 1, hc ? s.K : 1, imm);
  return *dst;
}

}  // namespace spyre::kernels::loop
