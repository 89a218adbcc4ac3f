// Copies between host and device, device and device, and across devices,
// honouring storage offsets and strides of views on both sides.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <ATen/record_function.h>
#include <torch/library.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "allocator.h"
#include "device_state.h"
#include "ops/launch.h"
#include "pinned_host.h"
#include "spyre/runtime/stream.h"
#include "storage_ops.h"

namespace spyre::torch_glue {
namespace {

// A host buffer left uninitialised: whoever takes one writes every byte of
// it before it is read (zeroing 64 MiB first costs as much as a copy).
// Its capacity may exceed size() when it comes from the StagingPool.
class Bytes {
 public:
  explicit Bytes(size_t capacity)
      : data_(std::make_unique_for_overwrite<uint8_t[]>(capacity)),
        size_(capacity),
        capacity_(capacity) {}
  uint8_t* data() { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  void set_size(size_t size) { size_ = size; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_;
  size_t capacity_;
};

// Host buffers of large copies (whole images of views read from the
// device), reused: a fresh buffer of many MiB costs
// the kernel's page faults and zeroing, about a copy's worth of time, and
// freeing it returns the pages (so every copy paid it again). At most
// kMaxFree buffers of at most kMaxFreeBytes in all are kept.
class StagingPool {
 public:
  static constexpr size_t kPooledFrom = size_t{1} << 20;  // smaller: malloc
  static constexpr size_t kMaxFree = 4;
  static constexpr size_t kMaxFreeBytes = size_t{256} << 20;

  static StagingPool& get() {
    static StagingPool* pool = new StagingPool();  // outlives queue threads
    return *pool;
  }

  // A buffer of `size` bytes, back in the pool when the last owner drops it.
  std::shared_ptr<Bytes> take(size_t size) {
    if (size < kPooledFrom) return std::make_shared<Bytes>(size);
    std::unique_ptr<Bytes> buffer = reuse(size);
    if (!buffer) buffer = std::make_unique<Bytes>(size);
    buffer->set_size(size);
    return std::shared_ptr<Bytes>(buffer.release(), [](Bytes* released) {
      StagingPool::get().give_back(std::unique_ptr<Bytes>(released));
    });
  }

 private:
  // The smallest free buffer that holds `size` without wasting more than
  // its size again.
  std::unique_ptr<Bytes> reuse(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const size_t capacity = (*it)->capacity();
      if (capacity >= size && capacity / 2 <= size &&
          (best == free_.end() || capacity < (*best)->capacity())) {
        best = it;
      }
    }
    if (best == free_.end()) return nullptr;
    std::unique_ptr<Bytes> buffer = std::move(*best);
    free_.erase(best);
    free_bytes_ -= buffer->capacity();
    return buffer;
  }

  void give_back(std::unique_ptr<Bytes> buffer) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_bytes_ += buffer->capacity();
    free_.push_back(std::move(buffer));
    while (free_.size() > kMaxFree || free_bytes_ > kMaxFreeBytes) {
      free_bytes_ -= free_.front()->capacity();  // oldest first
      free_.erase(free_.begin());
    }
  }

  std::mutex mutex_;
  std::vector<std::unique_ptr<Bytes>> free_;  // oldest first
  size_t free_bytes_ = 0;
};

std::shared_ptr<Bytes> staging_buffer(size_t size) {
  return StagingPool::get().take(size);
}

// Whether this thread's copies stage a card-to-card transfer (CardLinkStaging).
thread_local int card_link_staging_depth = 0;

// Copy work that adds its modelled time and `bytes` (device bytes moved) to
// torch.spyre.device_time_stats() once it ran. Staging for a card link
// (CardLinkStaging) moves the bytes and models no time.
template <typename Copy>
rt::Work counted_copy(uint64_t bytes, Copy copy) {
  if (card_link_staging_depth > 0) {
    return [copy = std::move(copy)]() {
      copy();
      return 0.0;
    };
  }
  return [bytes, copy = std::move(copy)]() {
    const double ns = copy();
    ops::record_copy_time(ns, bytes);
    return ns;
  };
}

// Card-to-card transfer work: its modelled time and the `bytes` it put on
// the link go to the link totals of torch.spyre.device_time_stats().
template <typename Transfer>
rt::Work counted_link(uint64_t bytes, Transfer transfer) {
  return [bytes, transfer = std::move(transfer)]() {
    const double ns = transfer();
    ops::record_link_time(ns, bytes);
    return ns;
  };
}

// A torch.profiler range around a copy (free when no profiler is on).
class CopyRange {
 public:
  explicit CopyRange(std::string_view name)
      : range_(at::RecordScope::FUNCTION) {
    if (range_.isActive()) range_.before(name);
  }

