#include "ops/operands.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

#include "device_layout.h"
#include "ops/launch.h"
#include "ops/op_stats.h"
#include "ops/restickify.h"
#include "storage_ops.h"

namespace spyre::torch_glue::ops {

std::optional<std::vector<int64_t>> finer_sizes(const at::Tensor& tensor,
                                                std::vector<int64_t>* strides) {
  const std::vector<int64_t>& host = tensor_layout(tensor).host_sizes;
  if (host.size() < 2)
    return std::nullopt;  // one host dim: nothing to carry into
  std::vector<int64_t> host_strides(host.size(), 1);
  for (size_t k = host.size(); k-- > 1;) {
    host_strides[k - 1] = host_strides[k] * host[k];
  }
  std::vector<int64_t> sizes;
  strides->clear();
  bool split = false;
  for (int64_t d = 0; d < tensor.dim(); ++d) {
    int64_t n = tensor.size(d), s = tensor.stride(d);
    std::vector<std::pair<int64_t, int64_t>> digits;  // innermost first
    while (n > 1 && s > 0) {
      // the outermost host dim whose stride divides s: the dim s walks
      size_t k = 0;
      while (k + 1 < host.size() && s % host_strides[k] != 0) ++k;
      const int64_t step = s / host_strides[k];
      const int64_t fits = host[k] % step == 0 ? host[k] / step : 0;
      if (k == 0 || fits < 2 || n <= fits || n % fits != 0) break;
      digits.emplace_back(fits, s);
      n /= fits;
      s *= fits;
      split = true;
    }
    digits.emplace_back(n, s);
    for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
      sizes.push_back(it->first);
      strides->push_back(it->second);
    }
  }
  if (!split) return std::nullopt;
  return sizes;
}

namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t j = sizes.size(); j-- > 1;) {
    strides[j - 1] = strides[j] * sizes[j];
  }
  return strides;
}

// Per host dim: the device byte stride of a step, for layouts where every
// non-stick host dim is walked by exactly one device dim with step 1 and the
// stick host dim by the stick plus at most one dim stepping whole sticks.
// Returns false for other layouts. `stick_stride` gets the bytes between
// consecutive sticks of a row.
bool host_dim_coefficients(const DeviceLayout& layout,
                           std::vector<int64_t>& coeff, int64_t& stick_dim,
                           int64_t& stick_stride) {
  const size_t m = layout.device_size.size();
  const int64_t per_stick = layout.elements_per_stick();
  std::vector<int64_t> device_strides(m, 0);  // bytes, for k < m - 1
  int64_t bytes = rt::kStickBytes;
  for (size_t k = m - 1; k-- > 0;) {
    device_strides[k] = bytes;
    bytes *= layout.device_size[k];
  }
  stick_dim = layout.dim_map[m - 1];
  stick_stride = rt::kStickBytes;
  coeff.assign(layout.host_sizes.size(), -1);
  std::vector<int> walkers(layout.host_sizes.size(), 0);
  for (size_t k = 0; k + 1 < m; ++k) {
    const int64_t j = layout.dim_map[k];
    if (j < 0) continue;  // synthetic, size 1
    ++walkers[j];
    if (j == stick_dim) {
      if (layout.dim_step[k] != per_stick) return false;
      stick_stride = device_strides[k];
    } else {
      if (layout.dim_step[k] != 1) return false;
      coeff[j] = device_strides[k];
    }
  }
  for (size_t j = 0; j < walkers.size(); ++j) {
    if (walkers[j] > 1) return false;
    if (static_cast<int64_t>(j) == stick_dim) {
      if (walkers[j] == 0 && layout.host_sizes[j] > per_stick) return false;
    } else if (walkers[j] == 0 && layout.host_sizes[j] > 1) {
      return false;
    } else if (walkers[j] == 0) {
      coeff[j] = 0;
    }
  }
  return true;
}

