#include "distributed/spyreccl.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <sstream>
#include <utility>

#include "distributed/staging.h"

namespace spyre::torch_glue::distributed {
namespace {

// ---- rank agreement -------------------------------------------------------

constexpr int64_t kDescribedDims = 8;
// dtype, number of dims, number of elements, then the first kDescribedDims
// sizes.
constexpr int64_t kDescriptionLength = 3 + kDescribedDims;

at::Tensor describe(const at::Tensor& tensor) {
  at::Tensor description = at::full({kDescriptionLength}, -1, at::kLong);
  auto values = description.accessor<int64_t, 1>();
  values[0] = static_cast<int64_t>(tensor.scalar_type());
  values[1] = tensor.dim();
  values[2] = tensor.numel();
  for (int64_t d = 0; d < std::min<int64_t>(tensor.dim(), kDescribedDims); ++d)
    values[3 + d] = tensor.size(d);
  return description;
}

std::string description_to_string(const at::Tensor& description) {
  auto values = description.accessor<int64_t, 1>();
  std::ostringstream out;
  out << c10::toString(static_cast<c10::ScalarType>(values[0])) << " [";
  const int64_t dims = std::min<int64_t>(values[1], kDescribedDims);
  for (int64_t d = 0; d < dims; ++d) out << (d ? ", " : "") << values[3 + d];
  if (values[1] > kDescribedDims) out << ", ...";
  out << "]";
  return out.str();
}

}  // namespace

// ---- SpyrecclBackend ------------------------------------------------------

SpyrecclBackend::SpyrecclBackend(c10::intrusive_ptr<c10d::Backend> transport,
                                 int rank, int size)
    : c10d::Backend(rank, size), transport_(std::move(transport)) {
  TORCH_CHECK(transport_, "spyreccl: a transport backend is required");
}

void SpyrecclBackend::setTimeout(std::chrono::milliseconds timeout) {
  transport_->setTimeout(timeout);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::staged(
    c10::intrusive_ptr<c10d::Work> work, std::function<void()> finish,
    std::vector<at::Tensor> outputs, c10d::OpType type) {
  return c10::make_intrusive<StagedWork>(std::move(work), std::move(finish),
                                         std::move(outputs), rank_, type);
}

void SpyrecclBackend::check_same_on_all_ranks(const char* op,
                                              const at::Tensor& tensor) {
  std::vector<at::Tensor> mine{describe(tensor)};
  std::vector<std::vector<at::Tensor>> everyone(1);
  for (int r = 0; r < size_; ++r)
    everyone[0].push_back(at::empty({kDescriptionLength}, at::kLong));
  auto work = transport_->allgather(everyone, mine, c10d::AllgatherOptions());
  wait_for_transport(*work, op, rank_, kNoTimeout);
  for (int r = 0; r < size_; ++r) {
    const at::Tensor& theirs = everyone[0][r];
    TORCH_CHECK(at::equal(theirs, everyone[0][0]), "spyreccl ", op, ": rank ",
                r, "'s tensor is ", description_to_string(theirs),
                " but rank 0's is ", description_to_string(everyone[0][0]),
                "; every rank must pass a tensor of the same dtype and shape");
  }
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  check_one_tensor("broadcast", tensors);
  check_same_on_all_ranks("broadcast", tensors[0]);
  auto hosts = stage_all_to_host(tensors);
  auto work = transport_->broadcast(hosts, opts);
  const bool is_root = opts.rootRank == rank_;
  const uint64_t bytes = tensors[0].nbytes();
  const uint64_t peers = size_ - 1;
  return staged(
      work,
      [tensors, hosts, is_root, bytes, peers]() mutable {
        add_link_time(tensors[0], is_root ? peers * bytes : 0,
                      is_root ? 0 : bytes);
        if (!is_root) copy_back(tensors, hosts);
      },
      tensors, c10d::OpType::BROADCAST);
}

// Two ranks: each receives the other's tensor (one host all-gather) and
// combines both on its device, a ring's traffic in one exchange that
// completes asynchronously. More ranks: allreduce_in_shards.
c10::intrusive_ptr<c10d::Work> SpyrecclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_one_tensor("all_reduce", tensors);
  check_reduction("all_reduce", opts.reduceOp, tensors[0]);
  check_same_on_all_ranks("all_reduce", tensors[0]);
  if (size_ > 2) return allreduce_in_shards(tensors[0], opts.reduceOp);
  // Flat, because the transport splits its output along dim 0.
  at::Tensor mine = stage_to_host(tensors[0]).reshape({-1});
  at::Tensor received = at::empty({size_ * mine.numel()}, mine.options());
  auto work =
      transport_->_allgather_base(received, mine, c10d::AllgatherOptions());
  const c10d::ReduceOp op = opts.reduceOp;
  const uint64_t peer_bytes = (size_ - 1) * tensors[0].nbytes();
  return staged(
      work,
      [tensors, mine, received, op, peer_bytes]() mutable {
        add_link_time(tensors[0], peer_bytes, peer_bytes);
        reduce_received_into(received, op, tensors[0]);
      },
      tensors, c10d::OpType::ALLREDUCE);
}

// A reduce-scatter and an all-gather, each card receiving 2(P-1)/P of the
// tensor as in a ring: one host all-to-all brings each rank its shard of
// every rank's tensor, its device folds them, and one host all-gather
// spreads the folded shards. The first half completes before the call
// returns (the device fold must run between the two exchanges, and every
// rank must issue its transport calls in the same order).
c10::intrusive_ptr<c10d::Work> SpyrecclBackend::allreduce_in_shards(
    at::Tensor tensor, c10d::ReduceOp op) {
  const int64_t numel = tensor.numel();
  const int64_t shard = (numel + size_ - 1) / size_;
  const at::TensorOptions host =
      tensor.options().device(at::kCPU).pinned_memory(true);
  // Zero padding up to whole shards: folded too, never copied back.
  at::Tensor outgoing = stage_flat_padded_to_host(tensor, size_ * shard);
  at::Tensor received = at::empty({size_ * shard}, host);
  std::vector<int64_t> even_splits;
  auto exchange = transport_->alltoall_base(
      received, outgoing, even_splits, even_splits, c10d::AllToAllOptions());
  wait_for_transport(*exchange, "all_reduce", rank_, kNoTimeout);
  const uint64_t peer_bytes = (size_ - 1) * shard * tensor.element_size();
  add_link_time(tensor, peer_bytes, peer_bytes);
  at::Tensor folded = at::empty({shard}, tensor.options());
  reduce_received_into(received, op, folded);
  at::Tensor folded_host = stage_to_host(folded);
  at::Tensor gathered = at::empty({size_ * shard}, host);
  auto work = transport_->_allgather_base(gathered, folded_host,
                                          c10d::AllgatherOptions());
  std::vector<at::Tensor> outputs{tensor};
  return staged(
      work,
      [outputs, gathered, folded_host, numel, peer_bytes]() mutable {
        add_link_time(outputs[0], peer_bytes, peer_bytes);
        copy_back(outputs,
                  {gathered.narrow(0, 0, numel).view(outputs[0].sizes())});
      },
      outputs, c10d::OpType::ALLREDUCE);
}

// The root receives every rank's tensor (one host gather) and combines them
// on its device; the others only send.
c10::intrusive_ptr<c10d::Work> SpyrecclBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_one_tensor("reduce", tensors);
  check_reduction("reduce", opts.reduceOp, tensors[0]);
  check_same_on_all_ranks("reduce", tensors[0]);
  std::vector<at::Tensor> mine{stage_to_host(tensors[0])};
  const bool is_root = opts.rootRank == rank_;
  at::Tensor received;
  std::vector<std::vector<at::Tensor>> slots;
  if (is_root) {
    std::vector<int64_t> shape{size_};
    shape.insert(shape.end(), mine[0].sizes().begin(), mine[0].sizes().end());
    received = at::empty(shape, mine[0].options());
    slots.push_back(received.unbind(0));
  }
  c10d::GatherOptions gather_opts;
  gather_opts.rootRank = opts.rootRank;
  gather_opts.timeout = opts.timeout;
  auto work = transport_->gather(slots, mine, gather_opts);
  const c10d::ReduceOp op = opts.reduceOp;
  const uint64_t bytes = tensors[0].nbytes();
  const uint64_t peers = size_ - 1;
  return staged(
      work,
      [tensors, mine, received, op, is_root, bytes, peers]() mutable {
        add_link_time(tensors[0], is_root ? 0 : bytes,
                      is_root ? peers * bytes : 0);
        // Only the root receives the result; the others keep their input.
        if (is_root) reduce_received_into(received, op, tensors[0]);
      },
      tensors, c10d::OpType::REDUCE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  check_one_tensor("all_gather", inputs);
  TORCH_CHECK(outputs.size() == 1,
              "spyreccl all_gather: expected one output list");
  check_all_spyre("all_gather", outputs[0]);
  check_same_on_all_ranks("all_gather", inputs[0]);
  auto host_inputs = stage_all_to_host(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs{
      host_buffers_like(outputs[0])};
  auto work = transport_->allgather(host_outputs, host_inputs, opts);
  std::vector<at::Tensor> device_outputs = outputs[0];
  const uint64_t peer_bytes = (size_ - 1) * inputs[0].nbytes();
  return staged(
      work,
      [device_outputs, host_outputs, host_inputs, peer_bytes]() mutable {
        add_link_time(device_outputs.at(0), peer_bytes, peer_bytes);
        copy_back(device_outputs, host_outputs[0]);
      },
      device_outputs, c10d::OpType::ALLGATHER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_spyre("all_gather_into_tensor", input);
  check_spyre("all_gather_into_tensor", output);
  check_same_on_all_ranks("all_gather_into_tensor", input);
  at::Tensor host_input = stage_to_host(input);
  at::Tensor host_output = host_buffer_like(output);
  auto work = transport_->_allgather_base(host_output, host_input, opts);
  std::vector<at::Tensor> device_outputs{output};
  const uint64_t peer_bytes = (size_ - 1) * input.nbytes();
  return staged(
      work,
      [device_outputs, host_output, host_input, peer_bytes]() mutable {
        add_link_time(device_outputs[0], peer_bytes, peer_bytes);
        copy_back(device_outputs, {host_output});
      },
      device_outputs, c10d::OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  check_one_tensor("gather", inputs);
  // Only the root passes an output list.
  std::vector<at::Tensor> device_outputs =
      outputs.empty() ? std::vector<at::Tensor>() : outputs[0];
  check_all_spyre("gather", device_outputs);
  check_same_on_all_ranks("gather", inputs[0]);
  auto host_inputs = stage_all_to_host(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs;
  if (!outputs.empty())
    host_outputs.push_back(host_buffers_like(device_outputs));
  auto work = transport_->gather(host_outputs, host_inputs, opts);
  const bool is_root = opts.rootRank == rank_;
  const uint64_t bytes = inputs[0].nbytes();
  const uint64_t peers = size_ - 1;
  const at::Tensor input = inputs[0];
  return staged(
      work,
      [device_outputs, host_outputs, host_inputs, input, is_root, bytes,
       peers]() mutable {
        add_link_time(input, is_root ? 0 : bytes, is_root ? peers * bytes : 0);
        if (!host_outputs.empty()) copy_back(device_outputs, host_outputs[0]);
      },
      device_outputs, c10d::OpType::GATHER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  check_one_tensor("scatter", outputs);
  check_same_on_all_ranks("scatter", outputs[0]);
  // Only the root passes an input list.
  std::vector<std::vector<at::Tensor>> host_inputs;
  if (!inputs.empty()) {
    check_all_spyre("scatter", inputs[0]);
    host_inputs.push_back(stage_all_to_host(inputs[0]));
  }
  auto host_outputs = host_buffers_like(outputs);
  auto work = transport_->scatter(host_outputs, host_inputs, opts);
  const bool is_root = opts.rootRank == rank_;
  const uint64_t bytes = outputs[0].nbytes();
  const uint64_t peers = size_ - 1;
  return staged(
      work,
      [outputs, host_outputs, host_inputs, is_root, bytes, peers]() mutable {
        add_link_time(outputs[0], is_root ? peers * bytes : 0,
                      is_root ? 0 : bytes);
        copy_back(outputs, host_outputs);
      },
      outputs, c10d::OpType::SCATTER);
}

// Rank r's output combines every rank's r-th input: one host all-to-all
// brings this rank its share from every rank, then its device combines them.
c10::intrusive_ptr<c10d::Work> SpyrecclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_one_tensor("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1,
              "spyreccl reduce_scatter: expected one input list");
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_,
              "spyreccl reduce_scatter: expected one input per rank (", size_,
              "), got ", inputs[0].size());
  check_all_spyre("reduce_scatter", inputs[0]);
  for (const at::Tensor& input : inputs[0]) {
    TORCH_CHECK(input.sizes() == outputs[0].sizes() &&
                    input.scalar_type() == outputs[0].scalar_type(),
                "spyreccl reduce_scatter: every input must have the output's "
                "dtype and shape ",
                outputs[0].scalar_type(), " ", outputs[0].sizes(), ", got ",
                input.scalar_type(), " ", input.sizes());
  }
  check_reduction("reduce_scatter", opts.reduceOp, outputs[0]);
  check_same_on_all_ranks("reduce_scatter", outputs[0]);
  return reduce_scatter_staged(stage_stacked_to_host(inputs[0]), outputs[0],
                               opts.reduceOp, c10d::OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  check_spyre("reduce_scatter_tensor", input);
  check_spyre("reduce_scatter_tensor", output);
  TORCH_CHECK(input.numel() == size_ * output.numel() &&
                  input.scalar_type() == output.scalar_type(),
              "spyreccl reduce_scatter_tensor: the input must hold one output "
              "per rank (",
              size_, " x ", output.numel(), " elements of ",
              output.scalar_type(), "), got ", input.numel(), " of ",
              input.scalar_type());
  check_reduction("reduce_scatter_tensor", opts.reduceOp, output);
  check_same_on_all_ranks("reduce_scatter_tensor", input);
  return reduce_scatter_staged(stage_to_host(input), output, opts.reduceOp,
                               c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::reduce_scatter_staged(
    at::Tensor staged_input, at::Tensor output, c10d::ReduceOp op,
    c10d::OpType type) {
  // [ranks, *output shape]: row r goes to rank r, and comes back as rank
  // r's contribution to this rank's output.
  std::vector<int64_t> shape{size_};
  shape.insert(shape.end(), output.sizes().begin(), output.sizes().end());
  at::Tensor outgoing = staged_input.reshape(shape);
  at::Tensor received = at::empty(shape, outgoing.options());
  std::vector<int64_t> even_splits;
  auto work = transport_->alltoall_base(received, outgoing, even_splits,
                                        even_splits, c10d::AllToAllOptions());
  const uint64_t peer_bytes = (size_ - 1) * output.nbytes();
  std::vector<at::Tensor> device_outputs{output};
  return staged(
      work,
      [device_outputs, outgoing, received, op, peer_bytes]() mutable {
        add_link_time(device_outputs[0], peer_bytes, peer_bytes);
        reduce_received_into(received, op, device_outputs[0]);
      },
      device_outputs, type);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  check_spyre("all_to_all_single", input);
  check_spyre("all_to_all_single", output);
  at::Tensor host_input = stage_to_host(input);
  at::Tensor host_output = host_buffer_like(output);
  std::vector<at::Tensor> device_outputs{output};
  auto row_bytes = [](const at::Tensor& t) {
    return t.dim() == 0 || t.size(0) == 0 ? uint64_t{0}
                                          : t.nbytes() / t.size(0);
  };
  const uint64_t sent = input.dim() == 0
                            ? 0
                            : peer_split_bytes(input_split_sizes, input.size(0),
                                               row_bytes(input), rank_, size_);
  const uint64_t received =
      output.dim() == 0 ? 0
                        : peer_split_bytes(output_split_sizes, output.size(0),
                                           row_bytes(output), rank_, size_);
  // The transport takes the split vectors over (they are empty after).
  auto work = transport_->alltoall_base(
      host_output, host_input, output_split_sizes, input_split_sizes, opts);
  return staged(
      work,
      [device_outputs, host_output, host_input, sent, received]() mutable {
        add_link_time(device_outputs[0], sent, received);
        copy_back(device_outputs, {host_output});
      },
      device_outputs, c10d::OpType::ALLTOALL_BASE);
}

// The list form through the single-tensor one: every input flattened into
// one host buffer, split by element counts, and the received pieces copied
// into the outputs.
c10::intrusive_ptr<c10d::Work> SpyrecclBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "spyreccl all_to_all: expected one input and one output per "
              "rank (",
              size_, "), got ", inputs.size(), " and ", outputs.size());
  check_all_spyre("all_to_all", inputs);
  check_all_spyre("all_to_all", outputs);
  std::vector<int64_t> input_splits, output_splits;
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& input : inputs) {
    TORCH_CHECK(input.scalar_type() == inputs[0].scalar_type(),
                "spyreccl all_to_all: the inputs differ in dtype (",
                inputs[0].scalar_type(), ", ", input.scalar_type(), ")");
    input_splits.push_back(input.numel());
    flat_inputs.push_back(input.reshape({-1}));
  }
  for (const at::Tensor& output : outputs) {
    TORCH_CHECK(output.scalar_type() == inputs[0].scalar_type(),
                "spyreccl all_to_all: an output is ", output.scalar_type(),
                " but the inputs are ", inputs[0].scalar_type());
    output_splits.push_back(output.numel());
  }
  at::Tensor host_input = stage_to_host(at::cat(flat_inputs));
  int64_t received_elements = 0;
  for (int64_t n : output_splits) received_elements += n;
  at::Tensor host_output = at::empty({received_elements}, host_input.options());
  const uint64_t element = inputs[0].element_size();
  const uint64_t sent =
      element * static_cast<uint64_t>(host_input.numel() - input_splits[rank_]);
  const uint64_t received =
      element * static_cast<uint64_t>(received_elements - output_splits[rank_]);
  // The transport takes the split vectors over (they are empty after).
  std::vector<int64_t> splits_out = output_splits;
  auto work = transport_->alltoall_base(host_output, host_input, splits_out,
                                        input_splits, opts);
  return staged(
      work,
      [outputs, output_splits, host_output, host_input, sent,
       received]() mutable {
        add_link_time(outputs[0], sent, received);
        std::vector<at::Tensor> pieces;
        int64_t begin = 0;
        for (size_t r = 0; r < outputs.size(); ++r) {
          pieces.push_back(host_output.narrow(0, begin, output_splits[r])
                               .view(outputs[r].sizes()));
          begin += output_splits[r];
        }
        copy_back(outputs, pieces);
      },
      outputs, c10d::OpType::ALLTOALL);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  check_one_tensor("send", tensors);
  auto hosts = stage_all_to_host(tensors);
  auto work = transport_->send(hosts, dst_rank, tag);
  // The lambda keeps the host buffer alive until the send completes.
  return staged(
      work,
      [tensors, hosts] { add_link_time(tensors[0], tensors[0].nbytes(), 0); },
      tensors, c10d::OpType::SEND);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  check_one_tensor("recv", tensors);
  auto hosts = host_buffers_like(tensors);
  auto work = transport_->recv(hosts, src_rank, tag);
  return staged(
      work,
      [tensors, hosts]() mutable {
        add_link_time(tensors[0], 0, tensors[0].nbytes());
        copy_back(tensors, hosts);
      },
      tensors, c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  check_one_tensor("recv", tensors);
  auto hosts = host_buffers_like(tensors);
  auto work = transport_->recvAnysource(hosts, tag);
  return staged(
      work,
      [tensors, hosts]() mutable {
        add_link_time(tensors[0], 0, tensors[0].nbytes());
        copy_back(tensors, hosts);
      },
      tensors, c10d::OpType::RECVANYSOURCE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::barrier(
    const c10d::BarrierOptions& opts) {
  // A barrier orders this rank's queued device work too: once it returns,
  // everything queued before it on the current device has run.
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::PrivateUse1);
  guard.synchronizeDevice(guard.getDevice().index());
  auto work = transport_->barrier(opts);
  return staged(work, nullptr, {}, c10d::OpType::BARRIER);
}

}  // namespace spyre::torch_glue::distributed
