// Tensor metadata of spyre tensors (torch._utils.set_tensor_metadata /
// get_tensor_metadata, which torch.save and torch.load use): PyTorch keeps
// the conj and neg bits itself and hands every other key to the backend's
// BackendMeta functions; without them the keys are dropped silently. The
// keys live in the TensorImpl's BackendMeta, so shallow copies (detach,
// views made by PyTorch's shallow_copy_and_detach) keep them too.
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace spyre::torch_glue {
namespace {

struct SpyreTensorMeta final : c10::BackendMeta {
  std::map<std::string, bool> values;

  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    auto copy = c10::make_intrusive<SpyreTensorMeta>();
    copy->values = values;
    return copy;
  }
};

void get_metadata(const at::Tensor& tensor,
                  std::unordered_map<std::string, bool>& metadata) {
  const auto* meta = dynamic_cast<const SpyreTensorMeta*>(
      tensor.unsafeGetTensorImpl()->get_backend_meta());
  if (meta == nullptr) return;
  for (const auto& [key, value] : meta->values) metadata[key] = value;
}

// Called with what is left after PyTorch took conj and neg; merges into the
// keys the tensor already has, as repeated calls on CPU would.
void set_metadata(const at::Tensor& tensor,
                  std::unordered_map<std::string, bool>& metadata) {
  if (metadata.empty()) return;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  auto meta = c10::make_intrusive<SpyreTensorMeta>();
  if (const auto* old =
          dynamic_cast<const SpyreTensorMeta*>(impl->get_backend_meta())) {
    meta->values = old->values;
  }
  for (const auto& [key, value] : metadata) meta->values[key] = value;
  impl->set_backend_meta(meta);
}

const bool g_registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1,
                                        &get_metadata, &set_metadata);
  return true;
}();

}  // namespace
}  // namespace spyre::torch_glue
