#include "spyre/kernels/relayout.h"

#include <algorithm>
#include <utility>

#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr uint64_t kStick = rt::kStickBytes;
// A receive waits in the core's ring queue, holding up its later sends, so
// it goes in this long after its piece would land if every core left the
// barrier together: they leave up to ~180 cycles apart on 32 cores. 150 was
// the best of 0..300 measured on relayout_bench (sim-timing-2).
constexpr uint64_t kReceiveMarginCycles = 150;

uint64_t ring_distance(uint32_t a, uint32_t b, uint32_t cores) {
  const uint32_t d = a > b ? a - b : b - a;
  return std::min(d, cores - d);
}

uint32_t u32(uint64_t v) { return static_cast<uint32_t>(v); }

uint64_t sticks(uint64_t n, rt::DType t) {
  return ceil_div(n, rt::elements_per_stick(t));
}

// Transposes rows [a, b) of X, stick s of core j's column block, from the
// stick-major `from` (rows of X 128 bytes apart, `from` = element (a, 0))
// into the dst block at rows s * E.., columns a...
void emit_transpose(CoreBuilder& core, const RelayoutPlacement& p, uint32_t j,
                    uint64_t s, uint32_t from, uint64_t a, uint64_t b) {
  const uint64_t e = rt::elements_per_stick(p.dtype);
  const uint64_t cols_in_stick = std::min(e, p.col_blocks.size(j) - s * e);
  const int32_t es = static_cast<int32_t>(rt::element_size(p.dtype));
  const rt::Tile src{from, p.dtype, static_cast<int32_t>(kStick), es};
  const rt::Tile dst{u32(p.dst + s * e * p.dst_pitch + a * es), p.dtype,
                     static_cast<int32_t>(p.dst_pitch), es};
  core.emit(vec(rt::VecOp::kCopy, dst, transposed(src), u32(cols_in_stick),
                u32(b - a)));
}

// The padding after column `rows` of every dst row is zeroed so both paths
// (and every launch) store identical bytes.
void emit_zero_padding(CoreBuilder& core, const RelayoutPlacement& p,
                       uint32_t j) {
  const uint64_t padded = p.dst_pitch / rt::element_size(p.dtype);
  if (padded == p.rows || p.col_blocks.size(j) == 0) return;
  const int32_t es = static_cast<int32_t>(rt::element_size(p.dtype));
  rt::Vector v;
  v.op = rt::VecOp::kFill;
  v.dst = {u32(p.dst + p.rows * es), p.dtype, static_cast<int32_t>(p.dst_pitch),
           es};
  v.rows = u32(p.col_blocks.size(j));
  v.cols = u32(padded - p.rows);
  v.imm = 0;
  core.emit(v);
}

// Copies core i's own piece (stick s of its column block, its rows) from
// src into the staging area, where received pieces also land.
void emit_own_piece(CoreBuilder& core, const RelayoutPlacement& p, uint32_t i,
                    uint64_t s) {
  const uint64_t e = rt::elements_per_stick(p.dtype);
  const uint64_t br = p.row_blocks.size(i);
  const uint64_t stick = p.col_blocks.begin(i) / e + s;
  const int32_t es = static_cast<int32_t>(rt::element_size(p.dtype));
  const int32_t row = static_cast<int32_t>(kStick);
  core.emit(vec(rt::VecOp::kCopy,
                {u32(p.staging + (s * p.rows + p.row_blocks.begin(i)) * kStick),
                 p.dtype, row, es},
                {u32(p.src + stick * br * kStick), p.dtype, row, es}, u32(br),
                u32(e)));
}

bool lands_transposed(const RelayoutPlacement& p) {
  return p.ring_transpose == RingTranspose::kPipeline;
}

// Cycles core i's ring engine spends sending one stick of `rows` rows.
uint64_t send_cycles(const RelayoutPlacement& p, uint64_t rows) {
  if (lands_transposed(p)) {
    return p.costs.relayout_transfer_cycles(rows * kStick, p.cores);
  }
  return p.costs.ring_send_fixed_cycles +
         ceil_div(rows * kStick, p.costs.ring_bytes_per_cycle);
}

