// Moving tensor data between the host and spyre storage (ATen).
//
// A spyre storage's bytes, as PyTorch sees them, form its host image: a flat
// byte array of storage.nbytes(). On the device the image is kept in the
// storage's stick layout (allocator.h). Writing a view that does not cover
// its storage writes only the view's own bytes (Device::copy_runs_to_device),
// so padding and what other threads or streams write to the rest survive;
// reading one reads its own bytes when it is a small part of the storage,
// else converts the whole layout to the image once and reads the view from
// it on the host.
#pragma once

#include <ATen/core/Tensor.h>

#include "device_layout.h"

namespace spyre::torch_glue {

// The storage's host image as a CPU uint8 tensor (waits for the device).
at::Tensor host_image(const c10::Storage& storage);
// Uploads `image` (storage.nbytes() bytes) on the device's current stream,
// packed into the storage's layout as it is copied. Waits for it even when
// `non_blocking`, as a CUDA copy from pageable memory: nothing would keep a
// raw `image` alive and unchanged for the caller.
void write_image(const c10::Storage& storage, const uint8_t* image,
                 bool non_blocking);
// Replaces the storage's memory by `new_bytes` in `layout`, keeping the
// common prefix of the old image.
void resize_storage(const c10::Storage& storage, size_t new_bytes,
                    DeviceLayout layout);
void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes);

// dst.copy_(src) for any mix of spyre and CPU tensors; src broadcasts.
void copy_tensor(const at::Tensor& src, const at::Tensor& dst,
                 bool non_blocking);

// While one lives, the host<->device copies this thread starts stage a
// card-to-card transfer that the emulator cannot make directly (between
// processes, through the collectives' host transport): they move the bytes
// and model no time, because on the chip the data would go straight over
// the card link, whose time the collective adds once (record_card_link).
class CardLinkStaging {
 public:
  CardLinkStaging();
  ~CardLinkStaging();
  CardLinkStaging(const CardLinkStaging&) = delete;
  CardLinkStaging& operator=(const CardLinkStaging&) = delete;
};
// Queues on `device`'s current stream the modelled time of one transfer of
// `bytes` over its card link (chip costs' card_link_ns), counted in the
// link totals of torch.spyre.device_time_stats().
void record_card_link(c10::DeviceIndex device, uint64_t bytes);

// The layout of the allocation holding `tensor`'s storage.
const DeviceLayout& tensor_layout(const at::Tensor& tensor);
// Where `tensor`'s storage begins in that layout's host image, in elements
// of its dtype: 0 but for a storage PyTorch wrapped around a view of a spyre
// tensor (torch.from_dlpack), which shares that tensor's allocation.
int64_t storage_window(const at::Tensor& tensor);
// Where `tensor`'s element 0 is in that host image, the offset the layout
// addresses: its storage offset within its storage's window.
inline int64_t image_offset(const at::Tensor& tensor) {
  return storage_window(tensor) + tensor.storage_offset();
}
// Whether two spyre tensors' storages share device memory: the same
// storage, or storages PyTorch wrapped around one allocation (DLPack), which
// c10::Storage::is_alias_of does not see.
bool shares_memory(const at::Tensor& a, const at::Tensor& b);
// True when `tensor` is the whole of its allocation, contiguous, from
// element 0.
bool covers_storage(const at::Tensor& tensor);

}  // namespace spyre::torch_glue