// The stick dim merged with the host dims before it while their sticks
// are evenly spaced across the boundary (the dim after fills whole sticks, and
// one step of the dim before moves past all of them): a [batch, seq, heads,
// head_dim] storage read as [batch, seq, heads * head_dim] is then one run of
// sticks per row.
void merge_whole_stick_dims(std::vector<int64_t>& host,
                            std::vector<int64_t>& coeff, int64_t& stick_dim,
                            int64_t& stick_stride, int64_t per_stick) {
  while (host.size() > 1 &&
         stick_dim == static_cast<int64_t>(host.size()) - 1 &&
         host.back() % per_stick == 0) {
    const size_t before = host.size() - 2;
    const int64_t sticks = host.back() / per_stick;
    if (coeff[before] <= 0) return;
    if (sticks == 1) {
      stick_stride = coeff[before];
    } else if (coeff[before] != sticks * stick_stride) {
      return;
    }
    host[before] *= host.back();
    host.pop_back();
    coeff.pop_back();
    stick_dim = static_cast<int64_t>(before);
  }
}

// Adjacent outer host dims merged where one step of the outer moves as far
// as all steps of the inner (heads repeated for grouped-query attention,
// [batch, kv_heads, n_rep, seq, head_dim] read as [batch, heads, seq,
// head_dim]).
void merge_uniform_outer_dims(std::vector<int64_t>& host,
                              std::vector<int64_t>& coeff, int64_t& stick_dim) {
  for (size_t j = 0; j + 1 < host.size();) {
    const bool outer = static_cast<int64_t>(j) != stick_dim &&
                       static_cast<int64_t>(j) + 1 != stick_dim;
    if (outer && coeff[j + 1] > 0 && coeff[j] == host[j + 1] * coeff[j + 1]) {
      host[j] *= host[j + 1];
      coeff[j] = coeff[j + 1];
      host.erase(host.begin() + static_cast<std::ptrdiff_t>(j) + 1);
      coeff.erase(coeff.begin() + static_cast<std::ptrdiff_t>(j) + 1);
      if (stick_dim > static_cast<int64_t>(j)) --stick_dim;
    } else {
      ++j;
    }
  }
}

// dst <- src on the device through views of both over finer dims (above),
// when one of them is dense (it can be viewed any way) and the other splits
// into a view a kernel addresses. False otherwise.
bool copy_through_finer_views(const at::Tensor& src, const at::Tensor& dst) {
  thread_local bool active = false;  // the copy's own fallbacks stay plain
  if (active || src.scalar_type() != dst.scalar_type() ||
      src.sizes() != dst.sizes() || !has_device_dtype(src.scalar_type())) {
    return false;
  }
  // The side whose dims split is viewed that way, the other (dense, so any
  // view of it is plain) the same.
  std::vector<int64_t> src_strides, dst_strides;
  const auto dst_sizes = finer_sizes(dst, &dst_strides);
  const auto src_sizes =
      dst_sizes ? std::nullopt : finer_sizes(src, &src_strides);
  at::Tensor from, to;
  if (dst_sizes && src.is_contiguous()) {
    to = dst.as_strided(*dst_sizes, dst_strides, dst.storage_offset());
    from = src.view(*dst_sizes);
  } else if (src_sizes && dst.is_contiguous()) {
    from = src.as_strided(*src_sizes, src_strides, src.storage_offset());
    to = dst.view(*src_sizes);
  } else {
    return false;
  }
  const Iteration it(to);
  const auto out = stick_operand(to, it.sizes(), it.strides(to, to.dim(), true),
                                 to.storage_offset());
  if (!out || out->cols != kernels::StickOperand::Cols::kSticks ||
      !out->lane_steps.empty() ||
      !stick_operand(from, it.sizes(), it.strides(from, to.dim(), false),
                     from.storage_offset())) {
    return false;
  }
  active = true;
  try {
    launch_elementwise("copy", {from}, to, {kernels::copy_step()});
  } catch (...) {
    active = false;
    throw;
  }
  active = false;
  return true;
}

}  // namespace

