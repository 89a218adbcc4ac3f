#include "spyre/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "spyre/kernels/program_builder.h"
#include "spyre/kernels/row_kernel.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

constexpr rt::DType kF32 = rt::DType::kFloat32;
constexpr rt::DType kI64 = rt::DType::kInt64;

rt::RedOp device_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return rt::RedOp::kSum;
    case ReduceOp::kMax:
      return rt::RedOp::kMax;
    case ReduceOp::kMin:
      return rt::RedOp::kMin;
    case ReduceOp::kProd:
      return rt::RedOp::kProd;
    case ReduceOp::kArgMax:
      return rt::RedOp::kArgMax;
    case ReduceOp::kArgMin:
      return rt::RedOp::kArgMin;
  }
  return rt::RedOp::kSum;
}

uint64_t round_up(uint64_t v, uint64_t q) { return ceil_div(v, q) * q; }

// The accumulator dtype: fp32 for floating data, int64 indices for arg
// reductions, int64 for integer data.
rt::DType acc_dtype(const Matrix& in, ReduceOp op) {
  if (is_arg_reduction(op)) return kI64;
  return rt::is_floating(in.dtype) ? kF32 : kI64;
}

void check_dtypes(const Matrix& in, const Matrix& out, ReduceOp op) {
  if (is_arg_reduction(op) && out.dtype != kI64) {
    throw KernelBuildError(rt::str(reduce_op_name(op),
                                   " writes int64 indices, not ",
                                   rt::dtype_name(out.dtype)));
  }
  if (in.rows == 0 || in.cols == 0 || out.rows == 0 || out.cols == 0) {
    throw KernelBuildError(
        "a reduction over or into an empty tensor needs no program");
  }
}

// A reduction program named after `op` and `layout`, its two arguments
// declared.
ProgramBuilder reduce_program(const char* layout, const Matrix& in,
                              const Matrix& out, ReduceOp op,
                              const ReduceOptions& o, uint32_t budget) {
  ProgramBuilder builder(rt::str(reduce_op_name(op), layout), o.target.cores(),
                         budget);
  builder.add_arg("in", in.dtype, in.bytes(), false);
  builder.add_arg("out", out.dtype, out.bytes(), true);
  return builder;
}

// One core's scratchpad for a reduction: two input tiles (the next loads
// while one is reduced), the accumulator and the staged output row.
struct ReduceBuffers {
  uint32_t in[2], acc, out;
  int parity = 0;  // the input tile the next load goes to
};

// The buffers of `core`, reserved when it gets its first chunk so every
// chunk on the core reuses them.
ReduceBuffers& buffers_of(std::map<uint32_t, ReduceBuffers>& buffers,
                          CoreBuilder& core, uint64_t tile_bytes,
                          uint64_t row_bytes) {
  auto [it, first] = buffers.try_emplace(core.core());
  if (first) {
    ReduceBuffers& b = it->second;
    b.in[0] = core.reserve(static_cast<uint32_t>(tile_bytes), "reduce input");
    b.in[1] = core.reserve(static_cast<uint32_t>(tile_bytes), "reduce input");
    b.acc = core.reserve(static_cast<uint32_t>(row_bytes), "accumulator");
    b.out = core.reserve(static_cast<uint32_t>(row_bytes), "output row");
  }
  return it->second;
}

}  // namespace

std::vector<RowChunk> row_chunks(const Matrix& out, uint64_t quantum,
                                 uint32_t cores, uint64_t max_chunk) {
  const uint64_t units = ceil_div(out.cols, quantum);
  const uint64_t total = units * out.rows;
  uint64_t per_chunk = std::max<uint64_t>(1, ceil_div(total, cores));
  per_chunk = std::min<uint64_t>(per_chunk, units);
  uint64_t width = std::min(per_chunk * quantum, round_up(out.cols, quantum));
  width = std::max<uint64_t>(quantum,
                             std::min(width, max_chunk / quantum * quantum));
  std::vector<RowChunk> chunks;
  for (uint64_t r = 0; r < out.rows; ++r) {
    for (uint64_t c = 0; c < out.cols; c += width) {
      chunks.push_back({r, c, std::min(width, out.cols - c)});
    }
  }
  return chunks;
}

uint64_t widest_chunk(const std::vector<RowChunk>& chunks) {
  uint64_t widest = 0;
  for (const RowChunk& c : chunks) widest = std::max(widest, c.cols);
  return widest;
}

void for_each_chunk_on_cores(
    ProgramBuilder& builder, const std::vector<RowChunk>& chunks,
    const std::function<void(CoreBuilder&, const RowChunk&)>& emit) {
  const Split split{chunks.size(), builder.num_cores(), 1};
  for (uint32_t c = 0; c < split.used_parts(); ++c) {
    CoreBuilder& core = builder.core(c);
    for (uint64_t i = split.begin(c); i < split.begin(c + 1); ++i) {
      emit(core, chunks[i]);
    }
  }
}