// Core j's receive of stick s of piece (k, j): into the staging area for
// the vector unit, or through the transpose pipeline straight into dst
// (rows s * E.., columns of core k's rows), as emit_transpose would put it.
rt::RingRecv receive_piece(const RelayoutPlacement& p, uint32_t j, uint32_t k,
                           uint64_t s, uint32_t channel) {
  const uint64_t a = p.row_blocks.begin(k);
  const uint32_t bytes = u32(p.row_blocks.size(k) * kStick);
  if (!lands_transposed(p)) {
    return rt::RingRecv{
        channel, k, u32(p.staging + (s * p.rows + a) * kStick), bytes, {}};
  }
  const uint64_t e = rt::elements_per_stick(p.dtype);
  const uint64_t cols_in_stick = std::min(e, p.col_blocks.size(j) - s * e);
  return rt::RingRecv{
      channel, k,
      u32(p.dst + s * e * p.dst_pitch + a * rt::element_size(p.dtype)), bytes,
      rt::StickTranspose{p.dtype, u32(cols_in_stick), p.dst_pitch}};
}

// The exchange runs in steps: at step t core i sends its piece to core
// i ^ t and receives core (i ^ t)'s piece (pairs over the next power of two
// of the core count; a partner past the last core sits the step out).
// Source cores of a receiver then arrive in aligned groups of `per_group`:
// steps [g * per_group, (g + 1) * per_group) complete the group of cores
// i ^ g * per_group, so each group is transposed at full vector width as
// soon as its last piece lands. The receiver's own group comes first (its
// own piece is already there), so the vector unit starts after
// per_group - 1 pieces. (The order of the other groups measured within 1%
// either way on relayout_bench.)
std::vector<uint32_t> exchange_steps(uint32_t cores, uint32_t per_group) {
  uint32_t span = 1;
  while (span < cores) span *= 2;
  std::vector<uint32_t> steps;
  for (uint32_t t = 1; t < std::min(per_group, span); ++t) steps.push_back(t);
  for (uint32_t g = 1; g < span / per_group; ++g) {
    for (uint32_t t = g * per_group; t < (g + 1) * per_group; ++t) {
      steps.push_back(t);
    }
  }
  return steps;
}