 private:
  at::RecordFunction range_;
};

rt::Stream& stream_of(c10::DeviceIndex device) {
  return runtime_stream(current_stream(device));
}

void wait_for(rt::Stream& stream) {
  call_runtime([&] { stream.synchronize(); });
}

// A wait Ctrl-C may end: only for work that keeps alive everything it
// touches, since it runs on after the wait is abandoned.
void wait_interruptibly(rt::Stream& stream) {
  call_runtime([&] { stream.synchronize(interrupt_check()); });
}

// A CPU tensor reading or writing `view`'s elements inside `image`.
at::Tensor view_in_image(const at::Tensor& view, const at::Tensor& image) {
  const int64_t elements = image.numel() / view.element_size();
  return at::from_blob(image.data_ptr(), {elements},
                       at::TensorOptions().dtype(view.scalar_type()))
      .as_strided(view.sizes(), view.strides(), view.storage_offset());
}

// Where `view`'s elements live in its storage's device buffer, in the
// view's row-major order (kernels::view_runs), shared with queued work.
using Runs = std::vector<rt::Device::CopyRun>;
std::shared_ptr<const Runs> runs_of(const at::Tensor& view) {
  try {
    return std::make_shared<const Runs>(kernels::view_runs(
        tensor_layout(view), view.sizes(), view.strides(), image_offset(view)));
  } catch (const std::invalid_argument& error) {
    TORCH_CHECK_INDEX(false, "spyre: ", error.what());
  }
}

// A view read from the device by its own bytes when it is this small a part
// of its storage (in bytes); a larger one through the whole image, which
// converts in one pass rather than one run at a time.
constexpr int64_t kRunsReadFraction = 64;

// What a queued copy needs of a tensor without holding the tensor itself:
// work can finish on the queue's thread after Python dropped the tensor, and
// releasing a Python-owned tensor there would need the GIL.
struct Geometry {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset;
  at::ScalarType dtype;

  // `t` from element `offset` of the buffer it will be seen over (its
  // storage offset over its storage).
  Geometry(const at::Tensor& t, int64_t offset)
      : sizes(t.sizes().vec()),
        strides(t.strides().vec()),
        offset(offset),
        dtype(t.scalar_type()) {}

