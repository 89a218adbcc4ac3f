#include "spyre/kernels/row_kernel.h"

#include <optional>
#include <utility>

#include "spyre/kernels/program_builder.h"
#include "spyre/runtime/error.h"

namespace spyre::kernels {
namespace {

// A matrix's row index space, outermost first: its batch dims, then its row
// dims (the byte stride of one step of each).
std::vector<StridedDim> row_space(const Matrix& m) {
  std::vector<StridedDim> dims = m.batch_dims;
  const Matrix s = m.strided_form();
  dims.insert(dims.end(), s.row_dims.begin(), s.row_dims.end());
  return dims;
}

// The byte strides that walk `dims` as the sizes `sizes` would (the same
// flat index space seen with other sizes, as a reshape does); nullopt when a
// size spans dims that do not lie one after the other.
std::optional<std::vector<int64_t>> reshape_strides(
    const std::vector<StridedDim>& dims, const std::vector<int64_t>& sizes) {
  std::vector<StridedDim> merged;  // innermost first
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (it->size == 1) continue;
    if (!merged.empty() &&
        it->stride ==
            merged.back().stride * static_cast<int64_t>(merged.back().size)) {
      merged.back().size *= it->size;
    } else {
      merged.push_back(*it);
    }
  }
  std::vector<int64_t> strides(sizes.size(), 0);
  size_t d = 0;
  uint64_t used = 1;  // of merged[d], in steps
  for (size_t i = sizes.size(); i-- > 0;) {
    const auto n = static_cast<uint64_t>(sizes[i]);
    if (n == 1) continue;
    if (d < merged.size() && used == merged[d].size) {
      ++d;
      used = 1;
    }
    if (d == merged.size() || merged[d].size % (used * n) != 0) {
      return std::nullopt;
    }
    strides[i] = merged[d].stride * static_cast<int64_t>(used);
    used *= n;
  }
  if (d + 1 < merged.size() || (d < merged.size() && used != merged[d].size)) {
    return std::nullopt;
  }
  return strides;
}

uint64_t product(const std::vector<int64_t>& sizes) {
  uint64_t n = 1;
  for (int64_t s : sizes) n *= static_cast<uint64_t>(s);
  return n;
}

}  // namespace

RowKernelWriter::RowKernelWriter(std::string name, const Matrix& space) {
  k_.name = std::move(name);
  for (const StridedDim& d : row_space(space)) {
    if (d.size != 1) row_sizes_.push_back(static_cast<int64_t>(d.size));
  }
  if (row_sizes_.empty()) row_sizes_.push_back(1);
  k_.outer.assign(row_sizes_.begin(), row_sizes_.end() - 1);
  k_.rows = row_sizes_.back();
  k_.cols = static_cast<int64_t>(space.cols);
  k_.nodes.emplace_back();
}

void RowKernelWriter::add_buffer(const std::string& name, const Matrix& m,
                                 bool is_output,
                                 std::vector<int64_t> host_sizes,
                                 std::vector<int64_t> dim_strides,
                                 BufferAccess access) {
  const Matrix s = m.strided_form();
  LoopBuffer b;
  b.name = name;
  b.dtype = m.dtype;
  b.device_bytes = m.bytes();
  b.is_output = is_output;
  b.host_sizes = std::move(host_sizes);
  b.dim_stride_bytes = std::move(dim_strides);
  b.stick_stride_bytes = s.stick_stride;
  // the view's first element: its stick, and its place in that stick
  b.offset_bytes = s.offset - s.offset % rt::kStickBytes;
  access.base.back() += static_cast<int64_t>((s.offset % rt::kStickBytes) /
                                             rt::element_size(m.dtype));
  k_.buffers.push_back(std::move(b));
  accesses_.emplace_back(name, std::move(access));
}

void RowKernelWriter::rows_operand(const std::string& name, const Matrix& m,
                                   bool is_output) {
  const auto strides = reshape_strides(row_space(m), row_sizes_);
  // one column: a value per row, the same for every column
  const bool per_row = m.cols == 1 && *k_.cols != 1;
  if (m.rows != product(row_sizes_) || !strides ||
      (!per_row && m.cols != static_cast<uint64_t>(*k_.cols))) {
    throw KernelBuildError(rt::str(k_.name, ": ", name, " (", m.rows, " x ",
                                   m.cols, ") does not cover the ",
                                   product(row_sizes_), " x ", *k_.cols,
                                   " rows of the kernel"));
  }
  const auto rank = static_cast<uint32_t>(row_sizes_.size() + 1);
  BufferAccess access{std::vector<int64_t>(rank, 0), {}};
  for (uint32_t d = 0; d + 2 < rank; ++d) {
    access.vars.push_back({LoopRole::kOuter, d, d, 1});
  }
  access.vars.push_back({LoopRole::kRow, 0, rank - 2, 1});
  if (!per_row) access.vars.push_back({LoopRole::kCol, 0, rank - 1, 1});
  std::vector<int64_t> sizes = row_sizes_;
  sizes.push_back(static_cast<int64_t>(m.cols));
  std::vector<int64_t> dim_strides = *strides;
  dim_strides.push_back(0);
  add_buffer(name, m, is_output, std::move(sizes), std::move(dim_strides),
             std::move(access));
}

