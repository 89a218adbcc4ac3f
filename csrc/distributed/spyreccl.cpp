#include "distributed/spyreccl.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <sstream>
#include <utility>

namespace spyre::torch_glue::distributed {
namespace {

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
// `tensor`, so the transport never reads a half-written value.
at::Tensor stage_to_host(const at::Tensor& tensor) {
  at::Tensor host = host_buffer_like(tensor);
  host.copy_(tensor);
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
  for (size_t i = 0; i < devices.size(); ++i) devices[i].copy_(hosts[i]);
}

// ---- reductions -----------------------------------------------------------

// What the transport is asked to reduce with: gloo has no AVG, so an
// average is a host SUM followed by a division on the device.
struct HostReduction {
  c10d::ReduceOp op;
  bool average;
};

HostReduction host_reduction(const char* op, c10d::ReduceOp requested,
                             const at::Tensor& sample) {
  if (requested == c10d::ReduceOp::AVG) {
    TORCH_CHECK(at::isFloatingType(sample.scalar_type()), "spyreccl ", op,
                ": ReduceOp.AVG needs a floating-point tensor, got ",
                sample.scalar_type(),
                "; use ReduceOp.SUM and divide, or convert the tensor first");
    return {c10d::ReduceOp(c10d::ReduceOp::SUM), true};
  }
  TORCH_CHECK(!(requested == c10d::ReduceOp::PREMUL_SUM), "spyreccl ", op,
              ": PREMUL_SUM is not supported; scale the tensor and use SUM");
  return {requested, false};
}

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

void wait_for_transport(c10d::Work& work, const char* op, int rank,
                        std::chrono::milliseconds timeout) {
  std::string cause;
  try {
    work.wait(timeout);
    return;
  } catch (const c10::Error& error) {
    cause = error.what_without_backtrace();
  } catch (const std::exception& error) {
    cause = error.what();
  }
  C10_THROW_ERROR(
      DistBackendError,
      c10::str("spyreccl ", op, " on rank ", rank,
               ": the host transport (gloo) failed: ", cause,
               "; a peer rank may have exited, or not joined this collective "
               "within the process group's timeout"));
}

// ---- StagedWork -----------------------------------------------------------

StagedWork::StagedWork(c10::intrusive_ptr<c10d::Work> transport,
                       std::function<void()> finish,
                       std::vector<at::Tensor> outputs, int rank,
                       c10d::OpType type)
    : c10d::Work(rank, type),
      transport_(std::move(transport)),
      finish_(std::move(finish)),
      outputs_(std::move(outputs)) {}

void StagedWork::finish_once() {
  std::lock_guard<std::mutex> lock(finish_mutex_);
  if (finished_) return;
  if (finish_) finish_();
  finished_ = true;
  finish_ = nullptr;  // drops the staging buffers it holds
}

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  wait_for_transport(*transport_, c10d::opTypeToString(opType_).c_str(), rank_,
                     timeout);
  finish_once();
  return true;
}

bool StagedWork::isCompleted() {
  if (!transport_->isCompleted()) return false;
  if (transport_->isSuccess()) finish_once();
  return true;
}

bool StagedWork::isSuccess() const { return transport_->isSuccess(); }

std::exception_ptr StagedWork::exception() const {
  return transport_->exception();
}

int StagedWork::sourceRank() const { return transport_->sourceRank(); }

std::vector<at::Tensor> StagedWork::result() { return outputs_; }

void StagedWork::synchronize() { wait(kNoTimeout); }

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
  return staged(
      work,
      [tensors, hosts, is_root]() mutable {
        if (!is_root) copy_back(tensors, hosts);
      },
      tensors, c10d::OpType::BROADCAST);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_one_tensor("all_reduce", tensors);
  const HostReduction reduction =
      host_reduction("all_reduce", opts.reduceOp, tensors[0]);
  check_same_on_all_ranks("all_reduce", tensors[0]);
  auto hosts = stage_all_to_host(tensors);
  c10d::AllreduceOptions host_opts = opts;
  host_opts.reduceOp = reduction.op;
  auto work = transport_->allreduce(hosts, host_opts);
  const int size = size_;
  return staged(
      work,
      [tensors, hosts, reduction, size]() mutable {
        copy_back(tensors, hosts);
        if (reduction.average) tensors[0].div_(size);
      },
      tensors, c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_one_tensor("reduce", tensors);
  const HostReduction reduction =
      host_reduction("reduce", opts.reduceOp, tensors[0]);
  check_same_on_all_ranks("reduce", tensors[0]);
  auto hosts = stage_all_to_host(tensors);
  c10d::ReduceOptions host_opts = opts;
  host_opts.reduceOp = reduction.op;
  auto work = transport_->reduce(hosts, host_opts);
  const bool is_root = opts.rootRank == rank_;
  const int size = size_;
  return staged(
      work,
      [tensors, hosts, reduction, size, is_root]() mutable {
        // Only the root receives the result; the others keep their input.
        if (!is_root) return;
        copy_back(tensors, hosts);
        if (reduction.average) tensors[0].div_(size);
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
  return staged(
      work,
      [device_outputs, host_outputs, host_inputs]() mutable {
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
  return staged(
      work,
      [device_outputs, host_output, host_input]() mutable {
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
  auto host_inputs = stage_all_to_host(inputs);
  std::vector<std::vector<at::Tensor>> host_outputs;
  if (!outputs.empty())
    host_outputs.push_back(host_buffers_like(device_outputs));
  auto work = transport_->gather(host_outputs, host_inputs, opts);
  return staged(
      work,
      [device_outputs, host_outputs, host_inputs]() mutable {
        if (!host_outputs.empty()) copy_back(device_outputs, host_outputs[0]);
      },
      device_outputs, c10d::OpType::GATHER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  check_one_tensor("scatter", outputs);
  // Only the root passes an input list.
  std::vector<std::vector<at::Tensor>> host_inputs;
  if (!inputs.empty()) {
    check_all_spyre("scatter", inputs[0]);
    host_inputs.push_back(stage_all_to_host(inputs[0]));
  }
  auto host_outputs = host_buffers_like(outputs);
  auto work = transport_->scatter(host_outputs, host_inputs, opts);
  return staged(
      work,
      [outputs, host_outputs, host_inputs]() mutable {
        copy_back(outputs, host_outputs);
      },
      outputs, c10d::OpType::SCATTER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_one_tensor("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1,
              "spyreccl reduce_scatter: expected one input list");
  check_all_spyre("reduce_scatter", inputs[0]);
  const HostReduction reduction =
      host_reduction("reduce_scatter", opts.reduceOp, outputs[0]);
  check_same_on_all_ranks("reduce_scatter", outputs[0]);
  std::vector<std::vector<at::Tensor>> host_inputs{
      stage_all_to_host(inputs[0])};
  auto host_outputs = host_buffers_like(outputs);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = reduction.op;
  auto work = transport_->reduce_scatter(host_outputs, host_inputs, host_opts);
  const int size = size_;
  return staged(
      work,
      [outputs, host_outputs, host_inputs, reduction, size]() mutable {
        copy_back(outputs, host_outputs);
        if (reduction.average) outputs[0].div_(size);
      },
      outputs, c10d::OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  check_spyre("reduce_scatter_tensor", input);
  check_spyre("reduce_scatter_tensor", output);
  const HostReduction reduction =
      host_reduction("reduce_scatter_tensor", opts.reduceOp, output);
  check_same_on_all_ranks("reduce_scatter_tensor", input);
  at::Tensor host_input = stage_to_host(input);
  at::Tensor host_output = host_buffer_like(output);
  c10d::ReduceScatterOptions host_opts = opts;
  host_opts.reduceOp = reduction.op;
  auto work =
      transport_->_reduce_scatter_base(host_output, host_input, host_opts);
  std::vector<at::Tensor> device_outputs{output};
  const int size = size_;
  return staged(
      work,
      [device_outputs, host_output, host_input, reduction, size]() mutable {
        copy_back(device_outputs, {host_output});
        if (reduction.average) device_outputs[0].div_(size);
      },
      device_outputs, c10d::OpType::_REDUCE_SCATTER_BASE);
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
  auto work = transport_->alltoall_base(
      host_output, host_input, output_split_sizes, input_split_sizes, opts);
  std::vector<at::Tensor> device_outputs{output};
  return staged(
      work,
      [device_outputs, host_output, host_input]() mutable {
        copy_back(device_outputs, {host_output});
      },
      device_outputs, c10d::OpType::ALLTOALL_BASE);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  check_one_tensor("send", tensors);
  auto hosts = stage_all_to_host(tensors);
  auto work = transport_->send(hosts, dst_rank, tag);
  // The lambda keeps the host buffer alive until the send completes.
  return staged(
      work, [hosts] {}, tensors, c10d::OpType::SEND);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  check_one_tensor("recv", tensors);
  auto hosts = host_buffers_like(tensors);
  auto work = transport_->recv(hosts, src_rank, tag);
  return staged(
      work, [tensors, hosts]() mutable { copy_back(tensors, hosts); }, tensors,
      c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> SpyrecclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  check_one_tensor("recv", tensors);
  auto hosts = host_buffers_like(tensors);
  auto work = transport_->recvAnysource(hosts, tag);
  return staged(
      work, [tensors, hosts]() mutable { copy_back(tensors, hosts); }, tensors,
      c10d::OpType::RECVANYSOURCE);
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
