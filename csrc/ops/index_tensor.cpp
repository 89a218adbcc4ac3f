// Advanced indexing with integer index tensors (x[i, j], x[:, i], the
// attention-mask lookups of Hugging Face's masking utilities) written from
// other device ops, so it needs no program kind of its own: the indices
// become one flat row index into the indexed dims (wrapped like Python's,
// range-checked), and the device's row gather (embedding's) picks the rows.
// Boolean and byte masks (x[mask]) have a data-dependent result shape, which
// needs the host to count the mask: they go to the counted CPU fallback.
// index_copy (the write of a static KV cache) is written the same way.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_index_put_impl_ops.h>
#include <ATen/ops/add.h>
#include <ATen/ops/any.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/bitwise_or.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/embedding.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/flip_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/index_copy_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/lt.h>
#include <ATen/ops/masked_select_ops.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/scatter_reduce.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "ops/elementwise_steps.h"
#include "ops/launch.h"
#include "ops/rows.h"

namespace spyre::torch_glue::ops {
namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

// The dims indexed by a tensor, with their indices on self's device as
// int64 (PyTorch accepts indices on the CPU for a device tensor).
struct IndexedDims {
  std::vector<int64_t> dims;
  std::vector<at::Tensor> indices;
};

std::optional<IndexedDims> integer_indices(const at::Tensor& self,
                                           const IndexList& list) {
  IndexedDims out;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::optional<at::Tensor> index = list[k];
    if (!index.has_value() || !index->defined()) continue;
    const at::ScalarType type = index->scalar_type();
    if (type != at::kLong && type != at::kInt) return std::nullopt;
    TORCH_CHECK_INDEX(index->is_cpu() || index->device() == self.device(),
                      "indices should be either on cpu or on the same device "
                      "as the indexed tensor (",
                      self.device(), "), got one on ", index->device());
    out.dims.push_back(static_cast<int64_t>(k));
    out.indices.push_back(index->to(self.device(), at::kLong));
  }
  if (out.dims.empty()) return std::nullopt;
  return out;
}

bool is_mask(const std::optional<at::Tensor>& index) {
  return index.has_value() && index->defined() &&
         (index->scalar_type() == at::kBool ||
          index->scalar_type() == at::kByte);
}

bool has_mask(const IndexList& list) {
  for (size_t k = 0; k < list.size(); ++k) {
    if (is_mask(list[k])) return true;
  }
  return false;
}

// Boolean and byte masks as the integer indices of their true elements
// (nonzero on the device, which reads the count back), one index tensor
// per dim the mask covers, as PyTorch expands them. nullopt for a 0-d mask
// (x[True] adds a dim; the CPU fallback takes it).
std::optional<IndexList> expand_masks(const at::Tensor& self,
                                      const IndexList& list) {
  IndexList out;
  int64_t dim = 0;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::optional<at::Tensor> index = list[k];
    if (!is_mask(index)) {
      out.push_back(index);
      ++dim;
      continue;
    }
    if (index->dim() == 0) return std::nullopt;
    for (int64_t j = 0; j < index->dim(); ++j) {
      TORCH_CHECK_INDEX(
          dim + j < self.dim() && index->size(j) == self.size(dim + j),
          "The shape of the mask ", index->sizes(), " at index ", j,
          " does not match the shape of the indexed tensor ", self.sizes(),
          " at index ", dim + j);
    }
    const at::Tensor positions = at::nonzero(index->to(self.device()));
    for (int64_t j = 0; j < index->dim(); ++j) {
      out.push_back(positions.select(1, j));
    }
    dim += index->dim();
  }
  return out;
}

