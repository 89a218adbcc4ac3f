#include "spyre/kernels/elementwise.h"

#include <algorithm>
#include <numeric>

#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

using Cols = StickOperand::Cols;

// The iteration space as [batch..., rows, cols]; a 1-D space has one row.
struct Space {
  std::vector<int64_t> batch;  // sizes of the dims before rows
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t batch_count() const {
    return std::accumulate(batch.begin(), batch.end(), int64_t{1},
                           std::multiplies<>());
  }
};

Space space_of(const std::vector<int64_t>& shape) {
  Space s;
  s.cols = shape.back();
  if (shape.size() >= 2) {
    s.rows = shape[shape.size() - 2];
    s.batch.assign(shape.begin(), shape.end() - 2);
  }
  return s;
}

int64_t row_stride(const StickOperand& op, size_t ndim) {
  return ndim >= 2 ? op.strides[ndim - 2] : 0;
}

// Byte offset of batch element `b` (flat index over the batch dims).
int64_t batch_offset(const StickOperand& op, const Space& s, int64_t b) {
  int64_t offset = 0;
  for (size_t d = s.batch.size(); d-- > 0;) {
    offset += (b % s.batch[d]) * op.strides[d];
    b /= s.batch[d];
  }
  return offset;
}

// Elements along the sticks that batch element `b` starts after the first.
int64_t batch_lanes(const StickOperand& op, const Space& s, int64_t b) {
  if (op.lane_steps.empty()) return 0;
  int64_t lanes = 0;
  for (size_t d = s.batch.size(); d-- > 0;) {
    lanes += (b % s.batch[d]) * op.lane_steps[d];
    b /= s.batch[d];
  }
  return lanes;
}

bool has_lane_steps(const StickOperand& op) {
  return std::any_of(op.lane_steps.begin(), op.lane_steps.end(),
                     [](int64_t l) { return l != 0; });
}

bool is_invariant(const StickOperand& op) {
  return op.cols == Cols::kBroadcast &&
         std::all_of(op.strides.begin(), op.strides.end(),
                     [](int64_t s) { return s == 0; });
}

// Scratchpad row pitch of an operand's part of a tile `width` columns wide
// whose columns start on a stick of `output`: one more stick when the
// operand's sticks are not aligned with the output's.
uint32_t operand_pitch(const StickOperand& op, const StickOperand& output,
                       int64_t width) {
  if (op.cols == Cols::kAcrossSticks) {
    return static_cast<uint32_t>(width * rt::kStickBytes);  // a stick a col
  }
  if (op.cols != Cols::kSticks) return rt::kStickBytes;
  const int64_t per_stick = op.elements_per_stick();
  const int64_t out_per_stick = output.elements_per_stick();
  const bool aligned =
      out_per_stick % per_stick == 0 && !has_lane_steps(op) &&
      (static_cast<int64_t>(op.first) - output.first) % per_stick == 0;
  return static_cast<uint32_t>(
      (ceil_div(width, per_stick) + (aligned ? 0 : 1)) * rt::kStickBytes);
}

// Rows of `pitch` bytes an operand's buffer needs for `rows` tile rows
// (rows along sticks: one stick per row is more than the rows' sticks).
uint32_t loaded_rows(const StickOperand& op, size_t ndim, int64_t rows) {
  if (op.cols == Cols::kRowsAlongSticks) return static_cast<uint32_t>(rows);
  return row_stride(op, ndim) == 0 ? 1 : static_cast<uint32_t>(rows);
}

// One tile of work: batch element, rows [row0, row0 + nrows), columns
// [col0, col0 + ncols).
struct TileWork {
  int64_t batch = 0;
  int64_t row0 = 0, nrows = 0;
  int64_t col0 = 0, ncols = 0;
};

// The stick transfer of an operand's part of a tile and the vector tile that
// addresses it in the scratchpad buffer at `spad`.
struct Placed {
  rt::StickTransfer xfer;
  rt::Tile tile;
};

