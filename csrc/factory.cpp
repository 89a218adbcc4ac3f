// Factory, metadata and view ops that must be native for spyre tensors to
// exist: empty, empty_strided, resize_, set_, as_strided and the views built
// on it, fill_ and zero_.
#include "factory.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/MemoryFormat.h>
#include <c10/util/hash.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "device_state.h"
#include "ops/launch.h"
#include "spyre/runtime/stream.h"
#include "storage_ops.h"

namespace spyre::torch_glue {
namespace {

c10::DeviceIndex target_device(std::optional<c10::Device> device) {
  if (!device.has_value()) return current_device();
  TORCH_CHECK_VALUE(device->type() == kSpyre,
                    "spyre: expected a spyre device, got ", *device);
  return resolve_device_index(device->has_index() ? device->index() : -1);
}

at::Tensor tensor_on_storage(c10::DataPtr data, size_t nbytes,
                             at::IntArrayRef sizes, at::IntArrayRef strides,
                             at::ScalarType dtype) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, std::move(data),
                       device_allocator(), /*resizable=*/true);
  at::Tensor tensor = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return tensor;
}

// storage_layout_for, shared: eager ops allocate outputs of a few shapes over
// and over, and building a layout costs about as much as the rest of an
// allocation. Per thread (no lock); cleared when it grows past a bound.
std::shared_ptr<const DeviceLayout> shared_storage_layout(
    at::IntArrayRef sizes, at::IntArrayRef strides, uint32_t element_size) {
  constexpr size_t kMaxEntries = 256;
  thread_local std::unordered_map<std::vector<int64_t>,
                                  std::shared_ptr<const DeviceLayout>,
                                  c10::hash<std::vector<int64_t>>>
      cache;
  std::vector<int64_t> key(sizes.begin(), sizes.end());
  key.insert(key.end(), strides.begin(), strides.end());
  key.push_back(element_size);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxEntries) cache.clear();
  auto layout = std::make_shared<const DeviceLayout>(
      storage_layout_for(sizes, strides, element_size));
  cache.emplace(std::move(key), layout);
  return layout;
}

at::Tensor spyre_empty_strided(at::IntArrayRef sizes, at::IntArrayRef strides,
                               std::optional<at::ScalarType> dtype_opt,
                               std::optional<at::Layout> layout,
                               std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  TORCH_CHECK_VALUE(!pin_memory.value_or(false),
                    "spyre: only CPU tensors can be pinned (pin_memory=True)");
  TORCH_CHECK_VALUE(layout.value_or(at::kStrided) == at::kStrided,
                    "spyre: only strided tensors are supported, got layout ",
                    *layout);
  const at::ScalarType dtype =
      dtype_opt.value_or(at::get_default_dtype_as_scalartype());
  check_supported_dtype(dtype);
  const c10::DeviceIndex index = target_device(device);
  at::detail::check_size_nonnegative(sizes);
  const uint32_t element_size = c10::elementSize(dtype);
  const size_t nbytes =
      at::detail::computeStorageNbytes(sizes, strides, element_size);
  std::shared_ptr<const DeviceLayout> device_layout =
      shared_storage_layout(sizes, strides, element_size);
  TORCH_INTERNAL_ASSERT(device_layout->host_bytes() == nbytes || nbytes == 0);
  if (nbytes == 0) {
    const int64_t zero = 0;
    device_layout = std::make_shared<const DeviceLayout>(
        make_default_layout({&zero, 1}, element_size));
  }
  return tensor_on_storage(
      allocate_with_layout(index, std::move(device_layout)), nbytes, sizes,
      strides, dtype);
}

std::vector<int64_t> strides_for(at::IntArrayRef sizes,
                                 at::MemoryFormat format) {
  switch (format) {
    case at::MemoryFormat::ChannelsLast:
      return c10::get_channels_last_strides_2d(sizes);
    case at::MemoryFormat::ChannelsLast3d:
      return c10::get_channels_last_strides_3d(sizes);
    default: {
      const auto strides = c10::contiguous_strides(sizes);
      return {strides.begin(), strides.end()};
    }
  }
}

at::Tensor spyre_empty(at::IntArrayRef sizes,
                       std::optional<at::ScalarType> dtype,
                       std::optional<at::Layout> layout,
                       std::optional<at::Device> device,
                       std::optional<bool> pin_memory,
                       std::optional<at::MemoryFormat> memory_format) {
  const auto format = memory_format.value_or(at::MemoryFormat::Contiguous);
  TORCH_CHECK_VALUE(
      format != at::MemoryFormat::Preserve,
      "spyre: empty() does not take memory_format=torch.preserve_format");
  return spyre_empty_strided(sizes, strides_for(sizes, format), dtype, layout,
                             device, pin_memory);
}

