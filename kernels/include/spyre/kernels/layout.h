// The stick-layout rule: device layouts of tensor storage (torch-free).
//
// A storage holds `host_sizes` elements, seen by PyTorch as a flat row-major
// array (the "host image"). On the device they are kept in the stick layout
// `device_size` (row-major on the device); `dim_map[k]` says which host
// dimension device dimension k walks, `dim_step[k]` by how many host
// coordinates one step moves, and `stride_map[k]` the resulting host-element
// stride (-1 for a synthetic dimension that walks no host dimension). The
// last device dimension is always the stick: elements_per_stick() elements of
// the stick host dimension, step 1. Sticks are padded with zeros; padding is
// never part of the host image.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "spyre/runtime/device.h"

namespace spyre::kernels {

struct DeviceLayout {
  std::vector<int64_t> host_sizes;
  uint32_t element_size = 1;
  std::vector<int64_t> device_size;
  std::vector<int64_t> dim_map;
  std::vector<int64_t> dim_step;
  std::vector<int64_t> stride_map;

  int64_t elements_per_stick() const;
  int64_t host_elements() const;
  uint64_t host_bytes() const;
  uint64_t device_bytes() const;
  // Same element places: equal device_size, stride_map, steps, element size
  // and host sizes apart from size-1 dims.
  bool same_placement(const DeviceLayout& other) const;
  std::vector<int64_t> squeezed_host_sizes() const;  // without size-1 dims
  std::string to_string() const;
};

// The default layout (its host_sizes are `host_sizes` without size-1 dims,
// or [1]): with E = elements per stick and size-1 dims dropped,
// sizes [d0..dn-1] map to [d1, ..., dn-2, ceil(dn-1 / E), d0, E]; one
// dimension to [ceil(d0 / E), E]; none to one synthetic stick [1, E].
// `stick_dim` (a host dimension, negative counts from the end) picks another
// dimension to run along the sticks; it keeps its place and the first
// remaining dimension is tiled as above.
DeviceLayout make_default_layout(std::span<const int64_t> host_sizes,
                                 uint32_t element_size, int64_t stick_dim = -1);

// A layout from explicit parts; checks that every host element has exactly
// one device place and that the last device dimension is a whole stick.
// Throws std::invalid_argument naming what is wrong.
DeviceLayout make_layout(std::vector<int64_t> host_sizes, uint32_t element_size,
                         std::vector<int64_t> device_size,
                         std::vector<int64_t> dim_map,
                         std::vector<int64_t> dim_step);

// Bytes [begin, end) of the device buffer (device_bytes() in all) from the
// host image (host_bytes()), into out[0, end - begin), padding zero; writes
// every byte of it. Any range works, even one that starts or ends inside a
// stick or an element, so a copy can convert its image piece by piece
// straight into the memory it copies to. Throws std::invalid_argument for a
// range outside the device buffer.
void pack_range(const DeviceLayout& layout, const uint8_t* image,
                uint64_t begin, uint64_t end, uint8_t* out);
// The inverse: in[0, end - begin), bytes [begin, end) of the device buffer,
// into the host image; padding is skipped; writes exactly the host bytes
// those device bytes hold.
void unpack_range(const DeviceLayout& layout, const uint8_t* in, uint64_t begin,
                  uint64_t end, uint8_t* image);
// The whole buffer: pack_range / unpack_range over [0, device_bytes()).
void pack(const DeviceLayout& layout, const uint8_t* image, uint8_t* device);
void unpack(const DeviceLayout& layout, const uint8_t* device, uint8_t* image);

// Where a view's elements live in the device buffer: the view of `sizes`
// and `strides` from element `offset` of the host image (in elements, as a
// tensor's), visited in the view's row-major order, as runs of device bytes
// with neighbours merged. Run i holds the view's elements that follow those
// of run i - 1, so a contiguous host buffer of the view's values maps onto
// the runs in order (Device::copy_runs_to_device). Only the view's bytes
// are in the runs: never padding, never another element of a shared stick.
// Throws std::invalid_argument for an element outside the host image.
std::vector<rt::Device::CopyRun> view_runs(const DeviceLayout& layout,
                                           std::span<const int64_t> sizes,
                                           std::span<const int64_t> strides,
                                           int64_t offset);

// A view of a storage's host image: `sizes` and `strides` from element
// `offset` (as view_runs takes them).
struct ViewGeometry {
  std::span<const int64_t> sizes;
  std::span<const int64_t> strides;
  int64_t offset = 0;
};

// One piece of a device-to-device copy: `bytes` from byte `src_offset` of
// the source buffer to byte `dst_offset` of the destination buffer.
struct PairedRun {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t bytes = 0;
  bool operator==(const PairedRun&) const = default;
};

// Copying view `from` (over layout `src`) into view `to` (over layout
// `dst`), two views of one shape and element size, as plain byte copies
// between the device buffers: possible when each view is a box of its host
// image (a narrow along dims, steps along them, a dim split into several
// view dims; no transposes or broadcasts) that its layout places as a box
// of device dims, and both boxes walk the view's dims with the same digits
// (in any device order). A cat's slice of a KV cache along the sequence,
// or a narrow of it, is one run per outer row; a token's heads split off a
// projection, into a cache slot, one per stick where the orders differ.
// Padding inside the boxes moves along. nullopt when the views are not
// such boxes or would need more than `max_runs` runs: the copy then needs
// a device program.
std::optional<std::vector<PairedRun>> paired_box_runs(const DeviceLayout& src,
                                                      ViewGeometry from,
                                                      const DeviceLayout& dst,
                                                      ViewGeometry to,
                                                      size_t max_runs);

}  // namespace spyre::kernels