Placed place(const StickOperand& op, uint32_t slot, const Space& s, size_t ndim,
             const TileWork& w, uint32_t spad, uint32_t pitch) {
  const int64_t rs = row_stride(op, ndim);
  const uint32_t nrows = rs == 0 ? 1 : static_cast<uint32_t>(w.nrows);
  const uint32_t esize = rt::element_size(op.dtype);
  const int64_t per_stick = op.elements_per_stick();
  const int64_t base = static_cast<int64_t>(op.offset) +
                       batch_offset(op, s, w.batch) + w.row0 * rs;
  Placed p;
  rt::StickTransfer& x = p.xfer;
  x.spad = spad;
  x.count1 = nrows;
  x.dram_stride1 = nrows > 1 ? rs : 0;
  x.spad_stride1 = nrows > 1 ? pitch : 0;
  uint32_t position = 0;
  if (op.cols == Cols::kRowsAlongSticks) {
    // The tile's rows are consecutive elements along the sticks: load the
    // sticks holding them end to end; row r is element r from `position`.
    const int64_t start = op.first + w.row0;
    const int64_t first_stick = start / per_stick;
    const int64_t sticks = (start + w.nrows - 1) / per_stick - first_stick + 1;
    x.dram = {slot,
              static_cast<uint64_t>(base + first_stick * op.stick_stride)};
    x.count1 = static_cast<uint32_t>(sticks);
    x.dram_stride1 = op.stick_stride;
    x.spad_stride1 = rt::kStickBytes;
    p.tile = rt::Tile{spad + static_cast<uint32_t>(start % per_stick) * esize,
                      op.dtype, static_cast<int32_t>(esize), 0};
    return p;
  }
  if (op.cols == Cols::kAcrossSticks) {
    // One stick per column, end to end in the row; the vector unit reads
    // position `first` of each.
    x.dram = {slot, static_cast<uint64_t>(base + w.col0 * op.stick_stride)};
    x.count2 = static_cast<uint32_t>(w.ncols);
    x.dram_stride2 = op.stick_stride;
    x.spad_stride2 = rt::kStickBytes;
    p.tile = rt::Tile{spad + op.first * esize, op.dtype,
                      nrows > 1 ? static_cast<int32_t>(pitch) : 0,
                      static_cast<int32_t>(rt::kStickBytes)};
    return p;
  }
  if (op.cols == Cols::kBroadcast) {
    x.dram = {slot, static_cast<uint64_t>(base)};
    position = op.first;
  } else {
    const int64_t start = op.first + batch_lanes(op, s, w.batch) + w.col0;
    const int64_t first_stick = start / per_stick;
    const int64_t sticks = (start + w.ncols - 1) / per_stick - first_stick + 1;
    x.dram = {slot,
              static_cast<uint64_t>(base + first_stick * op.stick_stride)};
    if (static_cast<uint64_t>(sticks) * rt::kStickBytes > pitch) {
      throw KernelBuildError(rt::str("elementwise: a tile of ", sticks,
                                     " sticks overflows its ", pitch,
                                     "-byte scratchpad row"));
    }
    if (op.stick_stride == rt::kStickBytes) {
      x.run_bytes = static_cast<uint32_t>(sticks * rt::kStickBytes);
    } else {
      x.count2 = static_cast<uint32_t>(sticks);
      x.dram_stride2 = op.stick_stride;
      x.spad_stride2 = rt::kStickBytes;
    }
    position = static_cast<uint32_t>(start % per_stick);
  }
  p.tile.offset = spad + position * esize;
  p.tile.dtype = op.dtype;
  p.tile.row_stride = nrows > 1 ? static_cast<int32_t>(pitch) : 0;
  p.tile.col_stride =
      op.cols == Cols::kBroadcast ? 0 : static_cast<int32_t>(esize);
  return p;
}

