// Reductions of a loop-kernel block (loop_kernel.h): along the col dim in
// one Reduce, over several dims accumulating Reduce by Reduce, and across
// cores over the ring.
#include <algorithm>
#include <functional>

#include "loop_kernel_internal.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels::loop {

namespace {

std::optional<rt::RedOp> simple_reduction(const std::string& name) {
  if (name == "sum") return rt::RedOp::kSum;
  if (name == "max") return rt::RedOp::kMax;
  if (name == "min") return rt::RedOp::kMin;
  if (name == "prod") return rt::RedOp::kProd;
  return std::nullopt;
}

int64_t product(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

}  // namespace

// Sums, products and extrema of integer (or bool) values accumulate in
// int64, exactly, as PyTorch's do; of floating values in fp32.
rt::DType BlockEmitter::accumulator(TileId x) const {
  return rt::is_floating(tiles_[x].dtype) ? kF32 : rt::DType::kInt64;
}

BlockEmitter::TileId BlockEmitter::reduction(uint32_t id, const Eval& ev,
                                             const Shape& s) {
  const LoopOp& op = k_.ops[id];
  const TileId x = ev(op.args[0]);
  if (!tiles_[x].has_cols) {
    fail("a reduction of a value constant along the reduced dim");
  }
  const bool hr = tiles_[x].has_rows;
  const int64_t rows = rows_of(x, s);
  const int64_t K = s.K;
  if (op.name == "welford_reduce") {
    std::vector<TileId>& parts = welford_[op.args[0]];
    if (parts.empty()) {
      const TileId mean = new_tile(kF32, hr, false);
      reduce(rt::RedOp::kSum, mean, x, rows, K);
      vec(rt::VecOp::kDiv, mean, {mean}, rows, 1, static_cast<double>(K));
      const TileId diff = new_tile(kF32, hr, true);
      vec(rt::VecOp::kSub, diff, {x, mean}, rows, K);
      vec(rt::VecOp::kMul, diff, {diff, diff}, rows, K);
      const TileId m2 = new_tile(kF32, hr, false);
      reduce(rt::RedOp::kSum, m2, diff, rows, K);
      free_tile(diff);
      const TileId weight = new_tile(kF32, false, false);
      vec(rt::VecOp::kFill, weight, {}, 1, 1, static_cast<double>(K));
      parts = {mean, m2, weight};
    }
    return parts.at(op.part);
  }
  if (op.name == "any" || op.name == "all") {
    // as numbers: any = max(x != 0), all = min(x != 0)
    const TileId as_float = new_tile(kF32, hr, true);
    vec(rt::VecOp::kCopy, as_float, {x}, rows, K);
    const TileId folded = new_tile(kF32, hr, false);
    reduce(op.name == "any" ? rt::RedOp::kMax : rt::RedOp::kMin, folded,
           as_float, rows, K);
    free_tile(as_float);
    const TileId dst = new_tile(rt::DType::kBool, hr, false);
    vec(rt::VecOp::kNe, dst, {folded}, rows, 1, 0.0);
    free_tile(folded);
    return dst;
  }
  std::optional<rt::RedOp> red = simple_reduction(op.name);
  if (op.name == "argmax") red = rt::RedOp::kArgMax;
  if (op.name == "argmin") red = rt::RedOp::kArgMin;
  if (!red) fail(rt::str("reduction '", op.name, "' has no device lowering"));
  const bool arg = *red == rt::RedOp::kArgMax || *red == rt::RedOp::kArgMin;
  const TileId dst =
      new_tile(arg ? rt::DType::kInt64 : accumulator(x), hr, false);
  reduce(*red, dst, x, rows, K);
  return dst;
}

BlockEmitter::TileId BlockEmitter::reduction_multi(uint32_t id,
                                                   const Shape& s) {
  // the col dim inside each Reduce, the reduced-outer dims walked here,
  // accumulating into one result
  const LoopOp& op = k_.ops[id];
  const std::vector<int64_t>& sizes = k_.nodes[op.node].reduced_outer;
  const double count = static_cast<double>(s.K * product(sizes));
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t n : sizes) ranges.emplace_back(0, n);
  if (ring_) ranges[0] = {ring_->lo, ring_->hi};
  std::vector<std::vector<int64_t>> combos{{}};
  for (const auto& [lo, hi] : ranges) {
    std::vector<std::vector<int64_t>> next;
    for (const auto& c : combos) {
      for (int64_t i = lo; i < hi; ++i) {
        next.push_back(c);
        next.back().push_back(i);
      }
    }
    combos = std::move(next);
  }
  std::set<TileId> kept;
  for (const auto& [name, t] : kept_) kept.insert(t);
  // evaluates the reduced value at one point of the reduced-outer dims;
  // returns it and the tiles made for it (to free after its Reduce)
  const auto evaluate = [&](const std::vector<int64_t>& combo) {
    Shape local_shape = s;
    local_shape.fixed.reduced = combo;
    std::map<uint32_t, TileId> local;
    std::vector<TileId> made;
    Eval ev_local = [&](uint32_t v) -> TileId {
      auto it = local.find(v);
      if (it != local.end()) return it->second;
      const TileId t = compute(v, ev_local, local_shape);
      local[v] = t;
      if (!kept.count(t) &&
          std::find(made.begin(), made.end(), t) == made.end()) {
        made.push_back(t);
      }
      return t;
    };
    const TileId x = ev_local(op.args[0]);
    return std::pair{x, made};
  };
  const auto fold =
      [&](rt::RedOp rop,
          const std::function<TileId(TileId, int64_t)>& transform) {
        std::optional<TileId> dst;
        for (size_t i = 0; i < combos.size(); ++i) {
          auto [x, made] = evaluate(combos[i]);
          const int64_t rows = rows_of(x, s);
          if (transform) {
            x = transform(x, rows);
            made.push_back(x);
          }
          if (!dst) dst = new_tile(accumulator(x), tiles_[x].has_rows, false);
          reduce(rop, *dst, x, rows, s.K, i > 0);
          for (TileId t : made) free_tile(t);
        }
        return *dst;
      };
  if (auto red = simple_reduction(op.name)) {
    const TileId partial = fold(*red, nullptr);
    if (!ring_) return partial;
    return combine_across_cores(*red, partial);
  }
  if (op.name == "any" || op.name == "all") {
    // as numbers, as over one dim: any = max(x != 0), all = min(x != 0)
    const rt::RedOp rop = op.name == "any" ? rt::RedOp::kMax : rt::RedOp::kMin;
    // (one core: ring_cores spreads only sum, max, min and prod)
    const TileId folded = fold(rop, [&](TileId x, int64_t rows) {
      const TileId as_float = new_tile(kF32, tiles_[x].has_rows, true);
      vec(rt::VecOp::kCopy, as_float, {x}, rows, s.K);
      return as_float;
    });
    const TileId dst =
        new_tile(rt::DType::kBool, tiles_[folded].has_rows, false);
    vec(rt::VecOp::kNe, dst, {folded}, rows_of(folded, s), 1, 0.0);
    free_tile(folded);
    return dst;
  }
  if (op.name == "welford_reduce") {
    std::vector<TileId>& parts = welford_[op.args[0]];
    if (parts.empty()) {
      const TileId mean = fold(rt::RedOp::kSum, nullptr);
      const int64_t rows = rows_of(mean, s);
      vec(rt::VecOp::kDiv, mean, {mean}, rows, 1, count);
      const TileId m2 = fold(rt::RedOp::kSum, [&](TileId x, int64_t rows_) {
        const TileId d =
            new_tile(kF32, tiles_[x].has_rows || tiles_[mean].has_rows, true);
        vec(rt::VecOp::kSub, d, {x, mean}, rows_, s.K);
        vec(rt::VecOp::kMul, d, {d, d}, rows_, s.K);
        return d;
      });
      const TileId weight = new_tile(kF32, false, false);
      vec(rt::VecOp::kFill, weight, {}, 1, 1, count);
      parts = {mean, m2, weight};
    }
    return parts.at(op.part);
  }
  fail(rt::str("reduction '", op.name,
               "' over several dims has no device lowering"));
}

