// The CPU fallback for every operator without a spyre kernel: counted per
// operator, warned about once, an error in strict mode. Device kernels are
// registered per operator family in their own files with
// TORCH_LIBRARY_IMPL(aten, PrivateUse1, m); a registered kernel takes
// precedence over this fallback.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

#include "device_state.h"
#include "fallback_stats.h"
#include "generator.h"
#include "ops/launch.h"
#include "ops/operands.h"

namespace spyre::torch_glue {
namespace {

bool is_generator_argument(const c10::Argument& argument) {
  const c10::TypePtr& type = argument.type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (auto optional = type->cast<c10::OptionalType>()) {
    return optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
  }
  return false;
}

// The device the operator runs for: its first spyre tensor argument's.
c10::DeviceIndex operator_device(c10::ArrayRef<c10::IValue> arguments) {
  for (const c10::IValue& value : arguments) {
    if (value.isTensor() && value.toTensor().is_privateuseone()) {
      return value.toTensor().device().index();
    }
    if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList().vec()) {
        if (tensor.is_privateuseone()) return tensor.device().index();
      }
    }
  }
  return current_device();
}

uint64_t largest_tensor(c10::ArrayRef<c10::IValue> arguments) {
  uint64_t largest = 1;
  for (const c10::IValue& value : arguments) {
    if (value.isTensor()) {
      largest = std::max<uint64_t>(largest, value.toTensor().numel());
    }
  }
  return largest;
}

// Random operators draw from the spyre generator (given, or the device's
// default), through a CPU generator seeded from its (seed, offset), so spyre
// seeds decide the numbers of the fallback too.
void substitute_generators(const c10::FunctionSchema& schema,
                           torch::jit::Stack* stack) {
  const size_t count = schema.arguments().size();
  auto arguments = torch::jit::last(*stack, count);
  for (size_t i = 0; i < count; ++i) {
    if (!is_generator_argument(schema.arguments()[i])) continue;
    c10::IValue& value = (*stack)[stack->size() - count + i];
    at::Generator spyre;
    if (value.isNone()) {
      spyre = default_generator(operator_device(arguments));
    } else if (value.isGenerator() &&
               value.toGenerator().device().type() == kSpyre) {
      spyre = value.toGenerator();
    } else {
      continue;
    }
    value = c10::IValue(cpu_generator_for(spyre, largest_tensor(arguments)));
  }
}

// PyTorch's own kernels reject mixed devices; the CPU fallback would
// silently accept them, so check as a device kernel would: every tensor on
// one spyre device, CPU tensors only as 0-dim scalars.
void check_same_device(const std::string& op_name,
                       c10::ArrayRef<c10::IValue> arguments) {
  std::optional<c10::Device> device;
  auto check = [&](const at::Tensor& tensor) {
    if (!tensor.defined()) return;
    if (tensor.is_cpu()) {
      TORCH_CHECK_VALUE(tensor.dim() == 0, "spyre: ", op_name,
                        ": expected all tensors on the same device, got a CPU "
                        "tensor of size ",
                        tensor.sizes(), " (move it with .to(\"spyre\"))");
      return;
    }
    if (!device) device = tensor.device();
    TORCH_CHECK_VALUE(tensor.device() == *device, "spyre: ", op_name,
                      ": expected all tensors on the same device, got ",
                      *device, " and ", tensor.device());
  };
  for (const c10::IValue& value : arguments) {
    if (value.isTensor()) check(value.toTensor());
    if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList().vec()) check(tensor);
    }
  }
}

// The first spyre tensor argument of a dtype the device computes nothing in
// (float64, complex, int16, ...), if any.
std::optional<at::ScalarType> dtype_without_kernels(
    c10::ArrayRef<c10::IValue> arguments) {
  auto kernel_less = [](const at::Tensor& t) {
    return t.defined() && t.is_privateuseone() &&
           !ops::has_device_dtype(t.scalar_type());
  };
  for (const c10::IValue& value : arguments) {
    if (value.isTensor() && kernel_less(value.toTensor())) {
      return value.toTensor().scalar_type();
    }
    if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorList().vec()) {
        if (kernel_less(tensor)) return tensor.scalar_type();
      }
    }
  }
  return std::nullopt;
}

// Said once per dtype, not once per operator: printing one float tensor
// alone goes through half a dozen float64 operators.
void warn_dtype_runs_on_cpu(at::ScalarType dtype, const std::string& op_name) {
  static std::array<std::atomic<bool>,
                    static_cast<size_t>(at::ScalarType::NumOptions)>
      warned{};
  if (warned[static_cast<size_t>(dtype)].exchange(true)) return;
  TORCH_WARN("spyre: the device computes nothing in ", dtype, ", so ", dtype,
             " operators (", op_name,
             " the first) run on the CPU (fallback, counted in "
             "torch.spyre.fallback_stats()); use float32, float16 or "
             "bfloat16 to compute on the device");
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  const std::string op_name = name.overload_name.empty()
                                  ? name.name
                                  : name.name + "." + name.overload_name;
  const bool first = record_fallback(op_name);
  TORCH_CHECK(!strict_mode(), "spyre: ", op_name,
              " has no spyre kernel and strict mode forbids the CPU fallback "
              "(unset SPYRE_STRICT or call torch.spyre.set_strict(False))");
  const auto arguments =
      torch::jit::last(*stack, op.schema().arguments().size());
  if (const auto dtype = dtype_without_kernels(arguments)) {
    warn_dtype_runs_on_cpu(*dtype, op_name);
  } else if (first) {
    TORCH_WARN("spyre: ", op_name,
               " has no spyre kernel; it runs on the CPU (fallback, counted in "
               "torch.spyre.fallback_stats())");
  }
  check_same_device(op_name, arguments);
  substitute_generators(op.schema(), stack);
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

// Ops whose CompositeExplicitAutograd kernel would run for spyre (taking
// precedence over the fallback above) but refuses any device other than
// CPU, CUDA and XPU: sent to the counted CPU fallback by name.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mode.values",
         torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

}  // namespace spyre::torch_glue
