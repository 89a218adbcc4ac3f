#include "distributed/staging.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/bitwise_and.h>
#include <ATen/ops/bitwise_or.h>
#include <ATen/ops/bitwise_xor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "storage_ops.h"

namespace spyre::torch_glue::distributed {

// ---- staging through host memory ------------------------------------------

void check_spyre(const char* op, const at::Tensor& tensor) {
  TORCH_CHECK(tensor.device().type() == c10::DeviceType::PrivateUse1,
              "spyreccl ", op, ": expected a spyre tensor, got one on ",
              tensor.device(),
              "; move it with .to('spyre'), or give CPU tensors to a group "
              "with a CPU backend, e.g. "
              "init_process_group('cpu:gloo,spyre:spyreccl')");
  TORCH_CHECK(tensor.layout() == at::kStrided, "spyreccl ", op,
              ": only dense (strided) tensors are supported, got ",
              tensor.layout());
}

void check_one_tensor(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "spyreccl ", op,
              ": expected one tensor per call, got ", tensors.size());
  check_spyre(op, tensors[0]);
}

void check_all_spyre(const char* op, const std::vector<at::Tensor>& tensors) {
  for (const at::Tensor& tensor : tensors) check_spyre(op, tensor);
}

// A contiguous pinned host tensor of `tensor`'s shape and dtype: the
// transport needs dense host memory whatever the spyre tensor's strides.
at::Tensor host_buffer_like(const at::Tensor& tensor) {
  return at::empty(tensor.sizes(),
                   tensor.options().device(at::kCPU).pinned_memory(true));
}

// The blocking device-to-host copy waits for the stream work producing
// `tensor`, so the transport never reads a half-written value. Staging
// models no time: on the chip the bytes go card to card, and each
// collective adds its card-link time once (add_link_time).
at::Tensor stage_to_host(const at::Tensor& tensor) {
  at::Tensor host = host_buffer_like(tensor);
  const CardLinkStaging staging;
  host.copy_(tensor);
  return host;
}

at::Tensor stage_flat_padded_to_host(const at::Tensor& tensor,
                                     int64_t elements) {
  at::Tensor host = at::zeros(
      {elements}, tensor.options().device(at::kCPU).pinned_memory(true));
  const CardLinkStaging staging;
  host.narrow(0, 0, tensor.numel()).view(tensor.sizes()).copy_(tensor);
  return host;
}

// `tensors` staged into one pinned buffer [tensors.size(), *shape] (they
// share a shape), so the transport moves them in one message and the
// device receives them in one copy.
at::Tensor stage_stacked_to_host(const std::vector<at::Tensor>& tensors) {
  std::vector<int64_t> shape{static_cast<int64_t>(tensors.size())};
  const auto sizes = tensors.at(0).sizes();
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  at::Tensor host = at::empty(
      shape, tensors[0].options().device(at::kCPU).pinned_memory(true));
  const CardLinkStaging staging;
  for (size_t i = 0; i < tensors.size(); ++i) host[i].copy_(tensors[i]);
  return host;
}

std::vector<at::Tensor> stage_all_to_host(
    const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> hosts;
  hosts.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors)
    hosts.push_back(stage_to_host(tensor));
  return hosts;
}

std::vector<at::Tensor> host_buffers_like(
    const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> hosts;
  hosts.reserve(tensors.size());
  for (const at::Tensor& tensor : tensors)
    hosts.push_back(host_buffer_like(tensor));
  return hosts;
}

// copy_ writes through the spyre tensor's strides, so views and
// non-contiguous outputs receive their elements in place.
void copy_back(std::vector<at::Tensor>& devices,
               const std::vector<at::Tensor>& hosts) {
  const CardLinkStaging staging;
  for (size_t i = 0; i < devices.size(); ++i) devices[i].copy_(hosts[i]);
}

// The modelled time of this rank's share of a collective on its card link:
// the link is full duplex, so a card that sends and receives at once pays
// for the larger side. Added on the current stream of `device`.
void add_link_time(const at::Tensor& device, uint64_t sent, uint64_t received) {
  const uint64_t bytes = std::max(sent, received);
  if (bytes > 0) record_card_link(device.device().index(), bytes);
}