bool broadcastable(at::IntArrayRef a, at::IntArrayRef b) {
  for (size_t k = 1; k <= std::min(a.size(), b.size()); ++k) {
    const int64_t x = a[a.size() - k], y = b[b.size() - k];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

// The indices' common shape, with PyTorch's error when there is none.
std::vector<int64_t> broadcast_shape(const std::vector<at::Tensor>& indices) {
  std::vector<int64_t> shape;
  for (const at::Tensor& index : indices) {
    if (!broadcastable(shape, index.sizes())) {
      std::string shapes;
      for (const at::Tensor& t : indices) {
        shapes += (shapes.empty() ? "" : ", ") + c10::str(t.sizes());
      }
      TORCH_CHECK_INDEX(false,
                        "shape mismatch: indexing tensors could not be "
                        "broadcast together with shapes ",
                        shapes);
    }
    shape = at::infer_size(shape, index.sizes());
  }
  return shape;
}

// A negative index counts from the end of a dim of `size`, as in Python;
// others are kept (out-of-range ones are the caller's to refuse). One
// elementwise launch (a KV-cache write per layer and token pays it).
at::Tensor counted_from_the_end(const at::Tensor& index, int64_t size) {
  Operands ops;
  ops.common = index.scalar_type();
  const rt::DType dtype = compute_dtype(ops.common);
  const Operands::Value x = ops.add(index);
  const int negative =
      ops.binary(rt::VecOp::kLt, x, {-1, 0.0}, rt::DType::kBool);
  const int shifted =
      ops.binary(rt::VecOp::kAdd, x, {-1, static_cast<double>(size)}, dtype);
  ops.push(kernels::select_step(negative, shifted, x.id, dtype));
  at::Tensor wrapped = at::empty_like(index);
  run_steps("index_from_the_end", ops, wrapped);
  return wrapped;
}

// One row index into the indexed dims flattened in order (row-major), in
// the indices' common shape. A negative index counts from the end, as in
// Python; an index outside its dim makes the row index point past the last
// row, which the gather reports as a device error.
at::Tensor flat_row_index(const at::Tensor& self, const IndexedDims& indexed,
                          int64_t rows) {
  at::Tensor flat, outside;
  for (size_t k = 0; k < indexed.dims.size(); ++k) {
    const int64_t size = self.size(indexed.dims[k]);
    const at::Tensor& index = indexed.indices[k];
    const at::Tensor wrapped = counted_from_the_end(index, size);
    const at::Tensor beyond =
        at::bitwise_or(at::lt(index, -size), at::ge(index, size));
    flat = flat.defined() ? at::add(at::mul(flat, size), wrapped) : wrapped;
    outside = outside.defined() ? at::bitwise_or(outside, beyond) : beyond;
  }
  return at::where(outside, at::scalar_tensor(rows, flat.options()), flat);
}

// The row gather moves whole rows through the scratchpad, double-buffered:
// rows wider than this are gathered as several narrower rows of whole
// sticks (mixture-of-experts weights [E, 2I, H] picked per token: rows of
// 2I * H elements, which did not fit).
constexpr int64_t kMaxGatherRow = 4096;

// How many pieces of whole sticks, each at most kMaxGatherRow elements,
// a row of `cols` splits into; 1 when it need not or cannot be split.
int64_t row_pieces(int64_t cols, at::ScalarType dtype) {
  if (cols <= kMaxGatherRow) return 1;
  const int64_t stick =
      static_cast<int64_t>(rt::elements_per_stick(device_dtype(dtype)));
  for (int64_t piece = kMaxGatherRow / stick * stick; piece >= stick;
       piece -= stick) {
    if (cols % piece == 0) return cols / piece;
  }
  return 1;
}

// table[row_index] for a [rows, cols] table: the device's row gather
// (embedding's), wide rows in pieces. An index past the last row stays
// past it (a device error).
at::Tensor gather_rows(const at::Tensor& table, const at::Tensor& row_index) {
  const int64_t rows = table.size(0), cols = table.size(1);
  const int64_t pieces = row_pieces(cols, table.scalar_type());
  if (pieces == 1) return at::embedding(table, row_index);
  const at::Tensor piece_index =
      at::add(at::mul(row_index.unsqueeze(-1), pieces),
              at::arange(pieces, row_index.options()));
  std::vector<int64_t> sizes = row_index.sizes().vec();
  sizes.push_back(cols);
  return at::embedding(table.reshape({rows * pieces, cols / pieces}),
                       piece_index)
      .reshape(sizes);
}

bool dims_adjacent(const std::vector<int64_t>& dims) {
  return dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
}

// How x[indices] lays out: self's dims with the indexed ones first (order),
// rows = the indexed dims flattened, cols = the others flattened in order;
// the result holds the indices' common shape in place of the indexed dims
// when those are adjacent, else in front (PyTorch's rule), after `before`
// kept dims.
struct IndexLayout {
  std::vector<int64_t> order, kept_sizes, shape, result_sizes;
  int64_t rows = 1, cols = 1, count = 1, before = 0;
};

IndexLayout index_layout(const at::Tensor& self, const IndexedDims& indexed) {
  IndexLayout out;
  out.shape = broadcast_shape(indexed.indices);
  out.order = indexed.dims;
  for (int64_t d : indexed.dims) out.rows *= self.size(d);
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (std::find(out.order.begin(), out.order.end(), d) != out.order.end()) {
      continue;
    }
    out.order.push_back(d);
    out.kept_sizes.push_back(self.size(d));
    out.cols *= self.size(d);
  }
  out.before = dims_adjacent(indexed.dims) ? indexed.dims.front() : 0;
  const auto& kept = out.kept_sizes;
  out.result_sizes.assign(kept.begin(), kept.begin() + out.before);
  out.result_sizes.insert(out.result_sizes.end(), out.shape.begin(),
                          out.shape.end());
  out.result_sizes.insert(out.result_sizes.end(), kept.begin() + out.before,
                          kept.end());
  out.count = c10::multiply_integers(out.shape);
  return out;
}

at::Tensor index_kernel(const at::Tensor& self, const IndexList& list) {
  if (has_mask(list) && self.is_privateuseone() &&
      has_device_dtype(self.scalar_type())) {
    if (std::optional<IndexList> expanded = expand_masks(self, list)) {
      return index_kernel(self, *expanded);
    }
  }
  TORCH_CHECK_INDEX(static_cast<int64_t>(list.size()) <= self.dim(),
                    "too many indices for tensor of dimension ", self.dim(),
                    " (got ", list.size(), ")");
  std::optional<IndexedDims> indexed = integer_indices(self, list);
  if (!indexed || !has_device_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::index_Tensor>::call(self,
                                                                      list);
  }
  const IndexLayout layout = index_layout(self, *indexed);
  const auto& [order, kept_sizes, shape, result_sizes, rows, cols, count,
               before] = layout;
  if (count == 0 || cols == 0) return at::empty(result_sizes, self.options());

  at::Tensor table = self.permute(order);
  // The gather moves rows of sticks. A row of one element is no row of the
  // layout (it drops a trailing size-1 dim), so such a table is widened to
  // rows of two equal elements, and column 0 of what is picked is read back
  // by a re-layout, straight into the indices' shape.
  const bool widened = cols == 1;
  if (widened) {
    std::vector<int64_t> wide = table.sizes().vec();
    wide.push_back(2);
    at::Tensor rows_of_two = at::empty({rows, 2}, self.options());
    rows_of_two.view(wide).copy_(table.unsqueeze(-1).expand(wide));
    table = rows_of_two;
  } else {
    table = table.reshape({rows, cols});
  }
  // The row gather takes the row index in its own shape (as embedding
  // does): flattening it would cut its rows of sticks apart.
  at::Tensor row_index = flat_row_index(self, *indexed, rows);
  if (row_index.dim() == 0) row_index = row_index.reshape({1});
  at::Tensor picked = gather_rows(table, row_index);
  if (widened) picked = picked.transpose(-1, -2).contiguous().select(-2, 0);
  // picked is [indices' shape, kept dims]; move the indices' dims after
  // the kept dims that come before them.
  std::vector<int64_t> picked_sizes = shape;
  picked_sizes.insert(picked_sizes.end(), kept_sizes.begin(), kept_sizes.end());
  picked = picked.reshape(picked_sizes);
  if (before == 0) return picked.contiguous();
  const int64_t n = static_cast<int64_t>(shape.size());
  std::vector<int64_t> placement;
  for (int64_t d = 0; d < before; ++d) placement.push_back(n + d);
  for (int64_t d = 0; d < n; ++d) placement.push_back(d);
  for (int64_t d = n + before; d < static_cast<int64_t>(picked_sizes.size());
       ++d) {
    placement.push_back(d);
  }
  return picked.permute(placement).contiguous();
}

at::Tensor& index_out_kernel(const at::Tensor& self, const IndexList& list,
                             at::Tensor& out) {
  check_out_apart(out, {self});
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "index_out: self (",
              self.scalar_type(), ") and result (", out.scalar_type(),
              ") must have the same scalar type");
  const at::Tensor result = index_kernel(self, list);
  return write_result(result, out);
}

