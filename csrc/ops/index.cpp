// Row gathers and scatters as device programs (kernels/gather.h): embedding
// and index_select, and the scatter behind index_copy (ops/rows.h), along
// any dim but the last (the stick dim, which rows of sticks cannot be
// gathered along: advanced indexing takes it, see index_tensor.cpp).
// Indices int32 or int64 on the device; an index out of range is a device
// error raised at launch.
#include <ATen/WrapDimUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/embedding_ops.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"
#include "ops/rows.h"
#include "spyre/kernels/gather.h"

namespace spyre::torch_glue::ops {
namespace {

// A gather moves whole rows of sticks. Rows of one element are stored
// across the sticks (the layout drops a trailing size-1 dim), so there is no
// row to move: such tables go to the CPU fallback.
bool rows_along_sticks(const at::Tensor& table) {
  return table.dim() == 0 || table.size(-1) != 1;
}

bool gatherable(const at::Tensor& table, const at::Tensor& index) {
  return has_device_dtype(table.scalar_type()) && table.element_size() > 0 &&
         (index.scalar_type() == at::kLong ||
          index.scalar_type() == at::kInt) &&
         index.is_privateuseone() && rows_along_sticks(table);
}

// out rows = table rows index[...] along `dim` (not the last), the table's
// other leading dims as batches.
void run_gather(at::Tensor table, int64_t dim, at::Tensor index,
                const at::Tensor& out) {
  if (out.numel() == 0) return;
  const int64_t n = table.dim();
  const std::vector<int64_t> batch = dims_except(n - 1, {dim});
  auto table_view = [&] { return matrix_view(table, batch, {dim}); };
  std::optional<kernels::Matrix> t = table_view();
  if (!t) {
    table = materialize(table);
    t = table_view();
  }
  // The indices are read in order, whatever their shape, so any shape may
  // be flattened. Flatten those whose last dim is 1 (ids of shape [batch,
  // 1] in a decode step): their layout drops that dim and runs the one
  // before it along the sticks, so they are no matrix of rows of sticks,
  // while their flat view is one run of sticks.
  if (index.dim() == 0 || index.size(-1) == 1) index = index.reshape({-1});
  const kernels::Matrix idx = matrix_operand(index, 0);
  // out: the table's batches around the index's dims (its rows).
  const int64_t trailing = n - 1 - dim;  // table dims after `dim`
  std::vector<int64_t> out_batch, out_rows;
  for (int64_t d = 0; d + 1 < out.dim(); ++d) {
    const bool in_index = d >= dim && d < out.dim() - trailing;
    (in_index ? out_rows : out_batch).push_back(d);
  }
  const kernels::Matrix o = *matrix_view(out, out_batch, out_rows);
  kernels::GatherShape shape{*t, idx, o};
  kernels::KeyWriter key;
  key.add("gather");
  for (const auto* m : {&shape.table, &shape.index, &shape.out}) {
    append_key(key, *m);
  }
  launch_cached(out.device().index(), ProgramKey(std::move(key)),
                [&] {
                  return kernels::build_gather(
                      shape, {{device_chip(out.device().index())}});
                },
                {table, index, out});
}

at::Tensor embedding_kernel(const at::Tensor& weight, const at::Tensor& indices,
                            c10::SymInt padding_idx, bool scale_grad_by_freq,
                            bool sparse) {
  TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D");
  if (!gatherable(weight, indices)) {
    return at::native::call_fallback_fn_symint<
        &cpu_fallback, at::_ops::embedding>::call(weight, indices, padding_idx,
                                                  scale_grad_by_freq, sparse);
  }
  std::vector<int64_t> sizes = indices.sizes().vec();
  sizes.push_back(weight.size(1));
  at::Tensor out =
      at::empty(sizes, weight.options().memory_format(std::nullopt));
  run_gather(weight, 0, indices, out);
  return out;
}

// index_select along the last dim (XLNet's relative shift) as x[..., index].
// A negative index is out of range here (advanced indexing would count it
// from the end): it becomes `size`, which the gather reports as a device
// error.
at::Tensor select_along_last_dim(const at::Tensor& self,
                                 const at::Tensor& index) {
  const int64_t size = self.size(-1);
  const at::Tensor flat = index.reshape({-1}).to(at::kLong);
  c10::List<std::optional<at::Tensor>> list;
  for (int64_t k = 0; k + 1 < self.dim(); ++k) list.push_back(std::nullopt);
  list.push_back(at::where(at::lt(flat, 0),
                           at::scalar_tensor(size, flat.options()), flat));
  return at::index(self, list);
}

at::Tensor index_select_kernel(const at::Tensor& self, int64_t dim,
                               const at::Tensor& index) {
  TORCH_CHECK_INDEX(index.dim() <= 1,
                    "index_select(): Index is supposed to be a vector");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  if (d == self.dim() - 1 && self.dim() > 0 && index.is_privateuseone() &&
      has_device_dtype(self.scalar_type()) &&
      (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt)) {
    return select_along_last_dim(self, index);
  }
  if (!gatherable(self, index) || self.dim() == 0 || d == self.dim() - 1) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::index_select>::call(self, dim,
                                                                      index);
  }
  std::vector<int64_t> sizes = self.sizes().vec();
  sizes[d] = index.numel();
  at::Tensor out = at::empty(sizes, self.options().memory_format(std::nullopt));
  if (self.size(d) == 0) {
    TORCH_CHECK_INDEX(index.numel() == 0,
                      "index_select(): index out of range for an empty dim");
    return out;
  }
  run_gather(self, d, index, out);
  return out;
}

at::Tensor& index_select_out_kernel(const at::Tensor& self, int64_t dim,
                                    const at::Tensor& index, at::Tensor& out) {
  check_out_apart(out, {self, index});
  at::Tensor r = index_select_kernel(self, dim, index);
  return write_result(r, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("embedding", embedding_kernel);
  m.impl("index_select", index_select_kernel);
  m.impl("index_select.out", index_select_out_kernel);
}

}  // namespace

bool scatter_rows(const at::Tensor& table, int64_t dim, at::Tensor index,
                  at::Tensor source) {
  const int64_t n = table.dim();
  if (!gatherable(table, index) || n == 0 || dim == n - 1 || index.dim() > 1 ||
      source.scalar_type() != table.scalar_type() ||
      !source.is_privateuseone() || source.dim() != n) {
    return false;
  }
  for (int64_t k = 0; k < n; ++k) {
    if (source.size(k) != (k == dim ? index.numel() : table.size(k))) {
      return false;
    }
  }
  const std::vector<int64_t> batch = dims_except(n - 1, {dim});
  // The table is written in place: it must be addressable as it is.
  const std::optional<kernels::Matrix> t = matrix_view(table, batch, {dim});
  if (!t) return false;
  auto source_view = [&] { return matrix_view(source, batch, {dim}); };
  std::optional<kernels::Matrix> src = source_view();
  if (!src) {
    source = materialize(source);
    src = source_view();
  }
  if (!src) return false;
  if (index.dim() == 0) index = index.reshape({1});
  const kernels::Matrix idx = matrix_operand(index, 0);
  const kernels::ScatterShape shape{*t, idx, *src};
  kernels::KeyWriter key;
  key.add("scatter");
  for (const auto* m : {&shape.table, &shape.index, &shape.source}) {
    append_key(key, *m);
  }
  launch_cached(table.device().index(), ProgramKey(std::move(key)),
                [&] {
                  return kernels::build_scatter(
                      shape, {{device_chip(table.device().index())}});
                },
                {table, index, source});
  return true;
}

}  // namespace spyre::torch_glue::ops