void emit_ring(ProgramBuilder& builder, const RelayoutPlacement& p) {
  const uint32_t n = p.cores;
  const uint64_t e = rt::elements_per_stick(p.dtype);
  // channel[i][j] is the first of sticks(bc_j) channels for piece (i, j).
  std::vector<std::vector<uint32_t>> channel(n, std::vector<uint32_t>(n));
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      channel[i][j] = builder.new_channel();
      for (uint64_t s = 1; s < sticks(p.col_blocks.size(j), p.dtype); ++s) {
        builder.new_channel();
      }
    }
  }
  // Source cores per transposed group: a power of two, so that groups are
  // aligned to the exchange's xor steps.
  // Received pieces are transposed in groups spanning as many bytes of a dst
  // row as the vector unit takes a cycle: it then runs full-width rows, and
  // only one group is left to transpose after the final piece arrives.
  // (The transpose pipeline needs no groups: each piece lands done.)
  uint32_t per_group = 1;
  while (!lands_transposed(p) &&
         2 * per_group * std::max<uint64_t>(p.row_blocks.chunk(), 1) *
                 rt::element_size(p.dtype) <=
             p.costs.vector_bytes_per_cycle) {
    per_group *= 2;
  }
  const std::vector<uint32_t> steps = exchange_steps(n, per_group);
  const uint32_t groups = u32(ceil_div(n, per_group));
  for (uint32_t i = 0; i < n; ++i) {
    CoreBuilder& core = builder.core(i);
    const uint64_t br = p.row_blocks.size(i);
    const uint64_t bc = p.col_blocks.size(i);
    const uint64_t my_sticks = sticks(bc, p.dtype);
    emit_zero_padding(core, p, i);
    // Pieces still missing per group of `per_group` source cores;
    // a complete group's rows are transposed into dst at once.
    std::vector<uint32_t> missing(groups, 0);
    for (uint32_t k = 0; k < n; ++k) {
      missing[k / per_group] += p.row_blocks.size(k) > 0;
    }
    auto arrived = [&](uint32_t k) {
      if (lands_transposed(p)) return;
      const uint32_t g = k / per_group;
      if (--missing[g] > 0) return;
      const uint64_t a = p.row_blocks.begin(g * per_group);
      const uint64_t b = p.row_blocks.begin(std::min(n, (g + 1) * per_group));
      for (uint64_t s = 0; s < my_sticks; ++s) {
        emit_transpose(core, p, i, s,
                       u32(p.staging + (s * p.rows + a) * kStick), a, b);
      }
    };
    if (br > 0 && bc > 0 && lands_transposed(p)) {
      // The own piece goes from src to dst on the vector unit.
      const uint64_t a = p.row_blocks.begin(i);
      for (uint64_t s = 0; s < my_sticks; ++s) {
        const uint64_t stick = p.col_blocks.begin(i) / e + s;
        emit_transpose(core, p, i, s, u32(p.src + stick * br * kStick), a,
                       a + br);
      }
    } else if (br > 0 && bc > 0) {
      for (uint64_t s = 0; s < my_sticks; ++s) emit_own_piece(core, p, i, s);
      arrived(i);
    }
    // Sends in step order; each receive goes after the last send that
    // starts before its piece is expected (the partner sends it in the
    // same step), so a receive rarely holds up the core's next send.
    struct Receive {
      uint64_t ready;
      uint32_t from;
    };
    std::vector<Receive> receives;
    uint64_t clock = 0;
    for (uint32_t t : steps) {
      const uint32_t j = i ^ t;
      if (j >= n) continue;
      const uint64_t bcj = p.col_blocks.size(j);
      const uint64_t brj = p.row_blocks.size(j);
      uint64_t piece_cycles = 0;
      if (br > 0 && bcj > 0) {
        for (uint64_t s = 0; s < sticks(bcj, p.dtype); ++s) {
          piece_cycles += send_cycles(p, br);
        }
      }
      if (brj > 0 && bc > 0) {
        const uint64_t theirs = my_sticks * send_cycles(p, brj);
        receives.push_back(
            {clock + theirs + p.costs.ring_hop_cycles * ring_distance(i, j, n) +
                 kReceiveMarginCycles,
             j});
      }
      clock += piece_cycles;
    }
    std::stable_sort(
        receives.begin(), receives.end(),
        [](const Receive& a, const Receive& b) { return a.ready < b.ready; });
    // Receives that land through the transpose pipeline go after all the
    // core's sends: nothing waits on them within the exchange, and one
    // placed early would hold up later sends in the ring queue.
    size_t next_receive = 0;
    auto receive_until = [&](uint64_t time) {
      if (lands_transposed(p) && time != ~uint64_t{0}) return;
      for (; next_receive < receives.size() &&
             receives[next_receive].ready <= time;
           ++next_receive) {
        const uint32_t k = receives[next_receive].from;
        for (uint64_t s = 0; s < my_sticks; ++s) {
          core.emit(receive_piece(p, i, k, s, u32(channel[k][i] + s)));
        }
        arrived(k);
      }
    };
    clock = 0;
    for (uint32_t t : steps) {
      const uint32_t j = i ^ t;
      if (j >= n) continue;
      const uint64_t bcj = p.col_blocks.size(j);
      if (br == 0 || bcj == 0) continue;
      for (uint64_t s = 0; s < sticks(bcj, p.dtype); ++s) {
        receive_until(clock);
        const uint64_t stick = p.col_blocks.begin(j) / e + s;
        core.emit(rt::RingSend{u32(channel[i][j] + s), j,
                               u32(p.src + stick * br * kStick),
                               u32(br * kStick)});
        clock += send_cycles(p, br);
      }
    }
    receive_until(~uint64_t{0});
  }
}