// masked_select: self's elements where the mask is true (both broadcast
// together), in row-major order: advanced indexing by the mask.
at::Tensor masked_select_kernel(const at::Tensor& self,
                                const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_select: expected BoolTensor for mask");
  if (!self.is_privateuseone() || !has_device_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback,
                                        at::_ops::masked_select>::call(self,
                                                                       mask);
  }
  std::vector<int64_t> shape = at::infer_size(self.sizes(), mask.sizes());
  if (shape.empty()) shape.push_back(1);  // 0-d: one element
  IndexList list;
  list.push_back(mask.to(self.device()).expand(shape));
  return index_kernel(self.expand(shape), list).reshape({-1});
}

at::Tensor& masked_select_out_kernel(const at::Tensor& self,
                                     const at::Tensor& mask, at::Tensor& out) {
  check_out_apart(out, {self, mask});
  TORCH_CHECK(out.scalar_type() == self.scalar_type(),
              "masked_select(): self and result must have the same scalar "
              "type");
  return write_result(masked_select_kernel(self, mask), out);
}

// index_copy (a static KV cache's update at cache_position): every place i
// along `dim` takes source's slice k where index[k] == i, else keeps self's.
// Along any dim but the last, one scatter program moves the n slices
// (ops/rows.h). Along the last (stick) dim: a comparison of the places with
// the indices, a row gather of source and a select, reading and writing all
// of self. An index outside the dim is a device error either way, never a
// silently dropped slice.
bool index_copyable(const at::Tensor& self, const at::Tensor& index,
                    const at::Tensor& source) {
  return has_device_dtype(self.scalar_type()) &&
         source.scalar_type() == self.scalar_type() &&
         index.scalar_type() == at::kLong && index.dim() <= 1 &&
         source.is_privateuseone() && index.is_privateuseone() &&
         self.dim() > 0;
}

