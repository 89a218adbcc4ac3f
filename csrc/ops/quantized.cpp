// Quantized tensors have no spyre representation (the device stores real
// floating point, integer and bool dtypes). Without these kernels the CPU
// fallback quantizes on the CPU and then fails inside PyTorch trying to make
// a quantized tensor on the device; instead each quantizing operator says
// so and what to do, and so does any operator that reaches the device's
// quantized dispatch key (making a quantized tensor on spyre:
// _empty_affine_quantized, or .to("spyre") of a quantized CPU tensor).
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <vector>

namespace spyre::torch_glue::ops {
namespace {

[[noreturn]] void refuse(const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "spyre: ", op,
      ": quantized tensors are not supported on spyre; quantize on the CPU "
      "(x.cpu()) and keep the quantized tensor there, or use torch.int8 / "
      "float16 tensors on spyre");
}

at::Tensor quantize_per_tensor(const at::Tensor&, double, int64_t,
                               at::ScalarType) {
  refuse("quantize_per_tensor");
}
at::Tensor quantize_per_tensor_qparams(const at::Tensor&, const at::Tensor&,
                                       const at::Tensor&, at::ScalarType) {
  refuse("quantize_per_tensor");
}
std::vector<at::Tensor> quantize_per_tensor_list(at::TensorList,
                                                 const at::Tensor&,
                                                 const at::Tensor&,
                                                 at::ScalarType) {
  refuse("quantize_per_tensor");
}
at::Tensor quantize_per_channel(const at::Tensor&, const at::Tensor&,
                                const at::Tensor&, int64_t, at::ScalarType) {
  refuse("quantize_per_channel");
}
at::Tensor quantize_per_tensor_dynamic(const at::Tensor&, at::ScalarType,
                                       bool) {
  refuse("quantize_per_tensor_dynamic");
}

void refuse_quantized_key(const c10::OperatorHandle& handle,
                          torch::jit::Stack*) {
  refuse(handle.schema().name().c_str());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(
      torch::CppFunction::makeFromBoxedFunction<&refuse_quantized_key>());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("quantize_per_tensor", TORCH_FN(quantize_per_tensor));
  m.impl("quantize_per_tensor.tensor_qparams",
         TORCH_FN(quantize_per_tensor_qparams));
  m.impl("quantize_per_tensor.tensors", TORCH_FN(quantize_per_tensor_list));
  m.impl("quantize_per_channel", TORCH_FN(quantize_per_channel));
  m.impl("quantize_per_tensor_dynamic", TORCH_FN(quantize_per_tensor_dynamic));
}

}  // namespace
}  // namespace spyre::torch_glue::ops
