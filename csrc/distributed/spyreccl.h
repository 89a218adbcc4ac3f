// spyreccl: the torch.distributed (c10d) backend for spyre tensors.
//
// Every collective stages its spyre tensors through pinned host buffers and
// moves them with an inner transport backend (ProcessGroupGloo, created in
// Python on the same store, rank and size, because the torch wheel ships no
// gloo headers). The transport only moves bytes: reductions combine the
// ranks' contributions on the receiving device, as device programs on its
// stream. The staging copies model no time; each collective adds the
// modelled time of its traffic on the card-to-card link instead (the chip
// would move the bytes card to card), shown in device_time_stats()' link
// totals and in the profiler.
//
// Ordering: staging reads the spyre tensors with a blocking device-to-host
// copy, which waits for the current stream's work that produces them. A
// collective's Work copies its results back to the spyre tensors in wait()
// (or in the first is_completed() that finds the transport done), on the
// calling thread and its current stream, before returning.
#pragma once

#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "distributed/staged_work.h"

namespace spyre::torch_glue::distributed {

class SpyrecclBackend : public c10d::Backend {
 public:
  SpyrecclBackend(c10::intrusive_ptr<c10d::Backend> transport, int rank,
                  int size);

  const std::string getBackendName() const override { return "spyreccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  void setTimeout(std::chrono::milliseconds timeout) override;

 private:
  // Raises, on every rank alike, when the ranks' tensors for `op` differ in
  // dtype or shape (one small host all-gather of their descriptions).
  void check_same_on_all_ranks(const char* op, const at::Tensor& tensor);
  // all_reduce over more than two ranks (see spyreccl.cpp).
  c10::intrusive_ptr<c10d::Work> allreduce_in_shards(at::Tensor tensor,
                                                     c10d::ReduceOp op);
  // The device half of both reduce-scatter forms: `staged_input` (on the
  // host, one output's worth per rank) through a host all-to-all, then
  // this rank's shares combined into `output` on its device.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_staged(at::Tensor staged_input,
                                                       at::Tensor output,
                                                       c10d::ReduceOp op,
                                                       c10d::OpType type);
  c10::intrusive_ptr<c10d::Work> staged(c10::intrusive_ptr<c10d::Work> work,
                                        std::function<void()> finish,
                                        std::vector<at::Tensor> outputs,
                                        c10d::OpType type);

  c10::intrusive_ptr<c10d::Backend> transport_;
};

}  // namespace spyre::torch_glue::distributed