std::optional<rt::DType> maybe_device_dtype(at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return rt::DType::kFloat16;
    case at::kBFloat16:
      return rt::DType::kBFloat16;
    case at::kFloat:
      return rt::DType::kFloat32;
    case at::kChar:
      return rt::DType::kInt8;
    case at::kInt:
      return rt::DType::kInt32;
    case at::kLong:
      return rt::DType::kInt64;
    case at::kBool:
      return rt::DType::kBool;
    case at::kByte:
      return rt::DType::kUInt8;
    default:
      return std::nullopt;
  }
}

bool has_device_dtype(at::ScalarType type) {
  return maybe_device_dtype(type).has_value();
}

rt::DType device_dtype(at::ScalarType type) {
  auto dtype = maybe_device_dtype(type);
  TORCH_CHECK_TYPE(dtype.has_value(), "spyre: dtype ", type,
                   " has no device representation for kernels");
  return *dtype;
}

std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor,
                                                   at::IntArrayRef sizes,
                                                   at::IntArrayRef strides,
                                                   int64_t offset) {
  const DeviceLayout& layout = tensor_layout(tensor);
  const auto dtype = maybe_device_dtype(tensor.scalar_type());
  if (!dtype || layout.element_size != tensor.element_size()) {
    return std::nullopt;
  }
  std::vector<int64_t> coeff;
  int64_t stick_dim = 0, stick_stride = 0;
  if (!host_dim_coefficients(layout, coeff, stick_dim, stick_stride)) {
    return std::nullopt;
  }
  std::vector<int64_t> host = layout.host_sizes;
  merge_whole_stick_dims(host, coeff, stick_dim, stick_stride,
                         layout.elements_per_stick());
  merge_uniform_outer_dims(host, coeff, stick_dim);
  const std::vector<int64_t> host_strides = contiguous_strides(host);
  // Coordinates of element 0 of the view, and how far the view reaches
  // along each host dim from there.
  std::vector<int64_t> start(host.size()), reach(host.size(), 0);
  int64_t rest = storage_window(tensor) + offset;
  for (size_t j = 0; j < host.size(); ++j) {
    start[j] = rest / host_strides[j];
    rest %= host_strides[j];
  }
  if (host.empty() || start[0] >= host[0]) return std::nullopt;

  kernels::StickOperand op;
  op.dtype = *dtype;
  op.stick_stride = stick_stride;
  const size_t n = std::max<size_t>(sizes.size(), 1);
  op.strides.assign(n - 1, 0);
  for (size_t d = 0; d + 1 < sizes.size(); ++d) {
    if (sizes[d] == 1 || strides[d] == 0) continue;
    if (strides[d] < 0) return std::nullopt;
    // The outermost host dim whose stride divides the view's stride.
    size_t j = 0;
    while (j < host.size() && strides[d] % host_strides[j] != 0) ++j;
    if (j == host.size()) return std::nullopt;
    const int64_t steps = strides[d] / host_strides[j];
    if (static_cast<int64_t>(j) == stick_dim) {
      // A dim stepping whole sticks along the stick dim (the heads of a
      // [batch, seq, heads * head_dim] tensor viewed as [batch, heads, seq,
      // head_dim]) is an outer dim like any other.
      const int64_t per_stick = op.elements_per_stick();
      if (steps % per_stick == 0) {
        reach[j] += steps * (sizes[d] - 1);
        op.strides[d] = steps / per_stick * stick_stride;
        continue;
      }
      // A batch dim stepping a part of a stick (heads of half a stick):
      // each of its steps starts the tile at another position.
      const bool rows_dim = d + 2 == sizes.size();
      if (d + 2 < sizes.size()) {
        op.lane_steps.resize(n - 1, 0);
        op.lane_steps[d] = steps;
        reach[j] += steps * (sizes[d] - 1);
        continue;
      }
      // Otherwise only the rows dim of a cols-broadcast view may walk the
      // sticks ([rows, 1] against [rows, cols]).
      if (!rows_dim || steps != 1 || strides.back() != 0) return std::nullopt;
      op.cols = kernels::StickOperand::Cols::kRowsAlongSticks;
      reach[j] += sizes[d] - 1;
      continue;
    }
    reach[j] += steps * (sizes[d] - 1);
    op.strides[d] = steps * coeff[j];
  }
  const int64_t cols = sizes.empty() ? 1 : sizes.back();
  const int64_t cols_stride = sizes.empty() ? 0 : strides.back();
  if (op.cols == kernels::StickOperand::Cols::kRowsAlongSticks) {
    // cols broadcast: the element of each row is placed by the rows dim
  } else if (cols_stride == 0) {
    op.cols = kernels::StickOperand::Cols::kBroadcast;
  } else if (cols_stride == 1) {
    if (static_cast<int64_t>(host.size()) - 1 != stick_dim) return std::nullopt;
    reach[stick_dim] += cols - 1;
  } else {
    // A column (ids[:, -1]): each element in a stick of its own, read where
    // it lies by the vector unit (kAcrossSticks).
    if (cols_stride < 0) return std::nullopt;
    size_t j = 0;
    while (j < host.size() && cols_stride % host_strides[j] != 0) ++j;
    if (j == host.size()) return std::nullopt;
    const int64_t steps = cols_stride / host_strides[j];
    const int64_t per_stick = op.elements_per_stick();
    if (static_cast<int64_t>(j) == stick_dim) {
      if (steps % per_stick != 0) return std::nullopt;
      op.stick_stride = steps / per_stick * stick_stride;
    } else {
      op.stick_stride = steps * coeff[j];
    }
    if (op.stick_stride <= 0) return std::nullopt;
    reach[j] += steps * (cols - 1);
    op.cols = kernels::StickOperand::Cols::kAcrossSticks;
  }
  if (!op.lane_steps.empty() &&
      op.cols != kernels::StickOperand::Cols::kSticks) {
    return std::nullopt;
  }
  int64_t bytes = 0;
  for (size_t j = 0; j < host.size(); ++j) {
    if (start[j] + reach[j] >= host[j]) return std::nullopt;
    if (static_cast<int64_t>(j) != stick_dim) bytes += start[j] * coeff[j];
  }
  const int64_t per_stick = op.elements_per_stick();
  bytes += start[stick_dim] / per_stick * stick_stride;
  op.offset = static_cast<uint64_t>(bytes);
  op.first = static_cast<uint32_t>(start[stick_dim] % per_stick);
  return op;
}