// source's slices `pick` along d: the row gather of index_select, or, along
// the last dim (which index_select leaves to the CPU), advanced indexing.
at::Tensor slices_along(const at::Tensor& source, int64_t d,
                        const at::Tensor& pick) {
  if (d != source.dim() - 1) return at::index_select(source, d, pick);
  IndexList list;
  for (int64_t k = 0; k < d; ++k) list.push_back(std::nullopt);
  list.push_back(pick);
  return index_kernel(source, list);
}

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim,
                           const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  if (!index_copyable(self, index, source)) {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::index_copy_out>::call(self, dim, index, source,
                                                       out);
  }
  const int64_t n = index.numel();
  check_out_apart(out, {index, source});
  if (!out.is_same(self)) at::assert_no_partial_overlap(out, self);
  TORCH_CHECK_INDEX(source.dim() == self.dim() && source.size(d) == n,
                    "index_copy_(): source must have ", n, " slices along dim ",
                    d, " (one per index), got shape ", source.sizes());
  at::native::resize_output(out, self.sizes());
  if (!out.is_same(self)) out.copy_(self);
  if (n == 0 || self.numel() == 0) return out;
  // Along any dim but the stick dim: one scatter of the n slices.
  if (scatter_rows(out, d, index, source)) return out;
  const int64_t places = self.size(d);
  const at::Tensor flat = index.reshape({1, n});
  const at::Tensor hits =
      at::eq(at::arange(places, index.options()).unsqueeze(1), flat);
  const at::Tensor has = at::any(hits, 1);
  const at::Tensor beyond =
      at::any(at::bitwise_or(at::lt(flat, 0), at::ge(flat, places)), 1);
  // Row k of source for each place, plus a last row that is out of range
  // (n) when any index is: the gather then raises instead of dropping it.
  const at::Tensor guard =
      at::where(beyond, at::scalar_tensor(n, flat.options()),
                at::scalar_tensor(0, flat.options()));
  const at::Tensor pick =
      at::cat({at::argmax(hits.to(at::kLong), 1), guard}, 0);
  const at::Tensor rows = slices_along(source, d, pick).narrow(d, 0, places);
  std::vector<int64_t> mask_shape(self.dim(), 1);
  mask_shape[d] = places;
  out.copy_(at::where(has.view(mask_shape), rows, out));
  return out;
}