// Bytes of `splits` (rows of dim 0, of `row_bytes` each; empty: even
// splits of `total_rows`) that go to or come from the other ranks.
uint64_t peer_split_bytes(const std::vector<int64_t>& splits,
                          int64_t total_rows, uint64_t row_bytes, int rank,
                          int size) {
  const int64_t own =
      splits.empty() ? total_rows / size : splits.at(static_cast<size_t>(rank));
  return static_cast<uint64_t>(total_rows - own) * row_bytes;
}

// ---- reductions on the device ---------------------------------------------

namespace {

// a op b, written into `out`: one elementwise device program.
void combine_into(c10d::ReduceOp op, const at::Tensor& a, const at::Tensor& b,
                  at::Tensor& out) {
  switch (op) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::AVG:
      at::add_out(out, a, b);
      return;
    case c10d::ReduceOp::MAX:
      at::maximum_out(out, a, b);
      return;
    case c10d::ReduceOp::MIN:
      at::minimum_out(out, a, b);
      return;
    case c10d::ReduceOp::PRODUCT:
      at::mul_out(out, a, b);
      return;
    case c10d::ReduceOp::BAND:
      at::bitwise_and_out(out, a, b);
      return;
    case c10d::ReduceOp::BOR:
      at::bitwise_or_out(out, a, b);
      return;
    case c10d::ReduceOp::BXOR:
      at::bitwise_xor_out(out, a, b);
      return;
    default:
      TORCH_CHECK(false, "spyreccl: unsupported reduce op ",
                  static_cast<int>(op));
  }
}

// Combines the ranks' contributions `parts` [ranks, *shape] (on the device)
// into `out`, folding in rank order with one elementwise program per rank
// (the last writes `out` itself), as gloo folds on the CPU: every rank
// combines the same parts in the same order, so all ranks get the same
// bits, and a 16-bit sum rounds once per rank as gloo's does.
void reduce_parts_into(const at::Tensor& parts, c10d::ReduceOp op,
                       at::Tensor& out) {
  const int64_t ranks = parts.size(0);
  if (ranks == 1) {
    out.copy_(parts[0]);
    return;
  }
  at::Tensor folded = parts[0];
  for (int64_t r = 1; r < ranks; ++r) {
    at::Tensor into = r + 1 == ranks ? out : at::empty_like(parts[0]);
    combine_into(op, folded, parts[r], into);
    folded = into;
  }
  if (op == c10d::ReduceOp::AVG) out.div_(ranks);
}

}  // namespace

// How the ranks' contributions combine. The transport only moves bytes; the
// combination runs as device programs on the receiving card.
void check_reduction(const char* op, c10d::ReduceOp requested,
                     const at::Tensor& sample) {
  if (requested == c10d::ReduceOp::AVG) {
    TORCH_CHECK(at::isFloatingType(sample.scalar_type()), "spyreccl ", op,
                ": ReduceOp.AVG needs a floating-point tensor, got ",
                sample.scalar_type(),
                "; use ReduceOp.SUM and divide, or convert the tensor first");
  }
  TORCH_CHECK(!(requested == c10d::ReduceOp::PREMUL_SUM), "spyreccl ", op,
              ": PREMUL_SUM is not supported; scale the tensor and use SUM");
}

// The received host buffer (every rank's contribution of `out`'s shape, in
// rank order) onto the device, then combined into `out` there.
void reduce_received_into(const at::Tensor& received, c10d::ReduceOp op,
                          at::Tensor& out) {
  std::vector<int64_t> shape{-1};
  shape.insert(shape.end(), out.sizes().begin(), out.sizes().end());
  at::Tensor parts;
  {
    const CardLinkStaging staging;
    parts = received.reshape(shape).to(out.device());
  }
  reduce_parts_into(parts, op, out);
}

}  // namespace spyre::torch_glue::distributed
