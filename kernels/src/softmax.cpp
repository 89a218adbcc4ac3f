#include "spyre/kernels/softmax.h"

#include <algorithm>
#include <cmath>

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/row_kernel.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;

rt::Tile tile_of(uint32_t offset, rt::DType dtype, uint32_t pitch) {
  return {offset, dtype, static_cast<int32_t>(pitch),
          static_cast<int32_t>(rt::element_size(dtype))};
}

// A column of one fp32 value per row, broadcast along the row.
rt::Tile row_scalar(uint32_t offset) { return {offset, kF32, 4, 0}; }

rt::Reduce reduce(rt::RedOp op, uint32_t dst, rt::Tile src, uint32_t rows,
                  uint32_t cols) {
  rt::Reduce r;
  r.op = op;
  r.dst = {dst, kF32, 4, 0};
  r.src = src;
  r.rows = rows;
  r.cols = cols;
  return r;
}

// Round-trips `rows` fp32 stats through the stats argument, as a separate
// reduction kernel would: store, then load back before use.
void through_dram(CoreBuilder& core, uint32_t spad, uint64_t dram_offset,
                  uint32_t rows) {
  rt::StickTransfer x;
  x.dram = {2, dram_offset};
  x.spad = spad;
  x.run_bytes = static_cast<uint32_t>(rt::round_up_to_sticks(rows * 4ull));
  core.emit(rt::DmaStore{x});
  core.emit(rt::DmaLoad{x});
}

struct Buffers {
  uint32_t in[2];
  uint32_t work, max, sum;
  uint32_t in_pitch, work_pitch;
};

// The math for one tile already in the scratchpad at `in`; writes the
// result (in the output dtype) back over `in`.
void emit_tile_math(CoreBuilder& core, const Buffers& b, uint32_t in,
                    const Matrix& m, const Matrix& out, uint32_t rows,
                    const SoftmaxOptions& o, uint64_t stats_offset) {
  const uint32_t cols = static_cast<uint32_t>(m.cols);
  const rt::Tile x = tile_of(in, m.dtype, b.in_pitch);
  const rt::Tile work = tile_of(b.work, kF32, b.work_pitch);
  const bool dram = o.schedule == SoftmaxSchedule::kStatsThroughDram;
  core.emit(reduce(rt::RedOp::kMax, b.max, x, rows, cols));
  if (dram) through_dram(core, b.max, stats_offset, rows);
  core.emit(vec2(rt::VecOp::kSub, work, x, row_scalar(b.max), rows, cols));
  if (o.log) {
    // log_softmax = (x - max) - log(sum(exp(x - max))); the exp pass
    // overwrites the work tile, so x - max is recomputed afterwards.
    core.emit(vec(rt::VecOp::kExp, work, work, rows, cols));
    core.emit(reduce(rt::RedOp::kSum, b.sum, work, rows, cols));
    if (dram) through_dram(core, b.sum, stats_offset, rows);
    core.emit(
        vec(rt::VecOp::kLog, row_scalar(b.sum), row_scalar(b.sum), rows, 1));
    core.emit(vec2(rt::VecOp::kSub, work, x, row_scalar(b.max), rows, cols));
    core.emit(vec2(rt::VecOp::kSub, tile_of(in, out.dtype, b.in_pitch), work,
                   row_scalar(b.sum), rows, cols));
    return;
  }
  core.emit(vec(rt::VecOp::kExp, work, work, rows, cols));
  core.emit(reduce(rt::RedOp::kSum, b.sum, work, rows, cols));
  if (dram) through_dram(core, b.sum, stats_offset, rows);
  core.emit(
      vec(rt::VecOp::kRecip, row_scalar(b.sum), row_scalar(b.sum), rows, 1));
  core.emit(vec2(rt::VecOp::kMul, tile_of(in, out.dtype, b.in_pitch), work,
                 row_scalar(b.sum), rows, cols));
}

uint32_t tile_rows_that_fit(const Matrix& m, uint32_t budget, bool resident,
                            uint64_t core_rows) {
  const uint64_t in_row = padded_row_bytes(m.cols, m.dtype);
  const uint64_t work_row = padded_row_bytes(m.cols, kF32);
  // Per row: input (double-buffered unless resident), fp32 work, 2 stats.
  if (resident) {
    uint64_t fixed =
        core_rows * in_row + 2 * rt::round_up_to_sticks(core_rows * 4);
    if (fixed >= budget) return 0;
    return static_cast<uint32_t>(
        std::min<uint64_t>(core_rows, (budget - fixed) / work_row));
  }
  const uint64_t per_row = 2 * in_row + work_row + 8;
  return static_cast<uint32_t>(std::min<uint64_t>(core_rows, budget / per_row));
}

}  // namespace

// Each core round-trips its stats through its own region of the stats slot.
static uint64_t stats_region_bytes(const Matrix& in, uint32_t cores) {
  return rt::round_up_to_sticks(Split{in.rows, cores, 1}.chunk() * 4);
}

uint64_t softmax_stats_bytes(const Matrix& in, const SoftmaxOptions& o) {
  return stats_region_bytes(in, o.target.cores()) * o.target.cores();
}

namespace {

void check(const Matrix& in, const Matrix& out) {
  if (in.rows != out.rows || in.cols != out.cols) {
    throw KernelBuildError("softmax: input and output shapes differ");
  }
  if (!rt::is_floating(in.dtype) || in.dtype != out.dtype) {
    throw KernelBuildError(
        "softmax needs a floating-point input and an output of the same dtype");
  }
}

}  // namespace

