// Eager elementwise kernels (elementwise.h) described as loop kernels
// (loop_kernel.h) and built by build_loop_kernel: one emitter for every
// pointwise program, eager or compiled.
#include "spyre/kernels/elementwise.h"

#include <algorithm>
#include <numeric>

#include "spyre/kernels/loop_kernel.h"
#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

using Cols = StickOperand::Cols;

bool has_lane_steps(const StickOperand& op) {
  return std::any_of(op.lane_steps.begin(), op.lane_steps.end(),
                     [](int64_t l) { return l != 0; });
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

// How the iteration space [batch..., rows, cols] maps onto loop vars: batch
// dims are outer vars 0.., rows the row var, cols the col var. With `chunk`
// set, each row is cut into chunks of that many columns (whole output
// sticks) so that a few long rows still spread over the cores: the rows join
// the outer vars and the chunks are the row var, `chunk` columns a step.
struct Space {
  std::vector<int64_t> shape;
  size_t batch = 0;  // batch dims
  bool has_rows = false;
  int64_t chunk = 0;  // 0: whole rows

  uint32_t dims() const { return static_cast<uint32_t>(shape.size()); }
  // the var walking the rows dim, `step` coordinates of buffer dim `dim`
  AccessVar rows_var(uint32_t dim, int64_t step) const {
    return chunk != 0 ? AccessVar{LoopRole::kOuter,
                                  static_cast<uint32_t>(batch), dim, step}
                      : AccessVar{LoopRole::kRow, 0, dim, step};
  }
  // the vars walking the cols dim along buffer dim `dim`
  void add_col_vars(std::vector<AccessVar>& vars, uint32_t dim) const {
    vars.push_back({LoopRole::kCol, 0, dim, 1});
    if (chunk != 0) vars.push_back({LoopRole::kRow, 0, dim, chunk});
  }
  // `coeff` times an iteration dim's coordinate, as index terms
  void add_terms(std::vector<IndexTerm>& terms, uint32_t d,
                 int64_t coeff) const {
    if (d + 1 == dims()) {
      terms.push_back({LoopRole::kCol, 0, coeff});
      if (chunk != 0) terms.push_back({LoopRole::kRow, 0, coeff * chunk});
    } else if (d < batch) {
      terms.push_back({LoopRole::kOuter, d, coeff});
    } else {
      const AccessVar v = rows_var(0, 0);
      terms.push_back({v.role, v.index, coeff});
    }
  }
};

// An operand as a loop buffer over its own dims: one per outer dim of the
// iteration (its byte stride), for columns across sticks one more (a stick
// per column), and the stick dim, where `first` and lane steps place it.
LoopBuffer buffer_of(std::string name, const StickOperand& op, const Space& s,
                     bool is_output, BufferAccess& access) {
  const bool across = op.cols == Cols::kAcrossSticks;
  const uint32_t outer_dims = s.dims() - 1;
  const uint32_t last = outer_dims + (across ? 1 : 0);
  LoopBuffer b;
  b.name = std::move(name);
  b.dtype = op.dtype;
  b.device_bytes = slot_extent(op, s.shape);
  b.is_output = is_output;
  b.stick_stride_bytes = op.stick_stride;
  b.offset_bytes = op.offset;
  b.dim_stride_bytes = op.strides;
  b.host_sizes.assign(s.shape.begin(), s.shape.end() - 1);
  if (across) {
    b.dim_stride_bytes.push_back(op.stick_stride);
    b.host_sizes.push_back(s.shape.back());
  }
  b.dim_stride_bytes.push_back(0);
  b.host_sizes.push_back(op.first + s.shape.back());
  access = BufferAccess{std::vector<int64_t>(last + 1, 0), {}};
  access.base[last] = op.first;
  std::vector<AccessVar>& vars = access.vars;
  for (uint32_t d = 0; d < s.batch; ++d) {
    if (op.strides[d] != 0) vars.push_back({LoopRole::kOuter, d, d, 1});
    if (d < op.lane_steps.size() && op.lane_steps[d] != 0) {
      vars.push_back({LoopRole::kOuter, d, last, op.lane_steps[d]});
    }
  }
  if (s.has_rows && op.cols == Cols::kRowsAlongSticks) {
    vars.push_back(s.rows_var(last, 1));
  } else if (s.has_rows && op.strides[outer_dims - 1] != 0) {
    vars.push_back(s.rows_var(outer_dims - 1, 1));
  }
  if (op.cols == Cols::kSticks || across) {
    s.add_col_vars(vars, across ? outer_dims : last);
  }
  return b;
}

// The loop kernel op name of a named step kind.
std::string named_op(ElementwiseStep::Kind kind) {
  using Kind = ElementwiseStep::Kind;
  switch (kind) {
    case Kind::kExpm1:
      return "expm1";
    case Kind::kLog1p:
      return "log1p";
    case Kind::kAcos:
      return "acos";
    case Kind::kErfinv:
      return "erfinv";
    case Kind::kSoftplus:
      return "softplus";
    case Kind::kCeil:
      return "ceil";
    case Kind::kTrunc:
      return "trunc";
    case Kind::kRound:
      return "round";
    case Kind::kFrac:
      return "frac";
    default:
      throw KernelBuildError("a step kind with no loop kernel op name");
  }
}

// The step's value as the next op of `lk`; `values` maps value numbers to
// op ids.
uint32_t add_step(LoopKernel& lk, const Space& s, const ElementwiseStep& step,
                  rt::DType dtype, const std::vector<uint32_t>& values) {
  using Kind = ElementwiseStep::Kind;
  LoopOp op;
  op.dtype = dtype;
  const auto value_of = [&](int src) { return values.at(src); };
  switch (step.kind) {
    case Kind::kColIndex:
    case Kind::kRowIndex:
      op.kind = LoopOpKind::kIndex;
      op.value = step.imm;
      op.scale = step.imm2;
      if (step.kind == Kind::kColIndex) {
        s.add_terms(op.terms, s.dims() - 1, 1);
      } else if (s.has_rows) {
        s.add_terms(op.terms, s.dims() - 2, 1);
      }
      break;
    case Kind::kRandom: {
      op.kind = LoopOpKind::kRandom;
      op.name = step.dist == rt::RandDist::kNormal ? "normal" : "uniform";
      op.seed = step.seed;
      op.counter = step.offset;
      op.value = step.imm;
      op.value2 = step.imm2;
      int64_t coeff = 1;  // of the flat row-major index
      for (uint32_t d = s.dims(); d-- > 0;) {
        s.add_terms(op.terms, d, coeff);
        coeff *= s.shape[d];
      }
      break;
    }
    case Kind::kExpm1:
    case Kind::kLog1p:
    case Kind::kAcos:
    case Kind::kErfinv:
    case Kind::kSoftplus:
    case Kind::kCeil:
    case Kind::kTrunc:
    case Kind::kRound:
    case Kind::kFrac:
      op.kind = LoopOpKind::kUnary;
      op.name = named_op(step.kind);
      op.args = {value_of(step.src[0])};
      op.value = step.imm;
      op.value2 = step.imm2;
      break;
    case Kind::kVector:
      switch (rt::vec_op_arity(step.op)) {
        case 0:
          if (step.op != rt::VecOp::kFill) {
            throw KernelBuildError(lk.name + ": an iota step has no form");
          }
          op.kind = LoopOpKind::kConstant;
          op.value = step.imm;
          break;
        case 1:
          op.kind = LoopOpKind::kUnary;
          op.args = {value_of(step.src[0])};
          break;
        case 2:
          op.kind = LoopOpKind::kBinary;
          op.args = {value_of(step.src[0])};
          if (step.src1_is_imm) {
            LoopOp imm;
            imm.kind = LoopOpKind::kConstant;
            imm.value = step.imm;
            lk.ops.push_back(imm);
            op.args.push_back(static_cast<uint32_t>(lk.ops.size() - 1));
          } else {
            op.args.push_back(value_of(step.src[1]));
          }
          break;
        default:
          op.kind = LoopOpKind::kSelect;
          op.args = {value_of(step.src[0]), value_of(step.src[1]),
                     value_of(step.src[2])};
          break;
      }
      if (op.kind != LoopOpKind::kConstant) op.name = vec_op_name(step.op);
      break;
  }
  lk.ops.push_back(std::move(op));
  return static_cast<uint32_t>(lk.ops.size() - 1);
}

// The kernel as a loop kernel with rows cut into chunks of `chunk` columns
// (0: whole rows).
LoopKernel describe(const ElementwiseKernel& k, int64_t chunk) {
  Space s{k.shape, k.shape.size() >= 2 ? k.shape.size() - 2 : 0,
          k.shape.size() >= 2, chunk};
  const int64_t cols = k.shape.back();
  LoopKernel lk;
  lk.name = k.name;
  lk.outer.assign(k.shape.begin(), k.shape.begin() + s.batch);
  const int64_t rows = s.has_rows ? k.shape[s.batch] : 1;
  if (chunk != 0) {
    if (s.has_rows) lk.outer.push_back(rows);
    lk.rows = ceil_div(cols, chunk);
    lk.cols = chunk;
    lk.col_tail = cols - (*lk.rows - 1) * chunk;
  } else {
    lk.rows = rows;
    lk.cols = cols;
  }
  lk.nodes.emplace_back();
  std::vector<uint32_t> values;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    LoopOp load;
    load.kind = LoopOpKind::kLoad;
    load.buffer = "in" + std::to_string(i);
    load.access.emplace();
    lk.buffers.push_back(
        buffer_of(load.buffer, k.inputs[i], s, false, *load.access));
    lk.ops.push_back(std::move(load));
    values.push_back(static_cast<uint32_t>(lk.ops.size() - 1));
  }
  for (size_t i = 0; i < k.steps.size(); ++i) {
    const ElementwiseStep& step = k.steps[i];
    const bool last = i + 1 == k.steps.size();
    if (last && (step.kind == ElementwiseStep::Kind::kColIndex ||
                 step.kind == ElementwiseStep::Kind::kRowIndex)) {
      throw KernelBuildError(k.name + ": an index cannot be the output");
    }
    // the last step rounds once, straight to the output's dtype
    values.push_back(
        add_step(lk, s, step, last ? k.output.dtype : step.dtype, values));
  }
  LoopStore store{0, values.back(), "out", BufferAccess{}};
  lk.buffers.push_back(buffer_of("out", k.output, s, true, *store.access));
  lk.buffers.back().shares_sticks = k.output_shares_sticks;
  lk.stores.push_back(std::move(store));
  return lk;
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

ElementwiseStep named_step(ElementwiseStep::Kind kind, int src, rt::DType dtype,
                           double imm, double imm2) {
  ElementwiseStep s = unary_step(rt::VecOp::kCopy, src, dtype);
  s.kind = kind;
  s.imm = imm;
  s.imm2 = imm2;
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
  key.add(output_shares_sticks);
  key.add(static_cast<uint64_t>(steps.size()));
  for (const ElementwiseStep& step : steps) step.append_key(key);
  key.add(target.cores());
}

rt::Program build_elementwise(const ElementwiseKernel& k) {
  check_kernel(k);
  const int64_t cols = k.shape.back();
  const int64_t per_stick = k.output.elements_per_stick();
  const int64_t out_sticks = ceil_div(k.output.first + cols, per_stick);
  const int64_t row_units = std::accumulate(k.shape.begin(), k.shape.end() - 1,
                                            int64_t{1}, std::multiplies<>());
  // Output sticks a chunk: whole rows, or fewer when there are too few rows
  // to keep the cores busy, or fewer still when a row does not fit the
  // scratchpad. Chunks start on output sticks, so an output starting inside
  // one keeps its rows whole.
  int64_t sticks = out_sticks;
  if (row_units < k.target.cores() && k.output.first == 0) {
    sticks = std::max<int64_t>(
        1, ceil_div(out_sticks, ceil_div(k.target.cores(), row_units)));
  }
  while (true) {
    try {
      const int64_t chunk = sticks < out_sticks ? sticks * per_stick : 0;
      return build_loop_kernel(describe(k, chunk), {k.target}).program;
    } catch (const LoopKernelTooLarge&) {
      if (sticks == 1 || k.output.first != 0) throw;
      sticks = ceil_div(sticks, 2);
    }
  }
}

}  // namespace spyre::kernels