at::Tensor index_copy(const at::Tensor& self, int64_t dim,
                      const at::Tensor& index, const at::Tensor& source) {
  at::Tensor out = at::empty_like(self);
  return index_copy_out(self, dim, index, source, out);
}

at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                        const at::Tensor& source) {
  return index_copy_out(self, dim, index, source, self);
}

// gather(self, dim, index) is self indexed by `index` along dim and by the
// positions of every other dim (BERT's token type ids, a gather along the
// stick dim). A negative index is out of range here, as in PyTorch's gather
// (advanced indexing would count it from the end): it becomes `size`, which
// the row gather reports as a device error.
at::Tensor gather_kernel(const at::Tensor& self, int64_t dim,
                         const at::Tensor& index, bool sparse_grad) {
  const int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const bool shaped = index.dim() == self.dim() && self.dim() > 0;
  if (!shaped || index.scalar_type() != at::kLong ||
      !index.is_privateuseone() || !has_device_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::gather>::call(
        self, dim, index, sparse_grad);
  }
  for (int64_t k = 0; k < self.dim(); ++k) {
    TORCH_CHECK(k == d || index.size(k) <= self.size(k),
                "Size does not match at dimension ", k, " expected index ",
                index.sizes(), " to be no larger than self ", self.sizes(),
                " apart from dimension ", d);
  }
  if (index.numel() == 0) return at::empty(index.sizes(), self.options());
  IndexList list;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (k == d) {
      list.push_back(at::where(at::lt(index, 0),
                               at::scalar_tensor(self.size(d), index.options()),
                               index));
      continue;
    }
    std::vector<int64_t> shape(self.dim(), 1);
    shape[k] = index.size(k);
    list.push_back(at::arange(index.size(k), index.options()).view(shape));
  }
  return index_kernel(self, list);
}

at::Tensor& gather_out_kernel(const at::Tensor& self, int64_t dim,
                              const at::Tensor& index, bool sparse_grad,
                              at::Tensor& out) {
  check_out_apart(out, {self, index});
  const at::Tensor result = gather_kernel(self, dim, index, sparse_grad);
  return write_result(result, out);
}