BlockEmitter::TileId BlockEmitter::combine_across_cores(rt::RedOp op,
                                                        TileId partial) {
  // helper cores send their one-element partial to the first core over the
  // ring and stop; the first core gathers and reduces them
  const std::vector<uint32_t>& cores = ring_->cores;
  const rt::DType dtype = tiles_[partial].dtype;
  const uint32_t bytes_each = rt::element_size(dtype);
  if (ring_->core != cores[0]) {
    if (out_ != nullptr) {
      out_->emit(rt::RingSend{ring_->core, cores[0],
                              device_tile(partial).offset, bytes_each});
    }
    throw PartialSent{};
  }
  // one stick per core: aligned receives
  const uint64_t bytes = uint64_t{rt::kStickBytes} * cores.size();
  const uint64_t offset = alloc_.alloc(bytes);
  tiles_.push_back(Tile{offset, dtype, 0, rt::kStickBytes, false, true,
                        std::pair{offset, bytes}});
  const TileId gathered = tiles_.size() - 1;
  vec(rt::VecOp::kCopy, Tile{offset, dtype, 0, 0, false, false, {}},
      {tiles_[partial]}, 1, 1);
  for (size_t i = 1; i < cores.size(); ++i) {
    if (out_ != nullptr) {
      out_->emit(rt::RingRecv{
          cores[i],
          cores[i],
          static_cast<uint32_t>(region_ + offset + i * rt::kStickBytes),
          bytes_each,
          {}});
    }
  }
  const TileId result = new_tile(dtype, false, false);
  reduce(op, result, gathered, 1, static_cast<int64_t>(cores.size()));
  free_tile(gathered);
  return result;
}

}  // namespace spyre::kernels::loop