const at::Tensor& spyre_resize(const at::Tensor& self, at::IntArrayRef sizes,
                               std::optional<at::MemoryFormat> memory_format) {
  at::detail::check_size_nonnegative(sizes);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  // As the CPU's resize_: a tensor that already has the sizes keeps its
  // strides (an out= view written through _copy_from_and_resize stays the
  // view; restriding it wrote elements outside it), unless a memory format
  // is asked for.
  if (self.sizes() != sizes) {
    const size_t element_size = self.element_size();
    const size_t needed = at::detail::computeStorageNbytesContiguous(
        sizes, element_size, impl->storage_offset());
    const c10::Storage& storage = impl->unsafe_storage();
    if (needed > storage.nbytes()) {
      std::vector<int64_t> host_sizes(sizes.begin(), sizes.end());
      if (impl->storage_offset() != 0)
        host_sizes = {static_cast<int64_t>(needed / element_size)};
      resize_storage(storage, needed,
                     make_default_layout(host_sizes, element_size));
    }
    impl->set_sizes_contiguous(sizes);
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& spyre_set_storage(at::Tensor& self, c10::Storage source,
                              int64_t offset, at::IntArrayRef sizes,
                              at::IntArrayRef strides) {
  at::native::checkSetStorage(self, source, offset, sizes, strides);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(offset);
  const size_t needed =
      offset * self.element_size() +
      at::detail::computeStorageNbytes(sizes, strides, self.element_size());
  if (needed > impl->unsafe_storage().nbytes()) {
    resize_storage_bytes(impl->unsafe_storage(), needed);
  }
  impl->set_sizes_and_strides(sizes, strides);
  return self;
}

at::Tensor& spyre_set_source_storage(at::Tensor& self, c10::Storage source) {
  const int64_t elements =
      static_cast<int64_t>(source.nbytes() / self.element_size());
  return spyre_set_storage(self, std::move(source), 0, {elements}, {1});
}

at::Tensor& spyre_set_source_tensor(at::Tensor& self,
                                    const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return spyre_set_storage(self, source.storage(), source.storage_offset(),
                           source.sizes(), source.strides());
}

at::Tensor& spyre_set_empty(at::Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0,
                     device_allocator()->allocate(0), device_allocator(), true);
  return spyre_set_storage(self, std::move(empty), 0, {0}, {});
}

// Device fill: a memory fill when one byte value repeats through the element
// (0, -1, bool, ...) and the tensor is its whole storage, else a fill
// program (any view); through the host only for dtypes no kernel handles
// and integers a double cannot hold.
at::Tensor& spyre_fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  at::Tensor host_value = at::full({}, value, self.options().device(at::kCPU));
  const double as_double = host_value.item<double>();
  const bool exact = at::isFloatingType(self.scalar_type()) ||
                     std::fabs(as_double) <= 9007199254740992.0;
  if (ops::has_device_dtype(self.scalar_type()) && exact &&
      !covers_storage(self)) {
    ops::launch_elementwise(
        "fill", {}, self,
        {kernels::fill_step(as_double, ops::device_dtype(self.scalar_type()))});
    return self;
  }
  const auto* bytes = static_cast<const uint8_t*>(host_value.data_ptr());
  const bool uniform = std::all_of(bytes, bytes + self.element_size(),
                                   [&](uint8_t b) { return b == bytes[0]; });
  if (uniform && covers_storage(self)) {
    const Allocation& allocation = allocation_of(self.storage());
    rt::Device* device = &runtime_device(allocation.device);
    auto work = [device, ptr = allocation.ptr, byte = bytes[0],
                 n = allocation.layout->device_bytes(),
                 keep = self.storage()]() {
      return device->fill(ptr, byte, n);
    };
    rt::Stream& stream = runtime_stream(current_stream(allocation.device));
    call_runtime([&] { stream.enqueue(work); });
    return self;
  }
  if (ops::has_device_dtype(self.scalar_type()) && exact) {
    ops::launch_elementwise(
        "fill", {}, self,
        {kernels::fill_step(as_double, ops::device_dtype(self.scalar_type()))});
    return self;
  }
  copy_tensor(host_value.expand(self.sizes()), self, false);
  return self;
}

