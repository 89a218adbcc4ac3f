// Copies that move the stick dim (x.t().contiguous(), a key transposed for
// attention): the elementwise copy reads and writes along the same sticks,
// so a source whose elements run along another dim than the destination's
// goes through the re-layout program (kernels/relayout.h), batches and all,
// instead of through the host.
#include "ops/restickify.h"

#include <ATen/ops/empty.h>

#include <initializer_list>
#include <numeric>
#include <string_view>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"
#include "ops/operands.h"
#include "spyre/kernels/pack_rows.h"
#include "spyre/kernels/relayout.h"
#include "storage_ops.h"

namespace spyre::torch_glue::ops {
namespace {

// The dim along which src's elements are adjacent (stride 1, more than one
// element), if there is one.
std::optional<int64_t> element_dim(const at::Tensor& src) {
  for (int64_t d = src.dim() - 1; d >= 0; --d) {
    if (src.stride(d) == 1 && src.size(d) > 1) return d;
  }
  return std::nullopt;
}

// Launches the program `build` makes of (in, out) on the device of
// `tensors`, cached by `name` and both matrices, with `tensors` bound; false
// when the program cannot be built (the matrices do not fit the
// scratchpads).
bool launch_matrix_copy(
    std::string_view name, const kernels::Matrix& in,
    const kernels::Matrix& out,
    c10::function_ref<rt::Program(const kernels::Target&)> build,
    std::initializer_list<at::Tensor> tensors) {
  const c10::DeviceIndex device = tensors.begin()->device().index();
  const kernels::Target target{device_chip(device)};
  kernels::KeyWriter key;
  key.add(name);
  append_key(key, in);
  append_key(key, out);
  try {
    launch_cached(
        device, ProgramKey(std::move(key)), [&] { return build(target); },
        tensors);
  } catch (const kernels::KernelBuildError&) {
    return false;
  }
  return true;
}

}  // namespace

bool restickify_copy(const at::Tensor& src, const at::Tensor& dst) {
  const int64_t n = src.dim();
  if (n < 2 || src.sizes() != dst.sizes() ||
      src.scalar_type() != dst.scalar_type() ||
      !has_device_dtype(src.scalar_type()) || !dst.is_contiguous()) {
    return false;
  }
  // A last dim of stride 0 (a broadcast) or 1 is the elementwise copy's.
  if (src.stride(-1) <= 1 || src.size(-1) == 1) return false;
  const std::optional<int64_t> k = element_dim(src);
  if (!k) return false;
  // Per batch, `in` is [dst's last dim, k] with src's sticks along k, and
  // `out` is [k, dst's last dim] with dst's sticks: out = in transposed.
  // A source starting inside a stick is first copied to a fresh tensor
  // (by the elementwise copy, which reads it along its own sticks).
  at::Tensor in_tensor = src.movedim(*k, -1);
  std::optional<kernels::Matrix> in = matrix_view(in_tensor, n - 2);
  if (!in && n == 2) {
    // Rows that a reshape merged from the storage's dims (a [2, 8, 64]
    // storage read as [16, 64], then transposed): split again, as row dims.
    std::vector<int64_t> strides;
    const auto sizes = finer_sizes(in_tensor, &strides);
    if (sizes && sizes->back() == in_tensor.size(-1)) {
      const at::Tensor rows =
          in_tensor.as_strided(*sizes, strides, in_tensor.storage_offset());
      in = matrix_view(rows);
      if (in) in_tensor = rows;
    }
  }
  if (!in && stick_operand(in_tensor).has_value()) {
    in_tensor = materialize(in_tensor);
    in = matrix_view(in_tensor, n - 2);
  }
  const std::optional<kernels::Matrix> out =
      matrix_view(dst.movedim(*k, -2), n - 2);
  if (!in || !out) return false;
  return launch_matrix_copy("restickify", *in, *out,
                            [&](const kernels::Target& target) {
                              return kernels::build_restickify(
                                  *in, *out, kernels::RelayoutOptions{target});
                            },
                            {in_tensor, dst});
}

namespace {

// Most source rows one packed row takes (one vector copy each): beyond it
// the program would be mostly instructions.
constexpr int64_t kMaxRowsPerPack = 256;

// How many elements of src's rows dst's rows hold (a multiple of `cols`),
// or 0 when none suits: dst's own last dim when it has rows, else (a flat
// dst) whole sticks' worth of whole source rows, else all of it.
int64_t packed_cols(const at::Tensor& dst, int64_t cols) {
  if (dst.dim() >= 2) {
    return dst.size(-1) % cols == 0 ? dst.size(-1) : 0;
  }
  const int64_t per_stick =
      rt::elements_per_stick(device_dtype(dst.scalar_type()));
  const int64_t sticks_of_rows = std::lcm(cols, per_stick);
  if (dst.numel() % sticks_of_rows == 0) return sticks_of_rows;
  return dst.numel();
}

}  // namespace

bool pack_rows_copy(const at::Tensor& src, const at::Tensor& dst) {
  if (src.scalar_type() != dst.scalar_type() || src.sizes() != dst.sizes() ||
      !has_device_dtype(src.scalar_type()) || src.numel() == 0 ||
      src.device() != dst.device() || !covers_storage(dst) ||
      shares_memory(src, dst)) {  // cores would overwrite rows others read
    return false;
  }
  // Trailing dims of one element ([tokens * top_k, 1]) add nothing to the
  // rows: both seen without them.
  int64_t dims = src.dim();
  while (dims > 1 && src.size(dims - 1) == 1) --dims;
  if (dims < src.dim()) {
    return pack_rows_copy(
        src.as_strided(src.sizes().slice(0, dims), src.strides().slice(0, dims),
                       src.storage_offset()),
        dst.view(dst.sizes().slice(0, dims)));
  }
  // src over its storage's rows (finer dims where a reshape merged them).
  std::vector<int64_t> strides;
  const auto sizes = finer_sizes(src, &strides);
  const at::Tensor rows =
      sizes ? src.as_strided(*sizes, strides, src.storage_offset()) : src;
  if (rows.dim() == 0) return false;
  const int64_t cols = rows.size(-1);
  const int64_t per_row = packed_cols(dst, cols);
  if (per_row == 0 || per_row / cols < 2 || per_row / cols > kMaxRowsPerPack) {
    return false;  // one source row per packed row: the elementwise copy's
  }
  // dst's own dims where its rows are the packed rows (its layout may
  // order them otherwise than row-major: a flat view could not be
  // addressed), else a flat dst seen as rows of per_row.
  const at::Tensor packed =
      dst.dim() >= 2 ? dst : dst.view({dst.numel() / per_row, per_row});
  const std::optional<kernels::Matrix> in = matrix_view(rows);
  const std::optional<kernels::Matrix> out = matrix_view(packed);
  if (!in || !out) return false;
  return launch_matrix_copy("pack_rows", *in, *out,
                            [&](const kernels::Target& target) {
                              return kernels::build_pack_rows(*in, *out,
                                                              target);
                            },
                            {rows, packed});
}

}  // namespace spyre::torch_glue::ops