void emit_through_dram(ProgramBuilder& builder, const RelayoutPlacement& p,
                       uint32_t scratch_slot) {
  const uint64_t e = rt::elements_per_stick(p.dtype);
  const uint64_t all_sticks = sticks(p.cols, p.dtype);
  // Scratch: X stick-major, [sticks(cols)][rows][128 B].
  for (uint32_t i = 0; i < p.cores; ++i) {
    const uint64_t br = p.row_blocks.size(i);
    if (br == 0) continue;
    rt::StickTransfer x;
    x.dram = {scratch_slot, p.row_blocks.begin(i) * kStick};
    x.spad = p.src;
    x.run_bytes = u32(br * kStick);
    x.count1 = u32(all_sticks);
    x.dram_stride1 = static_cast<int64_t>(p.rows * kStick);
    x.spad_stride1 = u32(br * kStick);
    builder.core(i).store({x});
  }
  emit_barrier(builder, p.cores);
  for (uint32_t j = 0; j < p.cores; ++j) {
    const uint64_t bc = p.col_blocks.size(j);
    if (bc == 0) continue;
    CoreBuilder& core = builder.core(j);
    const uint64_t my_sticks = sticks(bc, p.dtype);
    rt::StickTransfer x;
    x.dram = {scratch_slot, p.col_blocks.begin(j) / e * p.rows * kStick};
    x.spad = p.staging;
    x.run_bytes = u32(my_sticks * p.rows * kStick);
    core.load({x});
    emit_zero_padding(core, p, j);
    for (uint64_t s = 0; s < my_sticks; ++s) {
      emit_transpose(core, p, j, s, u32(p.staging + s * p.rows * kStick), 0,
                     p.rows);
    }
  }
}

// X's row block of core i into its src buffer, stick-major.
// Loads core i's row block of the pass [row0, row0 + p.rows) x [col0,
// col0 + p.cols) of `in`.
void emit_load_src(CoreBuilder& core, const Matrix& in,
                   const RelayoutPlacement& p, uint32_t i, uint64_t row0,
                   uint64_t col0, uint64_t batch) {
  const uint64_t br = p.row_blocks.size(i);
  const uint64_t r0 = row0 + p.row_blocks.begin(i);
  if (br == 0) return;
  const uint64_t e = rt::elements_per_stick(p.dtype);
  const uint64_t n = sticks(p.cols, p.dtype);
  std::vector<rt::StickTransfer> xs =
      in.tiles(0, r0, br, col0, p.cols, p.src, u32(kStick), batch);
  // One transfer that walks rows then sticks: point its stick step at the
  // next stick-major block. Otherwise one transfer per stick.
  if (xs.size() == 1 && xs[0].count2 == n && xs[0].run_bytes == kStick) {
    xs[0].spad_stride2 = u32(br * kStick);
    core.load(xs);
    return;
  }
  for (uint64_t s = 0; s < n; ++s) {
    core.load(in.tiles(0, r0, br, col0 + s * e, std::min(e, p.cols - s * e),
                       u32(p.src + s * br * kStick), u32(kStick), batch));
  }
}

// kColumnLoads: core j loads its column block of the pass straight from
// `in` into staging, stick-major (sticks(bc) x rows x 128), and transposes
// it into dst.
void emit_column_loads(CoreBuilder& core, const Matrix& in,
                       const RelayoutPlacement& p, uint32_t j, uint64_t row0,
                       uint64_t col0, uint64_t batch) {
  const uint64_t bc = p.col_blocks.size(j);
  if (bc == 0) return;
  const uint64_t e = rt::elements_per_stick(p.dtype);
  for (uint64_t s = 0; s < sticks(bc, p.dtype); ++s) {
    const uint64_t c = p.col_blocks.begin(j) + s * e;
    core.load(in.tiles(0, row0, p.rows, col0 + c, std::min(e, bc - s * e),
                       u32(p.staging + s * p.rows * kStick), u32(kStick),
                       batch));
  }
  emit_zero_padding(core, p, j);
  for (uint64_t s = 0; s < sticks(bc, p.dtype); ++s) {
    emit_transpose(core, p, j, s, u32(p.staging + s * p.rows * kStick), 0,
                   p.rows);
  }
}

// Whether X's rows are too few to spread: its row blocks would reach fewer
// cores than its column blocks, so one core would load most of X.
bool too_few_rows(uint64_t rows, uint64_t cols, rt::DType dtype,
                  uint32_t cores) {
  const uint64_t e = rt::elements_per_stick(dtype);
  return Split{rows, cores, e}.used_parts() <
         Split{cols, cores, e}.used_parts();
}

