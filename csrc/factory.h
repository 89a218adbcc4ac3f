// Creating spyre tensors (ATen): storage in a chosen device layout.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "device_layout.h"

namespace spyre::torch_glue {

// The layout a new storage gets for a tensor of `sizes`/`strides`: the
// default stick layout of the storage's memory order when the strides are
// dense (a permutation of contiguous), else a 1-D layout of its elements.
DeviceLayout storage_layout_for(at::IntArrayRef sizes, at::IntArrayRef strides,
                                uint32_t element_size);

// A contiguous spyre tensor whose storage has `layout`, whose host sizes must
// be `sizes` (a 0-d tensor's are [1]).
at::Tensor empty_with_layout(at::IntArrayRef sizes, at::ScalarType dtype,
                             c10::DeviceIndex device, DeviceLayout layout);
// `src` copied to spyre device `device` in `layout`.
at::Tensor to_device_with_layout(const at::Tensor& src, c10::DeviceIndex device,
                                 DeviceLayout layout);

// Whether the device can hold `dtype` (what get_device_capability reports).
bool is_supported_dtype(at::ScalarType dtype);
// Raises a clear error for dtypes the device cannot hold.
void check_supported_dtype(at::ScalarType dtype);

}  // namespace spyre::torch_glue