std::optional<kernels::StickOperand> stick_operand(const at::Tensor& tensor) {
  return stick_operand(tensor, tensor.sizes(), tensor.strides(),
                       tensor.storage_offset());
}

bool write_shares_sticks(const at::Tensor& tensor, at::IntArrayRef sizes,
                         const kernels::StickOperand& operand) {
  if (operand.first != 0) return true;
  const int64_t per_stick = operand.elements_per_stick();
  const int64_t cols = sizes.empty() ? 1 : sizes.back();
  if (cols % per_stick == 0) return false;
  // The last stick is partly outside the view: harmless only when the rest
  // is padding, i.e. the view ends its storage row.
  const DeviceLayout& layout = tensor_layout(tensor);
  const int64_t row = layout.host_sizes.back();
  return cols != row;
}
Iteration::Iteration(const at::Tensor& out, bool unit_rows) {
  for (int64_t d = 0; d < out.dim(); ++d) {
    if (out.size(d) != 1) out_dims_.push_back(d);
  }
  std::stable_sort(
      out_dims_.begin(), out_dims_.end(),
      [&](int64_t a, int64_t b) { return out.stride(a) > out.stride(b); });
  for (int64_t d : out_dims_) shape_.push_back(out.size(d));
  synthetic_cols_ = !out_dims_.empty() && out.stride(out_dims_.back()) != 1;
  if (shape_.empty() || synthetic_cols_) shape_.push_back(1);
  unit_rows_ = unit_rows && shape_.size() >= 2;
  if (unit_rows_) shape_.insert(shape_.end() - 1, 1);
}