void check_matrices(const Matrix& in, const Matrix& out) {
  if (out.rows != in.cols || out.cols != in.rows) {
    throw KernelBuildError(rt::str("restickify: out must be ", in.cols, "x",
                                   in.rows, " (the transpose of in, ", in.rows,
                                   "x", in.cols, "), not ", out.rows, "x",
                                   out.cols));
  }
  if (in.dtype != out.dtype) {
    throw KernelBuildError("restickify: in and out must share a dtype");
  }
  if (in.batch_dims.size() != out.batch_dims.size() ||
      in.batch_count() != out.batch_count()) {
    throw KernelBuildError("restickify: in and out must list the same batches");
  }
  for (size_t d = 0; d < in.batch_dims.size(); ++d) {
    if (in.batch_dims[d].size != out.batch_dims[d].size) {
      throw KernelBuildError(
          "restickify: in and out must list the same batches");
    }
  }
  if (in.rows == 0 || in.cols == 0) {
    throw KernelBuildError("restickify of an empty matrix needs no program");
  }
}

}  // namespace

const char* relayout_path_name(RelayoutPath path) {
  switch (path) {
    case RelayoutPath::kRing:
      return "ring";
    case RelayoutPath::kDeviceMemory:
      return "device_memory";
    case RelayoutPath::kNone:
      return "none";
    case RelayoutPath::kColumnLoads:
      return "column_loads";
  }
  return "?";
}

uint64_t RelayoutPlacement::src_bytes() const {
  if (path == RelayoutPath::kColumnLoads) return 0;  // loads into staging
  return sticks(cols, dtype) * row_blocks.chunk() * kStick;
}
uint64_t RelayoutPlacement::dst_bytes() const {
  return col_blocks.chunk() * padded_row_bytes(rows, dtype);
}
uint64_t RelayoutPlacement::staging_bytes() const {
  const bool staged = path == RelayoutPath::kDeviceMemory ||
                      path == RelayoutPath::kColumnLoads ||
                      (path == RelayoutPath::kRing && !lands_transposed(*this));
  return staged ? sticks(col_blocks.chunk(), dtype) * rows * kStick : 0;
}

const char* ring_transpose_name(RingTranspose how) {
  switch (how) {
    case RingTranspose::kFastest:
      return "fastest";
    case RingTranspose::kPipeline:
      return "transpose_pipeline";
    case RingTranspose::kVectorUnit:
      return "vector_unit";
  }
  return "?";
}

uint64_t relayout_scratch_bytes(uint64_t rows, uint64_t cols, rt::DType dtype) {
  return sticks(cols, dtype) * rows * kStick;
}