// flip (Longformer-style sliding-window attention reverses its chunks):
// each flipped dim indexed by its positions in reverse.
at::Tensor flip_kernel(const at::Tensor& self, at::IntArrayRef dims) {
  if (!has_device_dtype(self.scalar_type())) {
    return at::native::call_fallback_fn<&cpu_fallback, at::_ops::flip>::call(
        self, dims);
  }
  const auto flipped =
      at::dim_list_to_bitset(dims, std::max<int64_t>(self.dim(), 1));
  at::Tensor result = self;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!flipped[d] || self.size(d) < 2 || self.numel() == 0) continue;
    IndexList list;
    for (int64_t k = 0; k < d; ++k) list.push_back(std::nullopt);
    list.push_back(
        at::arange(self.size(d) - 1, -1, -1, self.options().dtype(at::kLong)));
    result = index_kernel(result, list);
  }
  return result.is_same(self) ? self.clone() : result;
}

at::Tensor& flip_out_kernel(const at::Tensor& self, at::IntArrayRef dims,
                            at::Tensor& out) {
  check_out_apart(out, {self});
  return write_result(flip_kernel(self, dims), out);
}

// values arranged as the rows that x[indices] = values writes: broadcast to
// the indexing result (PyTorch's error when they cannot be), the indices'
// dims first, as [count, cols].
at::Tensor values_as_rows(const at::Tensor& values, const at::Tensor& self,
                          const IndexLayout& layout) {
  TORCH_CHECK(
      broadcastable(layout.result_sizes, values.sizes()) &&
          values.dim() <= static_cast<int64_t>(layout.result_sizes.size()),
      "shape mismatch: value tensor of shape ", values.sizes(),
      " cannot be broadcast to indexing result of shape ",
      c10::IntArrayRef(layout.result_sizes));
  at::Tensor rows = values.to(self.scalar_type()).expand(layout.result_sizes);
  const int64_t n = static_cast<int64_t>(layout.shape.size());
  if (layout.before > 0) {
    std::vector<int64_t> indices_first;
    for (int64_t d = 0; d < n; ++d) indices_first.push_back(layout.before + d);
    for (int64_t d = 0; d < rows.dim(); ++d) {
      if (d < layout.before || d >= layout.before + n) {
        indices_first.push_back(d);
      }
    }
    rows = rows.permute(indices_first);
  }
  return rows.reshape({layout.count, layout.cols});
}

// The flat row index of every index (flat_row_index), refusing one outside
// its dim with PyTorch's IndexError (a single read-back of the check).
at::Tensor checked_row_index(const at::Tensor& self, const IndexedDims& indexed,
                             int64_t rows) {
  const at::Tensor flat = flat_row_index(self, indexed, rows).reshape({-1});
  TORCH_CHECK_INDEX(!at::any(at::ge(flat, rows)).item<bool>(),
                    "index out of bounds: an index is outside its dimension "
                    "of the indexed tensor of shape ",
                    self.sizes());
  return flat;
}

// x[i0, i1, ...] = values, or += with accumulate (duplicate indices then
// summed), for integer indices on any dims. self seen as [rows, cols]
// (index_layout): whole rows of cols > 1 elements are index_copy'd or
// index_add'ed along dim 0; single elements (cols == 1) scattered along one
// flat dim, with where() writing the places hit (a duplicated index then
// takes the largest of its values: PyTorch leaves which one undefined).
at::Tensor& put_indexed(at::Tensor& self, const IndexedDims& indexed,
                        const at::Tensor& values, bool accumulate) {
  const IndexLayout layout = index_layout(self, indexed);
  const at::Tensor rows = values_as_rows(values, self, layout);
  if (layout.count == 0 || layout.cols == 0) return self;
  const at::Tensor flat = checked_row_index(self, indexed, layout.rows);
  at::Tensor permuted = self.permute(layout.order);
  const bool elements = layout.cols == 1;
  const std::vector<int64_t> table_sizes =
      elements ? std::vector<int64_t>{layout.rows}
               : std::vector<int64_t>{layout.rows, layout.cols};
  const at::Tensor source = elements ? rows.reshape({layout.count}) : rows;
  if (accumulate) {
    at::Tensor sum = at::zeros(table_sizes, self.options());
    sum.index_add_(0, flat, source);
    permuted.add_(sum.view(permuted.sizes()));
    return self;
  }
  if (!elements) {
    at::Tensor table = permuted.reshape(table_sizes);
    table.index_copy_(0, flat, source.contiguous());
    if (!table.is_alias_of(self)) permuted.copy_(table.view(permuted.sizes()));
    return self;
  }
  const at::Tensor hit = at::gt(
      at::zeros(table_sizes, self.options().dtype(at::kFloat))
          .index_add_(
              0, flat,
              at::ones({layout.count}, self.options().dtype(at::kFloat))),
      0);
  const at::Tensor put =
      at::zeros(table_sizes, self.options())
          .scatter_reduce_(0, flat, source, "amax", /*include_self=*/false);
  permuted.copy_(at::where(hit, put, permuted.reshape(table_sizes))
                     .view(permuted.sizes()));
  return self;
}