LoopKernel describe_softmax(const Matrix& in, const Matrix& out, bool log,
                            bool safe) {
  check(in, out);
  if (log && safe) {
    throw KernelBuildError("softmax: the safe form is softmax's, not log's");
  }
  RowKernelWriter w(log    ? "log_softmax"
                    : safe ? "safe_softmax"
                           : "softmax",
                    in);
  w.rows_operand("input", in, false);
  w.rows_operand("output", out, true);
  // the row max, the sum of exp(x - max), then exp(x - max) * (1 / sum) (as
  // PyTorch's CPU kernel; the compiler rewrites the decomposition's division
  // to that) or (x - max) - log(sum)
  w.store("row_max", w.reduction("max", w.load("input")));
  w.next_node();
  // (each op named in its own statement: argument order is unspecified)
  const auto shifted = [&] {
    const uint32_t x = w.load("input");
    return w.binary("sub", x, w.load("row_max"));
  };
  w.store("row_sum", w.reduction("sum", w.unary("exp", shifted())));
  w.next_node();
  const uint32_t x = shifted();
  if (log) {
    w.store("output", w.binary("sub", x, w.unary("log", w.load("row_sum"))));
  } else {
    const uint32_t e = w.unary("exp", x);
    uint32_t y = w.binary("mul", e, w.unary("recip", w.load("row_sum")));
    if (safe) {
      // a row max of -inf means every element is -inf (a NaN would make
      // the max NaN): such a row is fully masked and gives zeros
      const uint32_t row_max = w.load("row_max");
      const uint32_t masked = w.compare("eq", row_max, w.constant(-INFINITY));
      y = w.select(masked, w.constant(0.0), y);
    }
    w.store("output", y);
  }
  return std::move(w).finish();
}

rt::Program build_softmax(const Matrix& in, const Matrix& out,
                          const SoftmaxOptions& o) {
  if (o.schedule == SoftmaxSchedule::kStreamed) {
    return build_loop_kernel(describe_softmax(in, out, o.log, o.safe),
                             {o.target})
        .program;
  }
  if (o.safe) {
    throw KernelBuildError("softmax: the safe form is streamed only");
  }
  check(in, out);
  const uint32_t budget = o.target.scratchpad_budget();
  ProgramBuilder builder(o.log ? "log_softmax" : "softmax", o.target.cores(),
                         budget);
  builder.add_arg("input", in.dtype, in.bytes(), false);
  builder.add_arg("output", out.dtype, out.bytes(), true);
  const bool dram = o.schedule == SoftmaxSchedule::kStatsThroughDram;
  const bool resident = o.schedule == SoftmaxSchedule::kResident;
  if (dram) builder.add_arg("stats", kF32, softmax_stats_bytes(in, o), false);
  const uint64_t stats_region = stats_region_bytes(in, o.target.cores());

  const Split rows{in.rows, o.target.cores(), 1};
  for (uint32_t c = 0; c < rows.used_parts(); ++c) {
    const uint64_t r0 = rows.begin(c), nr = rows.size(c);
    const uint32_t tr = tile_rows_that_fit(in, budget, resident, nr);
    if (tr == 0) {
      throw KernelBuildError(rt::str("softmax: a row of ", in.cols,
                                     " elements does not fit the ",
                                     rt::format_bytes(budget), " scratchpad",
                                     resident ? " when resident" : ""));
    }
    CoreBuilder& core = builder.core(c);
    Buffers b{};
    b.in_pitch = padded_row_bytes(in.cols, in.dtype);
    b.work_pitch = padded_row_bytes(in.cols, kF32);
    if (resident) {
      b.in[0] = b.in[1] = core.reserve(nr * b.in_pitch, "resident input");
      core.load(in.tiles(0, r0, nr, 0, in.cols, b.in[0], b.in_pitch));
    } else {
      b.in[0] = core.reserve(tr * b.in_pitch, "input tile");
      b.in[1] = core.reserve(tr * b.in_pitch, "input tile");
    }
    b.work = core.reserve(tr * b.work_pitch, "fp32 work tile");
    b.max = core.reserve(tr * 4, "row maxima");
    b.sum = core.reserve(tr * 4, "row sums");
    // Tile t's math runs while tile t + 1 loads: the core's DMA engine runs
    // in program order, so the next load is issued before this tile's store.
    // A resident input was cloned in whole above; its tiles store as they
    // finish.
    const auto load_tile = [&](uint64_t t, uint32_t at) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(tr, nr - t));
      core.load(in.tiles(0, r0 + t, n, 0, in.cols, at, b.in_pitch));
    };
    int parity = 0;
    if (!resident) load_tile(0, b.in[0]);
    for (uint64_t t = 0; t < nr; t += tr) {
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(tr, nr - t));
      const uint32_t at = resident
                              ? b.in[0] + static_cast<uint32_t>(t * b.in_pitch)
                              : b.in[parity];
      if (!resident && t + tr < nr) load_tile(t + tr, b.in[parity ^ 1]);
      emit_tile_math(core, b, at, in, out, n, o, c * stats_region);
      core.store(out.tiles(1, r0 + t, n, 0, out.cols, at, b.in_pitch));
      parity ^= 1;
    }
  }
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
