// The device side of spyreccl's collectives: checks of what a caller
// passes, staging spyre tensors through pinned host buffers for the host
// transport and back, reductions of the ranks' contributions on the
// device, and the card-link time each collective models.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

namespace spyre::torch_glue::distributed {

// Clear errors for tensors a spyre collective cannot take.
void check_spyre(const char* op, const at::Tensor& tensor);
void check_one_tensor(const char* op, const std::vector<at::Tensor>& tensors);
void check_all_spyre(const char* op, const std::vector<at::Tensor>& tensors);
// Raises for reduce ops the device does not combine (PREMUL_SUM, AVG of
// integers).
void check_reduction(const char* op, c10d::ReduceOp requested,
                     const at::Tensor& sample);

// Dense pinned host buffers of the tensors' shapes and dtypes.
at::Tensor host_buffer_like(const at::Tensor& tensor);
std::vector<at::Tensor> host_buffers_like(
    const std::vector<at::Tensor>& tensors);
// Copies of the tensors in such buffers, once the device work producing
// them ran.
at::Tensor stage_to_host(const at::Tensor& tensor);
std::vector<at::Tensor> stage_all_to_host(
    const std::vector<at::Tensor>& tensors);
// `tensor` flattened into a buffer of `elements` (at least its numel),
// zeros after it.
at::Tensor stage_flat_padded_to_host(const at::Tensor& tensor,
                                     int64_t elements);
// Same-shaped tensors stacked into one buffer [tensors.size(), *shape].
at::Tensor stage_stacked_to_host(const std::vector<at::Tensor>& tensors);
// hosts[i] into devices[i], through the device tensors' strides.
void copy_back(std::vector<at::Tensor>& devices,
               const std::vector<at::Tensor>& hosts);

// Queues on `device`'s card the modelled link time of this rank's share of
// a collective: `sent` and `received` bytes (the link is full duplex).
void add_link_time(const at::Tensor& device, uint64_t sent, uint64_t received);
// Bytes of an all-to-all's `splits` (rows of dim 0 of `row_bytes` each;
// empty: even splits of `total_rows`) that go to or come from other ranks.
uint64_t peer_split_bytes(const std::vector<int64_t>& splits,
                          int64_t total_rows, uint64_t row_bytes, int rank,
                          int size);

// `received` (every rank's contribution of `out`'s shape, in rank order, on
// the host) onto the device, combined with `op` into `out` there.
void reduce_received_into(const at::Tensor& received, c10d::ReduceOp op,
                          at::Tensor& out);

}  // namespace spyre::torch_glue::distributed