namespace {

// Which way of transposing on the ring is faster for p's blocks, by one
// core's ring-engine time per stick of its largest row block: the pieces
// are the same either way, and the vector unit's transposes overlap the
// sends (but for the last group's, a small tail left out of the estimate).
RingTranspose fastest_ring_transpose(RelayoutPlacement p) {
  const uint64_t rows = p.row_blocks.chunk();
  p.ring_transpose = RingTranspose::kPipeline;
  const uint64_t pipeline = send_cycles(p, rows);
  p.ring_transpose = RingTranspose::kVectorUnit;
  return pipeline <= send_cycles(p, rows) ? RingTranspose::kPipeline
                                          : RingTranspose::kVectorUnit;
}

// The blocks of a rows x cols re-layout over at most `cores` cores (no
// buffers yet), the way of transposing decided.
RelayoutPlacement place_blocks(uint64_t rows, uint64_t cols, rt::DType dtype,
                               uint32_t cores, const RelayoutOptions& o) {
  const uint64_t e = rt::elements_per_stick(dtype);
  RelayoutPlacement p;
  p.rows = rows;
  p.cols = cols;
  p.dtype = dtype;
  p.costs = o.target.costs();
  p.path = o.path;
  p.cores = std::max(Split{rows, cores, e}.used_parts(),
                     Split{cols, cores, e}.used_parts());
  p.row_blocks = Split{rows, p.cores, e};
  p.col_blocks = Split{cols, p.cores, e};
  p.dst_pitch = padded_row_bytes(rows, dtype);
  p.ring_transpose = o.ring_transpose == RingTranspose::kFastest
                         ? fastest_ring_transpose(p)
                         : o.ring_transpose;
  return p;
}

uint64_t scratchpad_need(const RelayoutPlacement& p) {
  return p.src_bytes() + p.dst_bytes() + p.staging_bytes();
}

// The rows and columns one pass re-lays out: all of them when they fit the
// scratchpads; else every row and the most whole sticks of columns that fit
// (long rows); else the most whole sticks of rows with one stick of
// columns, then the most columns with those rows (many rows). A shape that
// cannot fit even one stick each way is returned whole: plan_relayout says
// why.
struct PassShape {
  uint64_t rows = 0, cols = 0;
};

PassShape pass_shape(uint64_t rows, uint64_t cols, rt::DType dtype,
                     uint32_t cores, const RelayoutOptions& o) {
  const uint64_t e = rt::elements_per_stick(dtype);
  const auto fits = [&](uint64_t r, uint64_t c) {
    return scratchpad_need(place_blocks(r, c, dtype, cores, o)) <=
           o.target.scratchpad_budget();
  };
  // the most of n, in whole sticks, that `ok` accepts (0: not one stick)
  const auto most = [&](uint64_t n, const auto& ok) -> uint64_t {
    uint64_t lo = 0, hi = ceil_div(n, e);
    if (ok(n)) return n;
    while (hi - lo > 1) {  // ok(lo * e) (or lo == 0), !ok(hi * e)
      const uint64_t mid = (lo + hi) / 2;
      (ok(std::min(mid * e, n)) ? lo : hi) = mid;
    }
    return lo * e;
  };
  if (fits(rows, cols)) return {rows, cols};
  if (fits(rows, std::min(e, cols))) {
    return {rows, most(cols, [&](uint64_t c) { return fits(rows, c); })};
  }
  const uint64_t r =
      most(rows, [&](uint64_t r) { return fits(r, std::min(e, cols)); });
  if (r == 0) return {rows, cols};
  return {r, most(cols, [&](uint64_t c) { return fits(r, c); })};
}

}  // namespace

RelayoutPlacement plan_relayout(ProgramBuilder& builder, uint64_t rows,
                                uint64_t cols, rt::DType dtype,
                                const RelayoutOptions& o) {
  const uint32_t cores = std::min(o.target.cores(), builder.num_cores());
  RelayoutPlacement p = place_blocks(rows, cols, dtype, cores, o);
  const uint64_t need = scratchpad_need(p);
  const uint64_t budget = o.target.scratchpad_budget();
  if (need > budget) {
    throw KernelBuildError(rt::str("restickify of ", rows, "x", cols, " over ",
                                   p.cores, " cores needs ", need,
                                   " bytes of scratchpad per core (block, its "
                                   "transpose and a staging area), over the ",
                                   budget, " available; split the tensor"));
  }
  for (uint32_t i = 0; i < p.cores; ++i) {
    CoreBuilder& core = builder.core(i);
    // A buffer the path does not use (0 bytes) is not reserved.
    const auto reserve = [&core](uint64_t bytes, const char* what) {
      return bytes == 0 ? 0u : core.reserve(u32(bytes), what);
    };
    const uint32_t src = reserve(p.src_bytes(), "relayout src");
    const uint32_t dst = reserve(p.dst_bytes(), "relayout dst");
    const uint32_t staging = reserve(p.staging_bytes(), "relayout staging");
    if (i == 0) {
      p.src = src;
      p.dst = dst;
      p.staging = staging;
    } else if (src != p.src || dst != p.dst || staging != p.staging) {
      throw KernelBuildError(
          "restickify: the cores' scratchpads are allocated differently; plan "
          "the re-layout before other per-core buffers");
    }
  }
  return p;
}