// x[..., idx, ...] = values with one int64 index tensor (what index_copy_
// becomes under torch.compile), written in place as index_copy; x[mask] =
// value with a mask of x's shape, as a select; other integer indices (several
// index tensors, int32, accumulate=True) by put_indexed.
at::Tensor& index_put_impl_(at::Tensor& self, const IndexList& list,
                            const at::Tensor& values, bool accumulate,
                            bool unsafe) {
  std::vector<int64_t> dims;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::optional<at::Tensor> index = list[k];
    if (index.has_value() && index->defined()) {
      dims.push_back(static_cast<int64_t>(k));
    }
  }
  auto fallback = [&]() -> at::Tensor& {
    return at::native::call_fallback_fn<
        &cpu_fallback, at::_ops::_index_put_impl_>::call(self, list, values,
                                                         accumulate, unsafe);
  };
  if (dims.empty() || !values.is_privateuseone() ||
      !has_device_dtype(self.scalar_type())) {
    return fallback();
  }
  const int64_t d = dims[0];
  const at::Tensor index = list[d]->to(self.device());
  if (dims.size() == 1 && index.scalar_type() == at::kBool &&
      index.sizes() == self.sizes() && values.numel() == 1 &&
      has_device_dtype(self.scalar_type())) {
    self.copy_(
        at::where(index, values.reshape({}).to(self.scalar_type()), self));
    return self;
  }
  if (has_mask(list) && has_device_dtype(self.scalar_type())) {
    // x[mask] = values (xmod's language adapters): the mask's positions.
    std::optional<IndexList> expanded = expand_masks(self, list);
    if (!expanded) return fallback();
    return index_put_impl_(self, *expanded, values, accumulate, unsafe);
  }
  if (accumulate || dims.size() != 1 || index.scalar_type() != at::kLong ||
      index.dim() != 1) {
    std::optional<IndexedDims> indexed = integer_indices(self, list);
    if (!indexed) return fallback();
    return put_indexed(self, *indexed, values, accumulate);
  }
  // Negative indices count from the end, as in Python (index_copy would
  // refuse them).
  const at::Tensor wrapped = counted_from_the_end(index, self.size(d));
  std::vector<int64_t> slices = self.sizes().vec();
  slices[d] = index.numel();
  const at::Tensor source = values.to(self.scalar_type()).expand(slices);
  if (!index_copyable(self, wrapped, source)) return fallback();
  return index_copy_out(self, d, wrapped, source.contiguous(), self);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_index_put_impl_", index_put_impl_);
  m.impl("flip", flip_kernel);
  m.impl("flip.out", flip_out_kernel);
  m.impl("gather", gather_kernel);
  m.impl("gather.out", gather_out_kernel);
  m.impl("index.Tensor", index_kernel);
  m.impl("index.Tensor_out", index_out_kernel);
  m.impl("masked_select", masked_select_kernel);
  m.impl("masked_select.out", masked_select_out_kernel);
  m.impl("index_copy", index_copy);
  m.impl("index_copy.out", index_copy_out);
  m.impl("index_copy_", index_copy_);
}

}  // namespace
}  // namespace spyre::torch_glue::ops
