#include "ops/launch_memo.h"

#include "device_layout.h"
#include "storage_ops.h"

namespace spyre::torch_glue::ops {
namespace {

void write_operand(kernels::KeyWriter& signature, const at::Tensor& tensor) {
  signature.add(tensor.scalar_type());
  signature.add_list(tensor.sizes()).add_list(tensor.strides());
  signature.add(image_offset(tensor));
  const DeviceLayout& layout = tensor_layout(tensor);
  signature.add(layout.element_size).add_list(layout.host_sizes);
  signature.add_list(layout.device_size).add_list(layout.dim_map);
  signature.add_list(layout.dim_step);
}

}  // namespace

bool write_launch_signature(kernels::KeyWriter& signature,
                            std::string_view name,
                            c10::ArrayRef<at::Tensor> inputs,
                            const at::Tensor& out,
                            c10::ArrayRef<kernels::ElementwiseStep> steps) {
  signature.add(out.device().index()).add(name);
  signature.add(static_cast<uint64_t>(steps.size()));
  for (const kernels::ElementwiseStep& step : steps) {
    if (step.kind == kernels::ElementwiseStep::Kind::kRandom) return false;
    step.append_key(signature);
  }
  signature.add(static_cast<uint64_t>(inputs.size()));
  for (const at::Tensor& input : inputs) {
    if (input.device() != out.device()) return false;
    const bool aliased = shares_memory(input, out);
    if (aliased &&
        !(input.sizes() == out.sizes() && input.strides() == out.strides() &&
          image_offset(input) == image_offset(out))) {
      return false;
    }
    write_operand(signature, input);
  }
  write_operand(signature, out);
  return true;
}

LaunchMemo& LaunchMemo::of_this_thread() {
  thread_local LaunchMemo memo;
  return memo;
}

const ProgramKey* LaunchMemo::find(KeyView signature) const {
  auto it = keys_.find(signature);
  return it == keys_.end() ? nullptr : &it->second;
}

void LaunchMemo::remember(KeyView signature, const ProgramKey& key) {
  if (keys_.size() >= kCapacity) keys_.clear();
  keys_.try_emplace(ProgramKey(signature), key);
}

}  // namespace spyre::torch_glue::ops