  // The tensor over `base`, a pointer to element 0 of that buffer.
  at::Tensor over(void* base, int64_t storage_elements) const {
    return at::from_blob(base, {storage_elements},
                         at::TensorOptions().dtype(dtype))
        .as_strided(sizes, strides, offset);
  }
};

// The device image at `ptr` into the host image `image`, converted from the
// stick layout as it is copied (one pass). Runs on a queue.
double download_image(rt::Device& device, rt::DevicePtr ptr,
                      const DeviceLayout& layout, uint8_t* image) {
  return device.copy_to_host_unpacked(
      ptr, layout.device_bytes(),
      [&](const uint8_t* in, uint64_t begin, uint64_t end) {
        unpack_range(layout, in, begin, end, image);
      });
}

// Queues the upload of `image` (the storage's whole host image), converted
// to the stick layout as it is copied (one pass), on the device's current
// stream, and waits for it when `wait`. The work reads `image` when it runs;
// without `wait`, `image_owner` keeps the image alive until then and the
// caller must leave it unchanged until the stream reaches the copy (as CUDA
// asks of a non_blocking copy from pinned memory).
void upload_image(const c10::Storage& storage, const uint8_t* image,
                  std::shared_ptr<const void> image_owner, bool wait) {
  const Allocation& allocation = allocation_of(storage);
  if (storage.nbytes() == 0) return;
  rt::Device* device = &runtime_device(allocation.device);
  const uint64_t bytes = allocation.layout->device_bytes();
  auto work = [device, layout = allocation.layout, ptr = allocation.ptr, bytes,
               image, storage, image_owner = std::move(image_owner)]() {
    return device->copy_to_device_packed(
        ptr, bytes, [&](uint8_t* out, uint64_t begin, uint64_t end) {
          pack_range(*layout, image, begin, end, out);
        });
  };
  rt::Stream& stream = stream_of(allocation.device);
  call_runtime([&] { stream.enqueue(counted_copy(bytes, std::move(work))); });
  if (wait) wait_for(stream);
}

// A CPU tensor's storage held by queued work (see Geometry on why not the
// tensor).
std::shared_ptr<const void> hold(const at::Tensor& tensor) {
  return std::make_shared<const c10::Storage>(tensor.storage());
}

void copy_to_host(const at::Tensor& src, const at::Tensor& dst,
                  bool non_blocking) {
  const c10::Storage storage = src.storage();
  const Allocation& allocation = allocation_of(storage);
  if (storage.nbytes() == 0 || src.numel() == 0) return;
  rt::Device* device = &runtime_device(allocation.device);
  const auto layout = allocation.layout;
  const rt::DevicePtr ptr = allocation.ptr;
  const bool straight = covers_storage(src) && dst.is_contiguous() &&
                        dst.nbytes() == storage.nbytes();
  // A small view (x[5].item() of a large tensor) reads only its own bytes.
  const std::shared_ptr<const Runs> runs =
      !straight && static_cast<int64_t>(src.nbytes()) * kRunsReadFraction <=
                       static_cast<int64_t>(storage.nbytes())
          ? runs_of(src)
          : nullptr;
  // The work keeps both storages alive until it has run.
  const c10::Storage dst_storage = dst.storage();
  auto work = [device, layout, ptr, storage, dst_storage, straight, runs,
               src_geometry = Geometry(src, image_offset(src)),
               dst_geometry = Geometry(dst, dst.storage_offset()),
               dst_data = static_cast<uint8_t*>(dst.data_ptr())]() {
    if (straight) return download_image(*device, ptr, *layout, dst_data);
    const int64_t dst_elements = static_cast<int64_t>(
        dst_storage.nbytes() / c10::elementSize(dst_geometry.dtype));
    const at::Tensor to =
        dst_geometry.over(dst_storage.mutable_data(), dst_elements);
    if (runs) {
      // The view's values in its row-major order, then into dst's places.
      const std::shared_ptr<Bytes> values =
          staging_buffer(static_cast<size_t>(to.numel()) * to.element_size());
      const double ns = device->copy_runs_to_host(values->data(), ptr, *runs);
      to.copy_(at::from_blob(values->data(), to.sizes(),
                             at::TensorOptions().dtype(src_geometry.dtype)));
      return ns;
    }
    // A view: the whole image, then the view's elements from it.
    const std::shared_ptr<Bytes> image = staging_buffer(layout->host_bytes());
    const double ns = download_image(*device, ptr, *layout, image->data());
    const int64_t element = c10::elementSize(src_geometry.dtype);
    const at::Tensor from = src_geometry.over(
        image->data(), static_cast<int64_t>(image->size()) / element);
    to.copy_(from);
    return ns;
  };
  rt::Stream& stream = stream_of(allocation.device);
  const bool async =
      non_blocking &&
      at::detail::getPrivateUse1Hooks().isPinnedPtr(dst.data_ptr());
  call_runtime([&] {
    stream.enqueue(counted_copy(layout->device_bytes(), std::move(work)));
  });
  if (!async) wait_interruptibly(stream);
}

// Writes the values of `src` (a CPU tensor of dst's dtype and shape) into
// `dst`, a view of part of its storage, touching only the view's bytes: the
// rest of the storage may be written meanwhile by other threads, streams or
// kernels, and a write-back of the whole image would undo their writes.
// Asynchronous only for a non_blocking copy from pinned memory.
void write_view(const at::Tensor& src, const at::Tensor& dst,
                bool non_blocking) {
  const Allocation& allocation = allocation_of(dst.storage());
  const std::shared_ptr<const Runs> runs = runs_of(dst);
  const at::Tensor values = src.contiguous();  // the view's row-major order
  const bool async =
      non_blocking &&
      at::detail::getPrivateUse1Hooks().isPinnedPtr(values.data_ptr());
  rt::Device* device = &runtime_device(allocation.device);
  auto work = [device, ptr = allocation.ptr, runs, storage = dst.storage(),
               data = values.data_ptr(), values_owner = hold(values)]() {
    return device->copy_runs_to_device(ptr, *runs, data);
  };
  rt::Stream& stream = stream_of(allocation.device);
  call_runtime(
      [&] { stream.enqueue(counted_copy(values.nbytes(), std::move(work))); });
  if (!async) wait_for(stream);
}

// Host -> device from a CPU tensor of dst's dtype and shape. A non_blocking
// copy from pinned memory (or from an image of our own) is converted when
// the stream runs it; from pageable user memory it is synchronous, as in
// CUDA, so the caller may reuse the source at once.
void copy_from_host(const at::Tensor& src, const at::Tensor& dst,
                    bool non_blocking) {
  if (dst.numel() == 0) return;
  if (covers_storage(dst)) {
    const at::Tensor image = src.contiguous();
    const bool async =
        non_blocking &&
        at::detail::getPrivateUse1Hooks().isPinnedPtr(image.data_ptr());
    upload_image(dst.storage(), static_cast<const uint8_t*>(image.data_ptr()),
                 async ? hold(image) : nullptr, !async);
    return;
  }
  write_view(src, dst, non_blocking);
}

// At most this many byte copies stand for a device copy program; each run
// a whole stick or more (copying single elements is a program's work).
constexpr size_t kMaxByteCopies = 64;
constexpr uint64_t kMinByteCopyBytes = 128;

// A same-dtype copy on one device as plain device-to-device byte copies,
// when it needs no conversion: the whole buffer between tensors of one
// placement, or a few runs between views that are boxes of their storages
// (a narrow of a KV cache, a cat's slice), with no program built for each
// new shape. nullopt when it needs a device program.
std::optional<std::vector<kernels::PairedRun>> byte_copies(
    const at::Tensor& src, const at::Tensor& dst) {
  if (src.device() != dst.device() || src.scalar_type() != dst.scalar_type()) {
    return std::nullopt;
  }
  if (covers_storage(src) && covers_storage(dst) &&
      tensor_layout(src).same_placement(tensor_layout(dst))) {
    const uint64_t bytes = tensor_layout(dst).device_bytes();
    return std::vector<kernels::PairedRun>{{0, 0, bytes}};
  }
  auto runs = kernels::paired_box_runs(
      tensor_layout(src), {src.sizes(), src.strides(), image_offset(src)},
      tensor_layout(dst), {dst.sizes(), dst.strides(), image_offset(dst)},
      kMaxByteCopies);
  if (runs && runs->size() > 1 && runs->front().bytes < kMinByteCopyBytes) {
    return std::nullopt;
  }
  return runs;
}

// Across cards: the source's whole image goes over the card-to-card link
// (Device::copy_to_peer) into a tensor of the same placement on the
// destination card, or straight into dst when dst is one; what is left (a
// view, a dtype) is then a copy on the destination card. As CUDA's peer
// copies, the transfer runs on the source card's current stream after the
// destination's current stream reached the call, and the destination's
// stream waits for it. False when the layouts leave no such transfer.
void copy_on_device(const at::Tensor& src, const at::Tensor& dst,
                    bool non_blocking);

bool copy_across_cards(const at::Tensor& src, const at::Tensor& dst,
                       bool non_blocking) {
  const at::Tensor whole =
      covers_storage(src) ? src : src.clone(at::MemoryFormat::Contiguous);
  const bool direct = covers_storage(dst) &&
                      dst.scalar_type() == whole.scalar_type() &&
                      dst.sizes() == whole.sizes() &&
                      tensor_layout(whole).same_placement(tensor_layout(dst));
  const at::Tensor landed =
      direct ? dst
             : at::empty(whole.sizes(), whole.options().device(dst.device()));
  if (!tensor_layout(whole).same_placement(tensor_layout(landed))) return false;
  const Allocation& from = allocation_of(whole.storage());
  const Allocation& to = allocation_of(landed.storage());
  rt::Device* src_device = &runtime_device(from.device);
  rt::Device* dst_device = &runtime_device(to.device);
  const uint64_t bytes = to.layout->device_bytes();
  rt::Stream& src_stream = stream_of(from.device);
  rt::Stream& dst_stream = stream_of(to.device);
  auto transfer = [src_device, dst_device, from_ptr = from.ptr, to_ptr = to.ptr,
                   bytes,
                   keep = std::make_pair(whole.storage(), landed.storage())]() {
    return src_device->copy_to_peer(*dst_device, to_ptr, from_ptr, bytes);
  };
  call_runtime([&] {
    rt::Event destination_free;
    destination_free.record(dst_stream);
    destination_free.block(src_stream);
    src_stream.enqueue(counted_link(bytes, std::move(transfer)));
    rt::Event landed_event;
    landed_event.record(src_stream);
    landed_event.block(dst_stream);
  });
  if (!direct) {
    copy_on_device(landed, dst, non_blocking);
  } else if (!non_blocking) {
    wait_for(dst_stream);
  }
  return true;
}

void copy_on_device(const at::Tensor& src, const at::Tensor& dst,
                    bool non_blocking) {
  if (dst.numel() == 0) return;
  if (auto runs = byte_copies(src, dst)) {
    const Allocation& from = allocation_of(src.storage());
    const Allocation& to = allocation_of(dst.storage());
    rt::Device* device = &runtime_device(to.device);
    uint64_t bytes = 0;
    for (const kernels::PairedRun& run : *runs) bytes += run.bytes;
    auto work = [device, from_ptr = from.ptr, to_ptr = to.ptr,
                 runs = std::move(*runs),
                 keep = std::make_pair(src.storage(), dst.storage())]() {
      double ns = 0;
      for (const kernels::PairedRun& run : runs) {
        ns += device->copy_on_device(to_ptr + run.dst_offset,
                                     from_ptr + run.src_offset, run.bytes);
      }
      return ns;
    };
    // Ordered on the stream like a kernel; the host does not wait (as a
    // device-to-device copy_ on CUDA): whatever reads the result on the host
    // waits for the stream then.
    rt::Stream& stream = stream_of(to.device);
    call_runtime([&] { stream.enqueue(counted_copy(bytes, std::move(work))); });
    return;
  }
  // Views, layouts and dtype conversions on one device: a device program,
  // ordered on the stream like any kernel.
  if (src.device() == dst.device() &&
      ops::has_device_dtype(src.scalar_type()) &&
      ops::has_device_dtype(dst.scalar_type())) {
    ops::device_copy(src, dst);
    return;
  }
  if (src.device() != dst.device() && copy_across_cards(src, dst, non_blocking))
    return;
  // Dtypes the device cannot convert: through the host image of the source
  // (which waits for the source's device).
  at::Tensor image = host_image(src.storage());
  at::Tensor values =
      view_in_image(src, image).to(dst.scalar_type()).expand(dst.sizes());
  copy_from_host(values, dst, non_blocking);
}

at::Tensor spyre_copy_from(const at::Tensor& self, const at::Tensor& dst,
                           bool non_blocking) {
  TORCH_CHECK_VALUE(self.is_privateuseone() || dst.is_privateuseone(),
                    "spyre: _copy_from needs a spyre tensor");
  if (dst.is_privateuseone() && self.is_privateuseone()) {
    // As copy_ on the CPU: dst may not write an element twice, nor read
    // from a part of itself (x[1:].copy_(x[:-1]) depends on the loop order).
    if (!self.is_same(dst)) {
      at::assert_no_internal_overlap(dst);
      at::assert_no_partial_overlap(dst, self);
    }
    const CopyRange range("spyre::copy_device_to_device");
    copy_on_device(self, dst, non_blocking);
  } else if (dst.is_privateuseone()) {
    const CopyRange range("spyre::copy_host_to_device");
    TORCH_CHECK(self.is_cpu(), "spyre: cannot copy from ", self.device(),
                " to spyre");
    at::Tensor src = self.to(dst.scalar_type()).expand(dst.sizes());
    copy_from_host(src, dst, non_blocking);
  } else {
    const CopyRange range("spyre::copy_device_to_host");
    TORCH_CHECK(dst.is_cpu(), "spyre: cannot copy from spyre to ",
                dst.device());
    if (dst.scalar_type() == self.scalar_type() &&
        dst.sizes() == self.sizes()) {
      copy_to_host(self, dst, non_blocking);
    } else {
      at::Tensor staged =
          at::empty(self.sizes(), self.options().device(at::kCPU));
      copy_to_host(self, staged, false);
      dst.copy_(staged);
    }
  }
  return dst;
}

at::Tensor spyre_copy_from_and_resize(const at::Tensor& self,
                                      const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return spyre_copy_from(self, dst, false);
}

at::Scalar spyre_local_scalar_dense(const at::Tensor& self) {
  const CopyRange range("spyre::copy_device_to_host");
  at::Tensor value = at::empty({}, self.options().device(at::kCPU));
  copy_to_host(self.reshape({}), value, false);
  return at::native::_local_scalar_dense_cpu(value);
}

void spyre_record_stream(at::Tensor& self, c10::Stream stream) {
  record_stream(self.storage().data_ptr(), stream);
}

}  // namespace

CardLinkStaging::CardLinkStaging() { ++card_link_staging_depth; }
CardLinkStaging::~CardLinkStaging() { --card_link_staging_depth; }

void record_card_link(c10::DeviceIndex device, uint64_t bytes) {
  const CopyRange range("spyre::card_link");
  const double ns = device_chip(device).costs.card_link_ns(bytes);
  rt::Stream& stream = stream_of(device);
  call_runtime(
      [&] { stream.enqueue(counted_link(bytes, [ns] { return ns; })); });
}

bool covers_storage(const at::Tensor& tensor) {
  return image_offset(tensor) == 0 && tensor.is_contiguous() &&
         tensor.nbytes() == tensor.storage().nbytes() &&
         tensor.nbytes() == tensor_layout(tensor).host_bytes();
}

int64_t storage_window(const at::Tensor& tensor) {
  const uint64_t bytes = storage_window_bytes(tensor.storage());
  if (bytes == 0) return 0;
  const auto element = static_cast<uint64_t>(tensor.element_size());
  TORCH_CHECK_VALUE(
      bytes % element == 0, "spyre: this tensor's storage begins at byte ",
      bytes, " of the spyre tensor it shares (DLPack), inside a ",
      tensor.scalar_type(), " element; export it in the dtype it is read as");
  return static_cast<int64_t>(bytes / element);
}

bool shares_memory(const at::Tensor& a, const at::Tensor& b) {
  if (a.storage().is_alias_of(b.storage())) return true;
  if (a.storage().nbytes() == 0 || b.storage().nbytes() == 0) return false;
  return &allocation_of(a.storage()) == &allocation_of(b.storage());
}

const DeviceLayout& tensor_layout(const at::Tensor& tensor) {
  TORCH_CHECK_VALUE(tensor.is_privateuseone(),
                    "spyre: expected a spyre tensor, got one on ",
                    tensor.device());
  return *allocation_of(tensor.storage()).layout;
}

at::Tensor host_image(const c10::Storage& storage) {
  const Allocation& allocation = allocation_of(storage);
  if (storage.nbytes() == 0) return at::empty({0}, at::kByte);
  // The allocation's whole image, of which the storage may be a window.
  at::Tensor image = at::empty(
      {static_cast<int64_t>(allocation.layout->host_bytes())}, at::kByte);
  rt::Device* device = &runtime_device(allocation.device);
  const uint64_t bytes = allocation.layout->device_bytes();
  // The work writes `image`, which outlives it: the wait below returns only
  // once the stream ran everything queued.
  auto work = [device, layout = allocation.layout, ptr = allocation.ptr,
               storage, out = image.data_ptr<uint8_t>()]() {
    return download_image(*device, ptr, *layout, out);
  };
  rt::Stream& stream = stream_of(allocation.device);
  call_runtime([&] { stream.enqueue(counted_copy(bytes, std::move(work))); });
  wait_for(stream);
  return image.narrow(0, static_cast<int64_t>(storage_window_bytes(storage)),
                      static_cast<int64_t>(storage.nbytes()));
}

void write_image(const c10::Storage& storage, const uint8_t* image,
                 bool /*non_blocking*/) {
  // Nothing keeps a raw `image` alive or unchanged for the caller: the
  // upload waits, as a CUDA copy from pageable memory does.
  upload_image(storage, image, nullptr, true);
}

void resize_storage(const c10::Storage& storage, size_t new_bytes,
                    DeviceLayout layout) {
  TORCH_CHECK(storage.resizable(),
              "spyre: trying to resize a storage that is not resizable");
  TORCH_INTERNAL_ASSERT(layout.host_bytes() == new_bytes);
  const c10::DeviceIndex device = storage.device().index();
  // Growing an empty storage (an out= result) keeps nothing: no round trip
  // through the host, and the new bytes are left uninitialised as resize_
  // promises.
  const bool keeps_data = storage.nbytes() > 0;
  at::Tensor old_image = keeps_data ? host_image(storage) : at::Tensor();
  c10::DataPtr fresh = allocate_with_layout(device, std::move(layout));
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
  if (new_bytes == 0 || !keeps_data) return;
  at::Tensor image = at::zeros({static_cast<int64_t>(new_bytes)}, at::kByte);
  const size_t kept = std::min<size_t>(new_bytes, old_image.numel());
  std::memcpy(image.data_ptr(), old_image.data_ptr(), kept);
  write_image(storage, image.data_ptr<uint8_t>(), false);
}

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  const int64_t size = static_cast<int64_t>(new_bytes);
  resize_storage(storage, new_bytes, make_default_layout({&size, 1}, 1));
}

void copy_tensor(const at::Tensor& src, const at::Tensor& dst,
                 bool non_blocking) {
  spyre_copy_from(src, dst, non_blocking);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_copy_from", TORCH_FN(spyre_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(spyre_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(spyre_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(spyre_record_stream));
}

}  // namespace spyre::torch_glue