rt::Reduce row_reduce(rt::RedOp op, rt::Tile dst, rt::Tile src, uint64_t rows,
                      uint64_t cols, bool accumulate) {
  rt::Reduce red;
  red.op = op;
  red.dst = dst;
  red.src = src;
  red.rows = static_cast<uint32_t>(rows);
  red.cols = static_cast<uint32_t>(cols);
  red.accumulate = accumulate;
  return red;
}

void store_chunk(CoreBuilder& core, const Matrix& out, uint32_t slot,
                 const RowChunk& chunk, uint32_t acc, rt::DType acc_dtype,
                 uint32_t staging, double scale) {
  const uint32_t pitch = padded_row_bytes(chunk.cols, out.dtype);
  rt::Vector v;
  v.op = scale == 1 ? rt::VecOp::kCopy : rt::VecOp::kMul;
  v.rows = 1;
  v.cols = static_cast<uint32_t>(chunk.cols);
  v.dst = spad_tile(staging, out.dtype, pitch);
  v.src0 = spad_tile(acc, acc_dtype, padded_row_bytes(chunk.cols, acc_dtype));
  v.src1_is_imm = true;
  v.imm = scale;
  core.emit(v);
  core.store(
      out.tiles(slot, chunk.row, 1, chunk.col0, chunk.cols, staging, pitch));
}

bool is_arg_reduction(ReduceOp op) {
  return op == ReduceOp::kArgMax || op == ReduceOp::kArgMin;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "amax";
    case ReduceOp::kMin:
      return "amin";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kArgMax:
      return "argmax";
    case ReduceOp::kArgMin:
      return "argmin";
  }
  return "?";
}

namespace {

// A floating reduction as the compiler describes it: the loop kernel's
// reduction, a mean's division by the count (the compiler's form of `scale`
// = 1 / n), one rounding into out's dtype.
LoopKernel describe_float_reduce(const Matrix& in, const Matrix& out,
                                 ReduceOp op, const ReduceOptions& o) {
  static constexpr const char* kNames[] = {"sum", "max", "min", "prod"};
  RowKernelWriter w(rt::str(reduce_op_name(op), "_along_sticks"), in);
  w.rows_operand("input", in, false);
  w.row_stats("output", out, true);
  const uint32_t x = w.load("input");
  uint32_t r = w.reduction(kNames[static_cast<int>(op)], x);
  if (o.scale != 1) {
    const double count = std::round(1 / o.scale);
    r = std::abs(count * o.scale - 1) < 1e-12
            ? w.binary("div", r, w.constant(count))
            : w.binary("mul", r, w.constant(o.scale));
  }
  w.store("output", r);
  return std::move(w).finish();
}

}  // namespace

rt::Program build_reduce_along_sticks(const Matrix& in, const Matrix& out,
                                      ReduceOp op, const ReduceOptions& o) {
  check_dtypes(in, out, op);
  // Floating values: the compiler's builder, so eager and compiled sums
  // agree bit for bit. Integers (exact int64 accumulation), arg reductions
  // (int64 indices), and rows too long for one block or laid out in ways
  // the row writer does not map keep this builder (it tiles the columns):
  // the loop kernel computes in fp32 and holds a whole row per block.
  if (rt::is_floating(in.dtype) && rt::is_floating(out.dtype) &&
      !is_arg_reduction(op)) {
    try {
      return build_loop_kernel(describe_float_reduce(in, out, op, o),
                               {o.target})
          .program;
    } catch (const KernelBuildError&) {
    }
  }
  const Matrix s = in.strided_form();
  const uint64_t inner = s.row_dims.empty() ? 1 : s.row_dims.back().size;
  if (out.cols != inner || out.rows * out.cols != in.rows) {
    throw KernelBuildError(
        rt::str("reduce along sticks: out must be ",
                in.rows / std::max<uint64_t>(inner, 1), " x ", inner,
                " (in's rows by its innermost row dimension), got ", out.rows,
                " x ", out.cols));
  }
  const uint32_t budget = o.target.scratchpad_budget();
  const rt::DType acc_t = acc_dtype(in, op);
  const uint64_t ei = in.elements_per_stick();
  const uint64_t eo = out.elements_per_stick();
  // Rows of one item: at most 512; columns of one tile: the whole row, or
  // halves of it (whole sticks) when it does not fit.
  const std::vector<RowChunk> items =
      row_chunks(out, eo, o.target.cores(), 512);
  const uint64_t max_rows = widest_chunk(items);
  uint64_t tr = max_rows;
  uint64_t tc = round_up(in.cols, ei);
  auto need = [&](uint64_t r, uint64_t c) {
    return 2 * r * padded_row_bytes(c, in.dtype) +
           2 * rt::round_up_to_sticks(max_rows * 8);
  };
  while (need(tr, tc) > budget) {
    if (tc > ei && !is_arg_reduction(op)) {
      tc = round_up(tc / 2, ei);
    } else if (tr > 1) {
      tr = ceil_div(tr, 2);
    } else {
      throw KernelBuildError(
          rt::str(reduce_op_name(op), ": a row of ", in.cols,
                  " elements does not fit the scratchpad in one tile"));
    }
  }
  const uint32_t pitch = padded_row_bytes(tc, in.dtype);
  ProgramBuilder builder =
      reduce_program("_along_sticks", in, out, op, o, budget);
  std::map<uint32_t, ReduceBuffers> buffers;
  for_each_chunk_on_cores(
      builder, items, [&](CoreBuilder& core, const RowChunk& item) {
        ReduceBuffers& b = buffers_of(buffers, core, tr * pitch, max_rows * 8);
        const uint32_t acc_size = rt::element_size(acc_t);
        for (uint64_t r0 = 0; r0 < item.cols; r0 += tr) {
          const uint64_t nr = std::min(tr, item.cols - r0);
          for (uint64_t c0 = 0; c0 < in.cols; c0 += tc) {
            const uint64_t nc = std::min(tc, in.cols - c0);
            core.load(in.tiles(0, item.row * out.cols + item.col0 + r0, nr, c0,
                               nc, b.in[b.parity], pitch));
            const rt::Tile acc{b.acc + static_cast<uint32_t>(r0 * acc_size),
                               acc_t, static_cast<int32_t>(acc_size), 0};
            core.emit(row_reduce(device_op(op), acc,
                                 spad_tile(b.in[b.parity], in.dtype, pitch), nr,
                                 nc, c0 > 0));
            b.parity ^= 1;
          }
        }
        store_chunk(core, out, 1, item, b.acc, acc_t, b.out, o.scale);
      });
  return std::move(builder).finish();
}