void emit_barrier(ProgramBuilder& builder, uint32_t cores) {
  // A dissemination barrier: in round r core i signals core i + 2^r and
  // waits for core i - 2^r. After ceil(log2(cores)) rounds every core has
  // heard, through a chain of tokens, from every other, and all leave within
  // a few hop latencies of each other. Each core's ring engine runs its
  // tokens in order, so the chains also order device memory (program.h).
  for (uint32_t step = 1; step < cores; step *= 2) {
    std::vector<uint32_t> channel(cores);
    for (uint32_t& c : channel) c = builder.new_channel();
    for (uint32_t i = 0; i < cores; ++i) {
      CoreBuilder& core = builder.core(i);
      core.emit(rt::RingSend{channel[i], (i + step) % cores, 0, 0});
      const uint32_t from = (i + cores - step) % cores;
      core.emit(rt::RingRecv{channel[from], from, 0, 0, {}});
    }
  }
}

void emit_relayout(ProgramBuilder& builder, const RelayoutPlacement& place,
                   uint32_t scratch_slot) {
  switch (place.path) {
    case RelayoutPath::kRing:
      emit_ring(builder, place);
      return;
    case RelayoutPath::kDeviceMemory:
      emit_through_dram(builder, place, scratch_slot);
      return;
    case RelayoutPath::kNone:
    case RelayoutPath::kColumnLoads:  // build_restickify's: no exchange
      return;
  }
}

rt::Program build_restickify(const Matrix& in, const Matrix& out,
                             const RelayoutOptions& o) {
  check_matrices(in, out);
  const uint32_t cores = o.target.cores();
  RelayoutOptions chosen = o;
  if (o.path == RelayoutPath::kRing &&
      o.ring_transpose == RingTranspose::kFastest &&
      too_few_rows(in.rows, in.cols, in.dtype, cores)) {
    chosen.path = RelayoutPath::kColumnLoads;
  }
  ProgramBuilder builder(rt::str("restickify_", in.rows, "x", in.cols, "_",
                                 relayout_path_name(chosen.path)),
                         cores, o.target.scratchpad_budget());
  builder.add_arg("in", in.dtype, in.bytes(), false);
  builder.add_arg("out", out.dtype, out.bytes(), true);
  uint32_t scratch = 0;
  if (o.path == RelayoutPath::kDeviceMemory) {
    scratch = builder.add_arg(
        "scratch", in.dtype, relayout_scratch_bytes(in.rows, in.cols, in.dtype),
        false);
  }
  const PassShape pass = pass_shape(in.rows, in.cols, in.dtype, cores, chosen);
  const RelayoutPlacement full =
      plan_relayout(builder, pass.rows, pass.cols, in.dtype, chosen);
  const uint64_t e = rt::elements_per_stick(in.dtype);
  // Batches, and passes over the rows and columns of each, one after
  // another through the same buffers; a barrier between them keeps a fast
  // core from overwriting what a slower one still reads (the DRAM path's
  // scratch, a ring partner's pieces). The last passes may be smaller: the
  // same buffers and cores, their rows and columns split among them.
  bool first = true;
  for (uint64_t batch = 0; batch < in.batch_count(); ++batch) {
    for (uint64_t row0 = 0; row0 < in.rows; row0 += pass.rows) {
      for (uint64_t col0 = 0; col0 < in.cols; col0 += pass.cols) {
        RelayoutPlacement p = full;
        p.rows = std::min(pass.rows, in.rows - row0);
        p.cols = std::min(pass.cols, in.cols - col0);
        p.row_blocks = Split{p.rows, p.cores, e};
        p.col_blocks = Split{p.cols, p.cores, e};
        if (!std::exchange(first, false)) emit_barrier(builder, p.cores);
        for (uint32_t i = 0; i < p.cores; ++i) {
          if (p.path == RelayoutPath::kColumnLoads) {
            emit_column_loads(builder.core(i), in, p, i, row0, col0, batch);
          } else {
            emit_load_src(builder.core(i), in, p, i, row0, col0, batch);
          }
        }
        if (o.barrier_after_load) emit_barrier(builder, p.cores);
        emit_relayout(builder, p, scratch);
        for (uint32_t j = 0; j < p.cores; ++j) {
          const uint64_t bc = p.col_blocks.size(j);
          if (bc == 0) continue;
          builder.core(j).store(out.tiles(1, col0 + p.col_blocks.begin(j), bc,
                                          row0, p.rows, p.dst, p.dst_pitch,
                                          batch));
        }
      }
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