at::Tensor& spyre_fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK_VALUE(value.dim() == 0,
                    "spyre: fill_ takes a 0-dimensional value tensor, got ",
                    value.dim(), " dimensions");
  return spyre_fill_scalar(self, value.item());
}

at::Tensor& spyre_zero(at::Tensor& self) { return spyre_fill_scalar(self, 0); }

// The name Python users know (torch.float64), not c10's (Double).
std::string python_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return "torch.float64";
    case at::kShort:
      return "torch.int16";
    case at::kComplexFloat:
      return "torch.complex64";
    case at::kComplexDouble:
      return "torch.complex128";
    case at::kComplexHalf:
      return "torch.complex32";
    default:
      return std::string("torch.") + c10::toString(dtype);
  }
}

}  // namespace

// Storage holds any real dtype whose elements tile a stick: the device's
// compute types (float16, bfloat16, float32, int8) and the others PyTorch
// itself needs on a device (float64 for printing, int64 indices, bool
// masks, ...), whose ops run through the CPU fallback. Complex, quantized
// and sub-byte dtypes have no device representation.
bool is_supported_dtype(at::ScalarType dtype) {
  const bool real =
      at::isFloatingType(dtype) || at::isIntegralType(dtype, true);
  return real && !at::isQIntType(dtype) && !at::isBitsType(dtype) &&
         (128 % c10::elementSize(dtype) == 0) && c10::elementSize(dtype) >= 1;
}

void check_supported_dtype(at::ScalarType dtype) {
  TORCH_CHECK_TYPE(is_supported_dtype(dtype), "spyre: dtype ",
                   python_dtype_name(dtype),
                   " is not supported on the spyre device (it stores real "
                   "floating point, integer and bool dtypes; compute runs in "
                   "float16, bfloat16, float32 and int8)");
}

DeviceLayout storage_layout_for(at::IntArrayRef sizes, at::IntArrayRef strides,
                                uint32_t element_size) {
  // Memory order of the dims that matter (size-1 dims have no order):
  // outermost (largest stride) first.
  std::vector<int64_t> order;
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    if (sizes[i] != 1) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return strides[a] > strides[b];
  });
  std::vector<int64_t> host_sizes;
  for (int64_t dim : order) host_sizes.push_back(sizes[dim]);
  const auto dense = c10::contiguous_strides(host_sizes);
  bool is_dense = true;
  for (size_t i = 0; i < order.size(); ++i) {
    if (strides[order[i]] != dense[i]) is_dense = false;
  }
  if (!is_dense) {
    const int64_t elements = static_cast<int64_t>(
        at::detail::computeStorageNbytes(sizes, strides, element_size) /
        element_size);
    return make_default_layout({&elements, 1}, element_size);
  }
  return make_default_layout(host_sizes, element_size);
}

at::Tensor empty_with_layout(at::IntArrayRef sizes, at::ScalarType dtype,
                             c10::DeviceIndex device, DeviceLayout layout) {
  check_supported_dtype(dtype);
  const DeviceLayout shape_only =
      make_default_layout(sizes, layout.element_size);
  TORCH_CHECK_VALUE(
      layout.squeezed_host_sizes() == shape_only.squeezed_host_sizes() &&
          layout.element_size == c10::elementSize(dtype),
      "spyre: ", layout.to_string(), " does not fit a tensor of size ", sizes,
      " and dtype ", dtype);
  const size_t nbytes = layout.host_bytes();
  return tensor_on_storage(allocate_with_layout(device, std::move(layout)),
                           nbytes, sizes, c10::contiguous_strides(sizes),
                           dtype);
}

at::Tensor to_device_with_layout(const at::Tensor& src, c10::DeviceIndex device,
                                 DeviceLayout layout) {
  at::Tensor dst =
      empty_with_layout(src.sizes(), src.scalar_type(),
                        resolve_device_index(device), std::move(layout));
  copy_tensor(src, dst, false);
  return dst;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(spyre_empty));
  m.impl("empty_strided", TORCH_FN(spyre_empty_strided));
  m.impl("resize_", TORCH_FN(spyre_resize));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(spyre_set_storage));
  m.impl("set_.source_Storage", TORCH_FN(spyre_set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(spyre_set_source_tensor));
  m.impl("set_", TORCH_FN(spyre_set_empty));
  m.impl("fill_.Scalar", TORCH_FN(spyre_fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(spyre_fill_tensor));
  m.impl("zero_", TORCH_FN(spyre_zero));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to));
}

}  // namespace spyre::torch_glue