std::vector<int64_t> Iteration::strides(const at::Tensor& t, int64_t out_rank,
                                        bool is_output) const {
  std::vector<int64_t> result;
  result.reserve(shape_.size());
  for (int64_t d : out_dims_) {
    const int64_t td = d - (out_rank - t.dim());
    result.push_back(td < 0 || t.size(td) == 1 ? 0 : t.stride(td));
  }
  if (result.size() + (unit_rows_ ? 1 : 0) < shape_.size()) {
    result.push_back(is_output ? 1 : 0);
  }
  if (unit_rows_) result.insert(result.end() - 1, 0);
  return result;
}

// Element offsets [first, last] a view reaches in its storage.
std::pair<int64_t, int64_t> element_span(const at::Tensor& t) {
  int64_t lo = image_offset(t), hi = lo;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi};
}

void check_out_apart(const at::Tensor& out,
                     std::initializer_list<at::Tensor> inputs) {
  at::assert_no_internal_overlap(out);
  for (const at::Tensor& input : inputs) {
    if (!input.defined() || out.numel() == 0 || input.numel() == 0) continue;
    at::assert_no_overlap(out, input);
    // PyTorch gives up on views it cannot decide (a column out= of its own
    // input), and its CPU kernels then compute in place: a result no
    // temporary reproduces. Views of one storage that reach into each other
    // are refused instead.
    if (at::get_overlap_status(out, input) == at::MemOverlapStatus::TooHard &&
        shares_memory(out, input)) {
      const auto [out_lo, out_hi] = element_span(out);
      const auto [in_lo, in_hi] = element_span(input);
      TORCH_CHECK(out_hi < in_lo || in_hi < out_lo,
                  "spyre: out= shares memory with an input (views of one "
                  "storage that reach into each other), so the result would "
                  "depend on the order the elements are written in; clone() "
                  "the input or write to a separate tensor");
    }
  }
}

at::Tensor& write_result(const at::Tensor& result, at::Tensor& out) {
  at::native::resize_output(out, result.sizes());
  out.copy_(result);
  return out;
}

at::Tensor empty_like_default(const at::Tensor& tensor) {
  return at::empty(tensor.sizes(), tensor.options());
}

void write_unaddressable(const at::Tensor& src, const at::Tensor& dst) {
  if (copy_through_finer_views(src, dst) || pack_rows_copy(src, dst)) {
    ++op_counters().device_materializations;
    return;
  }
  ++op_counters().host_materializations;
  // Only dst's own bytes are written (the rest of its storage may be
  // written meanwhile on other streams).
  copy_tensor(src.cpu(), dst, false);
}

// A device copy into a fresh tensor works when the copy kernel can read
// `tensor` over the fresh tensor's iteration; a column view copied into a
// row of sticks cannot (it would itself need materializing), so it goes
// through the host.
at::Tensor materialize(const at::Tensor& tensor) {
  at::Tensor fresh = empty_like_default(tensor);
  if (tensor.numel() == 0) return fresh;
  const Iteration it(fresh);
  if (stick_operand(tensor, it.sizes(), it.strides(tensor, fresh.dim(), false),
                    tensor.storage_offset())
          .has_value()) {
    ++op_counters().device_materializations;
    launch_elementwise("copy", {tensor}, fresh, {kernels::copy_step()});
    return fresh;
  }
  if (restickify_copy(tensor, fresh)) {
    ++op_counters().device_materializations;
    return fresh;
  }
  write_unaddressable(tensor, fresh);
  return fresh;
}

at::Tensor addressable(const at::Tensor& tensor) {
  if (tensor.numel() == 0 || stick_operand(tensor).has_value()) return tensor;
  return materialize(tensor);
}

}  // namespace spyre::torch_glue::ops
