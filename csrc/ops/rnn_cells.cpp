// The fused LSTM and GRU cells PyTorch's nn.LSTM / nn.GRU (at::lstm,
// at::gru) call on accelerators (_thnn_fused_lstm_cell,
// _thnn_fused_gru_cell): PyTorch has them for CUDA only, so the CPU fallback
// cannot run them. Here they are the cells' arithmetic in ATen operators on
// spyre tensors (matmuls were done by the caller; these are adds, sigmoid,
// tanh and products), which run as device kernels or through the fallback.
// Registered for AutogradPrivateUse1 as well, so autograd differentiates the
// operators the cell is made of (PyTorch's backward of the fused cells is
// CUDA only too).
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/tanh.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace spyre::torch_glue::ops {
namespace {

at::Tensor gates_with_bias(const at::Tensor& gates,
                           const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? at::add(gates, *bias) : gates;
}

void check_gates(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                 const at::Tensor& state, int64_t count, const char* op) {
  TORCH_CHECK(
      input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(),
      "spyre: ", op,
      ": input_gates and hidden_gates must be 2-D and of one shape, "
      "got ",
      input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(state.dim() == 2 && state.size(0) == input_gates.size(0) &&
                  state.size(1) * count == input_gates.size(1),
              "spyre: ", op, ": the state must be [batch, ",
              input_gates.size(1) / count, "], got ", state.sizes());
}

// Returns (hy, cy, workspace); the workspace holds the activated gates
// [input, forget, cell, output] as CUDA's does.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  check_gates(input_gates, hidden_gates, cx, 4, "_thnn_fused_lstm_cell");
  const at::Tensor gates = gates_with_bias(
      gates_with_bias(at::add(input_gates, hidden_gates), input_bias),
      hidden_bias);
  const auto chunks = gates.chunk(4, 1);
  const at::Tensor in = at::sigmoid(chunks[0]);
  const at::Tensor forget = at::sigmoid(chunks[1]);
  const at::Tensor cell = at::tanh(chunks[2]);
  const at::Tensor out = at::sigmoid(chunks[3]);
  at::Tensor cy = at::add(at::mul(forget, cx), at::mul(in, cell));
  at::Tensor hy = at::mul(out, at::tanh(cy));
  at::Tensor workspace = at::cat({in, forget, cell, out}, 1);
  return {std::move(hy), std::move(cy), std::move(workspace)};
}

// Returns (hy, workspace); the workspace holds [reset, update, new, hidden
// new-gate part, hx] as CUDA's does.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  check_gates(input_gates, hidden_gates, hx, 3, "_thnn_fused_gru_cell");
  const auto in = gates_with_bias(input_gates, input_bias).chunk(3, 1);
  const auto hidden = gates_with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor reset = at::sigmoid(at::add(in[0], hidden[0]));
  const at::Tensor update = at::sigmoid(at::add(in[1], hidden[1]));
  const at::Tensor fresh = at::tanh(at::add(in[2], at::mul(reset, hidden[2])));
  // hy = (hx - new) * update + new
  at::Tensor hy = at::add(at::mul(at::sub(hx, fresh), update), fresh);
  at::Tensor workspace = at::cat({reset, update, fresh, hidden[2], hx}, 1);
  return {std::move(hy), std::move(workspace)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
}

}  // namespace
}  // namespace spyre::torch_glue::ops