void RowKernelWriter::col_vector(const std::string& name, const Matrix& m) {
  if (m.rows != 1 || m.cols != static_cast<uint64_t>(*k_.cols)) {
    throw KernelBuildError(rt::str(k_.name, ": ", name, " must be 1 x ",
                                   *k_.cols, ", got ", m.rows, " x ", m.cols));
  }
  add_buffer(name, m, false, {*k_.cols}, {0},
             {{0}, {{LoopRole::kCol, 0, 0, 1}}});
}

void RowKernelWriter::row_stats(const std::string& name, const Matrix& m,
                                bool is_output) {
  const int64_t inner = row_sizes_.back();
  const std::vector<int64_t> outer(row_sizes_.begin(), row_sizes_.end() - 1);
  const auto strides = reshape_strides(row_space(m), outer);
  if (m.cols != static_cast<uint64_t>(inner) || m.rows != product(outer) ||
      !strides) {
    throw KernelBuildError(rt::str(k_.name, ": ", name, " (", m.rows, " x ",
                                   m.cols,
                                   ") is not one value per row laid "
                                   "out as a reduction's result"));
  }
  const auto rank = static_cast<uint32_t>(row_sizes_.size());
  BufferAccess access{std::vector<int64_t>(rank, 0), {}};
  for (uint32_t d = 0; d + 1 < rank; ++d) {
    access.vars.push_back({LoopRole::kOuter, d, d, 1});
  }
  access.vars.push_back({LoopRole::kRow, 0, rank - 1, 1});
  std::vector<int64_t> sizes = outer;
  sizes.push_back(inner);
  std::vector<int64_t> dim_strides = *strides;
  dim_strides.push_back(0);
  add_buffer(name, m, is_output, std::move(sizes), std::move(dim_strides),
             std::move(access));
}

void RowKernelWriter::next_node() { k_.nodes.emplace_back(); }

uint32_t RowKernelWriter::add(LoopOpKind kind, std::vector<uint32_t> args,
                              std::string name) {
  LoopOp op;
  op.kind = kind;
  op.node = static_cast<uint32_t>(k_.nodes.size() - 1);
  op.args = std::move(args);
  op.name = std::move(name);
  k_.ops.push_back(std::move(op));
  return static_cast<uint32_t>(k_.ops.size() - 1);
}

uint32_t RowKernelWriter::load(const std::string& buffer) {
  const uint32_t id = add(LoopOpKind::kLoad, {});
  k_.ops[id].buffer = buffer;
  for (const auto& [name, access] : accesses_) {
    if (name == buffer) k_.ops[id].access = access;
  }
  if (!k_.ops[id].access) return id;  // an earlier node's fp32 value
  const uint32_t to_float = add(LoopOpKind::kToDtype, {id});
  k_.ops[to_float].to_float = true;
  return to_float;
}

uint32_t RowKernelWriter::constant(double value) {
  const uint32_t id = add(LoopOpKind::kConstant, {});
  k_.ops[id].value = value;
  return id;
}

uint32_t RowKernelWriter::unary(const std::string& name, uint32_t x) {
  return add(LoopOpKind::kUnary, {x}, name);
}

uint32_t RowKernelWriter::binary(const std::string& name, uint32_t a,
                                 uint32_t b) {
  return add(LoopOpKind::kBinary, {a, b}, name);
}

uint32_t RowKernelWriter::compare(const std::string& name, uint32_t a,
                                  uint32_t b) {
  const uint32_t id = add(LoopOpKind::kBinary, {a, b}, name);
  k_.ops[id].dtype = rt::DType::kBool;
  return id;
}

uint32_t RowKernelWriter::select(uint32_t cond, uint32_t a, uint32_t b) {
  return add(LoopOpKind::kSelect, {cond, a, b});
}

uint32_t RowKernelWriter::reduction(const std::string& name, uint32_t x,
                                    uint32_t part) {
  const uint32_t id = add(LoopOpKind::kReduction, {x}, name);
  k_.ops[id].part = part;
  return id;
}

uint32_t RowKernelWriter::round_to(uint32_t x, rt::DType dtype) {
  const uint32_t id = add(LoopOpKind::kToDtype, {x});
  k_.ops[id].dtype = dtype;
  return id;
}

void RowKernelWriter::store(const std::string& buffer, uint32_t value) {
  LoopStore st{static_cast<uint32_t>(k_.nodes.size() - 1), value, buffer, {}};
  for (size_t i = 0; i < accesses_.size(); ++i) {
    if (accesses_[i].first != buffer) continue;
    if (k_.buffers[i].dtype != rt::DType::kFloat32) {
      st.value = round_to(value, k_.buffers[i].dtype);
    }
    st.access = accesses_[i].second;
  }
  k_.stores.push_back(std::move(st));
}

LoopKernel RowKernelWriter::finish() && {
  validate_loop_kernel(k_);
  return std::move(k_);
}

}  // namespace spyre::kernels