rt::Program build_reduce_along_rows(const Matrix& in, const Matrix& out,
                                    ReduceOp op, const ReduceOptions& o) {
  check_dtypes(in, out, op);
  const Matrix s = in.strided_form();
  const uint64_t reduced = s.row_dims.empty() ? 1 : s.row_dims.back().size;
  if (out.cols != in.cols || out.rows * reduced != in.rows) {
    throw KernelBuildError(rt::str("reduce along rows: out must be ",
                                   in.rows / std::max<uint64_t>(reduced, 1),
                                   " x ", in.cols, ", got ", out.rows, " x ",
                                   out.cols));
  }
  const uint32_t budget = o.target.scratchpad_budget();
  const rt::DType acc_t = acc_dtype(in, op);
  const uint64_t ei = in.elements_per_stick();
  const uint64_t eo = out.elements_per_stick();
  const uint64_t quantum = std::lcm(ei, eo);
  const std::vector<RowChunk> items =
      row_chunks(out, quantum, o.target.cores(), 512);
  const uint64_t cc = widest_chunk(items);
  const uint32_t pitch = padded_row_bytes(cc, in.dtype);
  const uint64_t fixed = 2 * rt::round_up_to_sticks(cc * 8);
  if (fixed + 2 * pitch > budget) {
    throw KernelBuildError("reduce along rows: a column chunk does not fit");
  }
  uint64_t tr = std::min<uint64_t>(reduced, (budget - fixed) / (2 * pitch));
  if (is_arg_reduction(op) && tr < reduced) {
    throw KernelBuildError(rt::str(reduce_op_name(op), " over ", reduced,
                                   " rows does not fit one scratchpad tile"));
  }
  ProgramBuilder builder =
      reduce_program("_along_rows", in, out, op, o, budget);
  std::map<uint32_t, ReduceBuffers> buffers;
  for_each_chunk_on_cores(
      builder, items, [&](CoreBuilder& core, const RowChunk& item) {
        ReduceBuffers& b = buffers_of(buffers, core, tr * pitch, cc * 8);
        const uint32_t acc_size = rt::element_size(acc_t);
        for (uint64_t r0 = 0; r0 < reduced; r0 += tr) {
          const uint64_t nr = std::min(tr, reduced - r0);
          core.load(in.tiles(0, item.row * reduced + r0, nr, item.col0,
                             item.cols, b.in[b.parity], pitch));
          // The tile read transposed: each column becomes a row to reduce.
          core.emit(row_reduce(
              device_op(op), {b.acc, acc_t, static_cast<int32_t>(acc_size), 0},
              transposed(spad_tile(b.in[b.parity], in.dtype, pitch)), item.cols,
              nr, r0 > 0));
          b.parity ^= 1;
        }
        store_chunk(core, out, 1, item, b.acc, acc_t, b.out, o.scale);
      });
  return std::move(builder).finish();
}

}  // namespace spyre::kernels