// The highest byte an operand's accesses reach, +1: its slot size.
uint64_t slot_extent(const StickOperand& op,
                     const std::vector<int64_t>& shape) {
  int64_t last = static_cast<int64_t>(op.offset);
  for (size_t d = 0; d + 1 < shape.size(); ++d) {
    last += (shape[d] - 1) * op.strides[d];
  }
  if (op.cols == Cols::kSticks) {
    int64_t lanes = 0;
    for (size_t d = 0; d < op.lane_steps.size(); ++d) {
      lanes += (shape[d] - 1) * op.lane_steps[d];
    }
    last += (op.first + lanes + shape.back() - 1) / op.elements_per_stick() *
            op.stick_stride;
  }
  if (op.cols == Cols::kRowsAlongSticks) {
    last += (op.first + shape[shape.size() - 2] - 1) / op.elements_per_stick() *
            op.stick_stride;
  }
  if (op.cols == Cols::kAcrossSticks) {
    last += (shape.back() - 1) * op.stick_stride;
  }
  return static_cast<uint64_t>(last) + rt::kStickBytes;
}

void check_kernel(const ElementwiseKernel& k) {
  rt::check(!k.shape.empty() && !k.steps.empty(),
            rt::ErrorCode::kInvalidArgument,
            "elementwise: empty iteration space or no steps");
  for (int64_t size : k.shape) {
    rt::check(size > 0, rt::ErrorCode::kInvalidArgument,
              "elementwise: iteration sizes must be positive");
  }
  auto check_operand = [&](const StickOperand& op) {
    rt::check(op.strides.size() + 1 == k.shape.size(),
              rt::ErrorCode::kInvalidArgument, "elementwise: operand has ",
              op.strides.size(), " outer strides for a ", k.shape.size(),
              "-dim iteration");
    rt::check(
        op.offset % rt::kStickBytes == 0 && op.first < op.elements_per_stick(),
        rt::ErrorCode::kInvalidArgument,
        "elementwise: operand offset must start a stick");
  };
  for (const StickOperand& op : k.inputs) {
    check_operand(op);
    rt::check(op.cols != Cols::kRowsAlongSticks ||
                  (k.shape.size() >= 2 && op.strides[k.shape.size() - 2] == 0),
              rt::ErrorCode::kInvalidArgument,
              "elementwise: rows along sticks need a rows dim of stride 0");
    rt::check(
        op.cols != Cols::kAcrossSticks ||
            (op.stick_stride > 0 && op.stick_stride % rt::kStickBytes == 0),
        rt::ErrorCode::kInvalidArgument,
        "elementwise: columns across sticks need a positive stride of "
        "whole sticks");
  }
  for (const StickOperand& op : k.inputs) {
    const bool batch_dims_only = std::all_of(
        op.lane_steps.begin() +
            std::min(op.lane_steps.size(),
                     k.shape.size() >= 2 ? k.shape.size() - 2 : size_t{0}),
        op.lane_steps.end(), [](int64_t l) { return l == 0; });
    rt::check(op.lane_steps.empty() ||
                  (op.lane_steps.size() == op.strides.size() &&
                   op.cols == Cols::kSticks && batch_dims_only &&
                   std::all_of(op.lane_steps.begin(), op.lane_steps.end(),
                               [](int64_t l) { return l >= 0; })),
              rt::ErrorCode::kInvalidArgument,
              "elementwise: lane steps belong to the batch dims of an input "
              "with columns along the sticks");
  }
  check_operand(k.output);
  rt::check(k.output.cols == Cols::kSticks && !has_lane_steps(k.output),
            rt::ErrorCode::kInvalidArgument,
            "elementwise: the output cannot broadcast or start its tiles "
            "inside different sticks");
}

// Scratchpad bytes of one buffer set for tiles `rows` x (`sticks` output
// sticks).
struct Footprint {
  std::vector<uint32_t> input_pitch, temp_pitch;
  uint32_t output_pitch = 0;
  int64_t width = 0;  // columns of the widest tile
  uint64_t bytes(const ElementwiseKernel& k, size_t ndim, int64_t rows) const {
    uint64_t total = 0;
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      if (is_invariant(k.inputs[i])) continue;
      total += uint64_t{loaded_rows(k.inputs[i], ndim, rows)} * input_pitch[i];
    }
    for (uint32_t p : temp_pitch) total += uint64_t(rows) * p;
    return total + uint64_t(rows) * output_pitch;
  }
};

