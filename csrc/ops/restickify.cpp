// Copies that move the stick dim (x.t().contiguous(), a key transposed for
// attention): the elementwise copy reads and writes along the same sticks,
// so a source whose elements run along another dim than the destination's
// goes through the re-layout program (kernels/relayout.h), batches and all,
// instead of through the host.
#include "ops/restickify.h"

#include <ATen/ops/empty.h>

#include "device_state.h"
#include "ops/launch.h"
#include "ops/matrix_operand.h"
#include "spyre/kernels/relayout.h"

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
  if (!in && stick_operand(in_tensor).has_value()) {
    in_tensor = materialize(in_tensor);
    in = matrix_view(in_tensor, n - 2);
  }
  const std::optional<kernels::Matrix> out =
      matrix_view(dst.movedim(*k, -2), n - 2);
  if (!in || !out) return false;
  const c10::DeviceIndex device = dst.device().index();
  kernels::RelayoutOptions options{{device_chip(device)}};
  kernels::KeyWriter key;
  key.add("restickify");
  append_key(key, *in);
  append_key(key, *out);
  try {
    launch_cached(device, ProgramKey(std::move(key)),
                  [&] { return kernels::build_restickify(*in, *out, options); },
                  {in_tensor, dst});
  } catch (const kernels::KernelBuildError&) {
    return false;  // too large for the scratchpads in one piece
  }
  return true;
}

}  // namespace spyre::torch_glue::ops
