#include "ops/matrix_operand.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "ops/launch.h"

namespace spyre::torch_glue::ops {

std::optional<kernels::Matrix> matrix_view(
    const at::Tensor& tensor, const std::vector<int64_t>& batch_dims,
    const std::vector<int64_t>& row_dims) {
  const bool scalar = tensor.dim() == 0;
  const std::vector<int64_t> sizes =
      scalar ? std::vector<int64_t>{1} : tensor.sizes().vec();
  const std::vector<int64_t> strides =
      scalar ? std::vector<int64_t>{1} : tensor.strides().vec();
  TORCH_INTERNAL_ASSERT(
      batch_dims.size() + row_dims.size() + 1 == sizes.size(),
      "matrix_view: every dim but the last must be a batch or row dim");
  const auto operand =
      stick_operand(tensor, sizes, strides, tensor.storage_offset());
  if (!operand || operand->first != 0 || !operand->lane_steps.empty() ||
      operand->cols != kernels::StickOperand::Cols::kSticks) {
    return std::nullopt;
  }
  auto dim_of = [&](int64_t d) {
    return kernels::StridedDim{static_cast<uint64_t>(sizes[d]),
                               operand->strides[d]};
  };
  std::vector<kernels::StridedDim> rows;
  for (int64_t d : row_dims) rows.push_back(dim_of(d));
  kernels::Matrix m =
      kernels::Matrix::strided(operand->dtype, operand->offset, std::move(rows),
                               sizes.back(), operand->stick_stride);
  for (int64_t d : batch_dims) m.batch_dims.push_back(dim_of(d));
  return m;
}

std::vector<int64_t> dims_except(int64_t n, std::vector<int64_t> skip) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < n; ++d) {
    if (std::find(skip.begin(), skip.end(), d) == skip.end()) {
      dims.push_back(d);
    }
  }
  return dims;
}

std::optional<kernels::Matrix> matrix_view(const at::Tensor& tensor,
                                           int64_t batch) {
  const int64_t n = std::max<int64_t>(tensor.dim(), 1);
  std::vector<int64_t> batch_dims, row_dims;
  for (int64_t d = 0; d + 1 < n; ++d) {
    (d < batch ? batch_dims : row_dims).push_back(d);
  }
  return matrix_view(tensor, batch_dims, row_dims);
}

kernels::Matrix matrix_operand(at::Tensor& tensor, int64_t batch) {
  if (auto m = matrix_view(tensor, batch)) return *m;
  tensor = materialize(tensor);
  auto m = matrix_view(tensor, batch);
  TORCH_INTERNAL_ASSERT(m.has_value(),
                        "spyre: a materialized tensor is not addressable");
  return *m;
}

void append_key(kernels::KeyWriter& key, const kernels::Matrix& m) {
  const kernels::Matrix s = m.strided_form();
  key.add(m.dtype).add(s.offset).add(m.cols).add(s.stick_stride);
  key.add(static_cast<uint64_t>(s.row_dims.size()));
  for (const kernels::StridedDim& d : s.row_dims) key.add(d.size).add(d.stride);
  key.add(static_cast<uint64_t>(m.batch_dims.size()));
  for (const kernels::StridedDim& d : m.batch_dims) {
    key.add(d.size).add(d.stride);
  }
}

}  // namespace spyre::torch_glue::ops