Footprint footprint(const ElementwiseKernel& k, int64_t width) {
  Footprint f;
  f.width = width;
  for (const StickOperand& op : k.inputs) {
    f.input_pitch.push_back(operand_pitch(op, k.output, width));
  }
  for (size_t i = 0; i + 1 < k.steps.size(); ++i) {
    f.temp_pitch.push_back(padded_row_bytes(width, k.steps[i].dtype));
  }
  f.output_pitch = operand_pitch(k.output, k.output, width);
  return f;
}

}  // namespace

ElementwiseStep copy_step(int src) {
  return unary_step(rt::VecOp::kCopy, src, rt::DType::kFloat32);
}

ElementwiseStep unary_step(rt::VecOp op, int src, rt::DType dtype) {
  ElementwiseStep s;
  s.op = op;
  s.dtype = dtype;
  s.src[0] = src;
  return s;
}

ElementwiseStep binary_step(rt::VecOp op, int src0, int src1, rt::DType dtype) {
  ElementwiseStep s = unary_step(op, src0, dtype);
  s.src[1] = src1;
  return s;
}

ElementwiseStep scalar_step(rt::VecOp op, int src0, double imm,
                            rt::DType dtype) {
  ElementwiseStep s = unary_step(op, src0, dtype);
  s.src1_is_imm = true;
  s.imm = imm;
  return s;
}

ElementwiseStep select_step(int cond, int if_true, int if_false,
                            rt::DType dtype) {
  ElementwiseStep s = binary_step(rt::VecOp::kSelect, cond, if_true, dtype);
  s.src[2] = if_false;
  return s;
}

ElementwiseStep fill_step(double value, rt::DType dtype) {
  ElementwiseStep s;
  s.op = rt::VecOp::kFill;
  s.dtype = dtype;
  s.imm = value;
  return s;
}

ElementwiseStep index_step(ElementwiseStep::Kind kind, double start,
                           double step, rt::DType dtype) {
  ElementwiseStep s = fill_step(start, dtype);
  s.kind = kind;
  s.op = rt::VecOp::kIota;
  s.imm2 = step;
  return s;
}

ElementwiseStep random_step(rt::RandDist dist, double a, double b,
                            uint64_t seed, uint64_t offset, rt::DType dtype) {
  ElementwiseStep s = fill_step(a, dtype);
  s.kind = ElementwiseStep::Kind::kRandom;
  s.dist = dist;
  s.imm2 = b;
  s.seed = seed;
  s.offset = offset;
  return s;
}

void ElementwiseStep::append_key(KeyWriter& key) const {
  key.add(kind).add(dist).add(seed).add(offset).add(op).add(dtype);
  key.add_list(src).add(src1_is_imm).add(imm).add(imm2);
}

void StickOperand::append_key(KeyWriter& key) const {
  key.add(dtype).add(cols).add(offset).add(first).add(stick_stride);
  key.add_list(strides).add_list(lane_steps);
}

void ElementwiseKernel::append_key(KeyWriter& key) const {
  key.add("elementwise").add(name).add_list(shape);
  key.add(static_cast<uint64_t>(inputs.size()));
  for (const StickOperand& op : inputs) op.append_key(key);
  output.append_key(key);
  key.add(output_read_modify_write);
  key.add(static_cast<uint64_t>(steps.size()));
  for (const ElementwiseStep& step : steps) step.append_key(key);
  key.add(target.cores());
}

