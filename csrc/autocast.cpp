// Autocast for the spyre device (torch.autocast("spyre", dtype=...)), as
// PyTorch registers it for CUDA: every operator falls through the
// AutocastPrivateUse1 key, except PyTorch's own lists of operators that run
// in the lower precision (matmuls, linear, convolutions, RNN cells,
// attention), in float32 (exp, log, pow, norms, losses, softmax, sum, ...)
// or in the widest dtype of their inputs. The lists are PyTorch's
// (ATen/autocast_mode.h), so spyre autocasts exactly what CUDA autocasts.
#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace spyre::torch_glue {
namespace {

// PyTorch's list of operators redispatched with another signature names
// these types unqualified (it is written for namespace at).
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// CUDA refuses binary_cross_entropy under autocast (its float16 result is
// unsafe); spyre does the same with the same advice.
at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and "
              "torch.nn.BCELoss are unsafe to autocast on spyre (as on "
              "CUDA). Use torch.nn.functional.binary_cross_entropy_with_"
              "logits or torch.nn.BCEWithLogitsLoss, which are safe to "
              "autocast, or run the loss outside the autocast region.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SPYRE_LOWER_PRECISION(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(SPYRE_LOWER_PRECISION)
#undef SPYRE_LOWER_PRECISION

#define SPYRE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(SPYRE_FP32)
#undef SPYRE_FP32

#define SPYRE_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_FP32_SET_OPT_DTYPE)
#undef SPYRE_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(
      KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define SPYRE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(SPYRE_PROMOTE)
#undef SPYRE_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace
}  // namespace spyre::torch_glue