rt::Program build_elementwise(const ElementwiseKernel& k) {
  check_kernel(k);
  const size_t ndim = k.shape.size();
  const Space s = space_of(k.shape);
  const int64_t out_per_stick = k.output.elements_per_stick();
  const int64_t out_sticks =
      ceil_div(k.output.first + s.cols, out_per_stick);      // per row
  const uint64_t budget = k.target.scratchpad_budget() / 2;  // double-buffered

  // Tile width: whole rows if one fits, else fewer output sticks; narrower
  // still when there are too few rows to keep the cores busy.
  const int64_t row_units = s.batch_count() * s.rows;
  int64_t sticks_per_chunk = out_sticks;
  if (row_units < k.target.cores()) {
    const int64_t chunks_wanted = ceil_div(k.target.cores(), row_units);
    sticks_per_chunk =
        std::max<int64_t>(1, ceil_div(out_sticks, chunks_wanted));
  }
  auto width_of = [&](int64_t sticks) {
    return std::min<int64_t>(s.cols, sticks * out_per_stick);
  };
  while (sticks_per_chunk > 1 &&
         footprint(k, width_of(sticks_per_chunk)).bytes(k, ndim, 1) > budget) {
    sticks_per_chunk = ceil_div(sticks_per_chunk, 2);
  }
  const Footprint fp = footprint(k, width_of(sticks_per_chunk));
  if (fp.bytes(k, ndim, 1) > budget) {
    throw KernelBuildError(rt::str(
        k.name, ": one stick of every operand needs ", fp.bytes(k, ndim, 1),
        " bytes of scratchpad, more than the ", budget, " available"));
  }
  const int64_t chunks = ceil_div(out_sticks, sticks_per_chunk);
  const int64_t rows_fit = static_cast<int64_t>(
      budget / std::max<uint64_t>(1, fp.bytes(k, ndim, 1)));
  const int64_t rows_for_cores = std::max<int64_t>(
      1, ceil_div(row_units * chunks, k.target.cores()) / chunks);
  const int64_t rows_per_tile =
      std::max<int64_t>(1, std::min({s.rows, rows_fit, rows_for_cores}));
  const int64_t row_tiles = ceil_div(s.rows, rows_per_tile);
  const int64_t tiles = s.batch_count() * row_tiles * chunks;

  ProgramBuilder pb(k.name, k.target.cores(), k.target.chip.scratchpad_bytes);
  const uint32_t num_inputs = static_cast<uint32_t>(k.inputs.size());
  for (uint32_t i = 0; i < num_inputs; ++i) {
    pb.add_arg("in" + std::to_string(i), k.inputs[i].dtype,
               slot_extent(k.inputs[i], k.shape), false);
  }
  const uint32_t out_slot =
      pb.add_arg("out", k.output.dtype, slot_extent(k.output, k.shape), true);

  auto tile_at = [&](int64_t t) {
    TileWork w;
    const int64_t chunk = t % chunks;
    const int64_t row_tile = (t / chunks) % row_tiles;
    w.batch = t / chunks / row_tiles;
    w.row0 = row_tile * rows_per_tile;
    w.nrows = std::min(rows_per_tile, s.rows - w.row0);
    // Chunks start on output sticks: [chunk_start, chunk_end) in columns.
    const int64_t stick0 = chunk * sticks_per_chunk;
    w.col0 = std::max<int64_t>(0, stick0 * out_per_stick - k.output.first);
    const int64_t end = std::min<int64_t>(
        s.cols, (stick0 + sticks_per_chunk) * out_per_stick - k.output.first);
    w.ncols = end - w.col0;
    return w;
  };

  const Split split{static_cast<uint64_t>(tiles), k.target.cores(), 1};
  for (uint32_t c = 0; c < split.used_parts(); ++c) {
    CoreBuilder& core = pb.core(c);
    const uint64_t begin = split.begin(c), count = split.size(c);
    const int sets = count > 1 ? 2 : 1;
    // Buffers: invariant inputs once; the rest per buffer set.
    std::vector<uint32_t> invariant(num_inputs, 0);
    for (uint32_t i = 0; i < num_inputs; ++i) {
      if (!is_invariant(k.inputs[i])) continue;
      invariant[i] = core.reserve(rt::kStickBytes, "a broadcast operand");
      const Placed p = place(k.inputs[i], i, s, ndim, TileWork{0, 0, 1, 0, 1},
                             invariant[i], rt::kStickBytes);
      core.emit(rt::DmaLoad{p.xfer});
    }
    struct Set {
      std::vector<uint32_t> in, temp;
      uint32_t out = 0;
    };
    std::vector<Set> buffers(sets);
    for (Set& set : buffers) {
      for (uint32_t i = 0; i < num_inputs; ++i) {
        set.in.push_back(
            is_invariant(k.inputs[i])
                ? invariant[i]
                : core.reserve(loaded_rows(k.inputs[i], ndim, rows_per_tile) *
                                   fp.input_pitch[i],
                               "an input tile"));
      }
      for (uint32_t p : fp.temp_pitch) {
        set.temp.push_back(core.reserve(rows_per_tile * p, "a temporary"));
      }
      set.out = core.reserve(rows_per_tile * fp.output_pitch, "an output tile");
    }
    for (uint64_t t = 0; t < count; ++t) {
      const TileWork w = tile_at(static_cast<int64_t>(begin + t));
      const Set& set = buffers[t % sets];
      std::vector<rt::Tile> values;
      for (uint32_t i = 0; i < num_inputs; ++i) {
        const Placed p =
            place(k.inputs[i], i, s, ndim, w, set.in[i], fp.input_pitch[i]);
        if (!is_invariant(k.inputs[i])) core.emit(rt::DmaLoad{p.xfer});
        values.push_back(p.tile);
      }
      const Placed out =
          place(k.output, out_slot, s, ndim, w, set.out, fp.output_pitch);
      if (k.output_read_modify_write) core.emit(rt::DmaLoad{out.xfer});
      for (size_t st = 0; st < k.steps.size(); ++st) {
        const ElementwiseStep& step = k.steps[st];
        const bool last = st + 1 == k.steps.size();
        rt::Tile dst = out.tile;
        if (!last) {
          dst = rt::Tile{set.temp[st], step.dtype,
                         static_cast<int32_t>(fp.temp_pitch[st]),
                         static_cast<int32_t>(rt::element_size(step.dtype))};
        }
        using Kind = ElementwiseStep::Kind;
        const int32_t esize =
            static_cast<int32_t>(rt::element_size(step.dtype));
        if (step.kind == Kind::kColIndex || step.kind == Kind::kRowIndex) {
          if (last) {
            throw KernelBuildError(k.name + ": an index cannot be the output");
          }
          const bool cols = step.kind == Kind::kColIndex;
          rt::Vector v;
          v.op = rt::VecOp::kIota;
          v.dst = rt::Tile{set.temp[st], step.dtype, esize, esize};
          v.rows = cols ? 1 : static_cast<uint32_t>(w.nrows);
          v.cols = cols ? static_cast<uint32_t>(w.ncols) : 1;
          v.imm = step.imm +
                  static_cast<double>(cols ? w.col0 : w.row0) * step.imm2;
          v.imm2 = step.imm2;
          core.emit(v);
          values.push_back(rt::Tile{set.temp[st], step.dtype, cols ? 0 : esize,
                                    cols ? esize : 0});
          continue;
        }
        if (step.kind == Kind::kRandom) {
          // Element (r, c) of the tile is iteration element `first` +
          // r * cols + c: one fill when the tile spans whole rows (or is
          // one row), else one per row.
          const int64_t first = (w.batch * s.rows + w.row0) * s.cols + w.col0;
          const bool whole = w.ncols == s.cols || w.nrows == 1;
          for (int64_t r = 0; r < (whole ? 1 : w.nrows); ++r) {
            rt::RandFill f;
            f.dst = dst;
            f.dst.offset += static_cast<uint32_t>(r * dst.row_stride);
            f.rows = static_cast<uint32_t>(whole ? w.nrows : 1);
            f.cols = static_cast<uint32_t>(w.ncols);
            f.dist = step.dist;
            f.seed = step.seed;
            f.offset = step.offset + static_cast<uint64_t>(first + r * s.cols);
            f.a = step.imm;
            f.b = step.imm2;
            core.emit(f);
          }
          values.push_back(dst);
          continue;
        }
        rt::Vector v;
        v.op = step.op;
        v.dst = dst;
        v.rows = static_cast<uint32_t>(w.nrows);
        v.cols = static_cast<uint32_t>(w.ncols);
        v.src1_is_imm = step.src1_is_imm;
        v.imm = step.imm;
        v.imm2 = step.imm2;
        rt::Tile* srcs[3] = {&v.src0, &v.src1, &v.src2};
        for (int a = 0; a < 3; ++a) {
          if (step.src[a] < 0) continue;
          *srcs[a] = values.at(static_cast<size_t>(step.src[a]));
        }
        // A value with one loaded row broadcasts along the rows.
        core.emit(v);
        values.push_back(dst);
      }
      core.emit(rt::DmaStore{out.xfer});
    }
  }
  return std::move(pb).finish();
}

}  // namespace spyre::kernels
