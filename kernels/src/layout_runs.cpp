// view_runs: the device bytes of a view's elements; paired_box_runs: a
// view-to-view copy as byte copies (layout.h).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "spyre/kernels/layout.h"

namespace spyre::kernels {
namespace {

// One device dimension as a host dimension reaches it: coordinate c along
// the host dimension is at index (c / step) % size of it.
struct Place {
  int64_t step;
  int64_t size;
  int64_t device_stride;  // bytes
};

// Maps a host element (its flat index in the host image) to its byte offset
// in the device buffer, through the device dims of each host dim.
class ElementPlaces {
 public:
  explicit ElementPlaces(const DeviceLayout& layout)
      : host_sizes_(layout.host_sizes), places_(layout.host_sizes.size()) {
    const size_t dims = layout.device_size.size();
    int64_t stride = layout.element_size;
    for (size_t k = dims; k-- > 0;) {
      const int64_t h = layout.dim_map[k];
      if (h >= 0) {
        places_[h].push_back(
            {layout.dim_step[k], layout.device_size[k], stride});
      }
      stride *= layout.device_size[k];
    }
  }

  int64_t offset_of(int64_t element) const {
    int64_t offset = 0;
    for (size_t h = host_sizes_.size(); h-- > 0;) {
      const int64_t size = host_sizes_[h];
      const int64_t c = size > 0 ? element % size : 0;
      element = size > 0 ? element / size : 0;
      for (const Place& p : places_[h]) {
        offset += (c / p.step) % p.size * p.device_stride;
      }
    }
    return offset;
  }

 private:
  const std::vector<int64_t>& host_sizes_;
  std::vector<std::vector<Place>> places_;
};

// One device dim of a view's box, outermost first: it walks view dim
// `view_dim` (-1: none) `extent` places from the box's corner, each
// `stride` bytes on and `step` host coordinates on.
struct BoxDim {
  int64_t view_dim;
  int64_t step;
  int64_t extent;
  int64_t stride;
  bool same_walk(const BoxDim& other) const {
    return view_dim == other.view_dim && step == other.step &&
           extent == other.extent;
  }
};

struct DeviceBox {
  uint64_t corner = 0;       // bytes
  std::vector<BoxDim> dims;  // extents > 1 only
};

// The view as a box of the host image: for each host dim its first
// coordinate, its extent and the view dim walking it (-1 for extent 1).
// Each view dim of size > 1 must walk one host dim, in the host dims'
// order; nullopt otherwise (a transpose, a broadcast, a flattening).
struct HostBox {
  std::vector<int64_t> start, extent, view_dim;
};

std::optional<HostBox> host_box(const DeviceLayout& layout,
                                const ViewGeometry& view) {
  const std::vector<int64_t>& sizes = layout.host_sizes;
  const size_t n = sizes.size();
  std::vector<int64_t> stride(n);
  for (int64_t s = 1, j = static_cast<int64_t>(n) - 1; j >= 0; --j) {
    stride[j] = s;
    s *= sizes[j];
  }
  HostBox box{std::vector<int64_t>(n), std::vector<int64_t>(n, 1),
              std::vector<int64_t>(n, -1)};
  size_t next = 0;
  for (size_t v = 0; v < view.sizes.size(); ++v) {
    if (view.sizes[v] == 1) continue;
    if (view.sizes[v] < 1) return std::nullopt;
    while (next < n && (sizes[next] == 1 || stride[next] != view.strides[v])) {
      ++next;
    }
    if (next == n) return std::nullopt;
    box.extent[next] = view.sizes[v];
    box.view_dim[next] = static_cast<int64_t>(v);
    ++next;
  }
  if (view.offset < 0) return std::nullopt;
  int64_t rest = view.offset;
  for (size_t j = n; j-- > 0;) {
    box.start[j] = rest % sizes[j];
    rest /= sizes[j];
    if (box.start[j] + box.extent[j] > sizes[j]) return std::nullopt;
  }
  if (rest != 0) return std::nullopt;
  return box;
}

// The host box in device dims. A host dim walked by one device dim of step
// 1 may be cut anywhere; one tiled over several device dims only at one
// coordinate (extent 1) or not at all (the whole dim, padding included).
std::optional<DeviceBox> device_box(const DeviceLayout& layout,
                                    const ViewGeometry& view) {
  const std::optional<HostBox> host = host_box(layout, view);
  if (!host) return std::nullopt;
  std::vector<int> walkers(layout.host_sizes.size(), 0);
  for (int64_t h : layout.dim_map) {
    if (h >= 0) ++walkers[h];
  }
  DeviceBox box;
  int64_t stride = layout.element_size;
  for (size_t k = layout.device_size.size(); k-- > 0;) {
    const int64_t h = layout.dim_map[k];
    const int64_t size = layout.device_size[k];
    const int64_t step = layout.dim_step[k];
    int64_t first = 0, extent = size, view_dim = -1;
    if (h < 0) {
      if (size != 1) return std::nullopt;
    } else if (host->extent[h] == 1) {
      first = host->start[h] / step % size;
      extent = 1;
    } else if (walkers[h] == 1 && step == 1) {
      first = host->start[h];
      extent = host->extent[h];
      view_dim = host->view_dim[h];
    } else if (host->start[h] == 0 && host->extent[h] == layout.host_sizes[h]) {
      view_dim = host->view_dim[h];
    } else {
      return std::nullopt;
    }
    box.corner += static_cast<uint64_t>(first * stride);
    if (extent > 1) box.dims.push_back({view_dim, step, extent, stride});
    stride *= size;
  }
  std::reverse(box.dims.begin(), box.dims.end());
  return box;
}

}  // namespace

std::optional<std::vector<PairedRun>> paired_box_runs(const DeviceLayout& src,
                                                      ViewGeometry from,
                                                      const DeviceLayout& dst,
                                                      ViewGeometry to,
                                                      size_t max_runs) {
  if (src.element_size != dst.element_size ||
      !std::ranges::equal(from.sizes, to.sizes)) {
    return std::nullopt;
  }
  const std::optional<DeviceBox> a = device_box(src, from);
  const std::optional<DeviceBox> b = device_box(dst, to);
  if (!a || !b || a->dims.size() != b->dims.size()) return std::nullopt;
  for (size_t i = 0; i < a->dims.size(); ++i) {
    if (!a->dims[i].same_walk(b->dims[i])) return std::nullopt;
  }
  // Inner dims packed on both sides join the run.
  int64_t run = src.element_size;
  size_t outer = a->dims.size();
  while (outer > 0 && a->dims[outer - 1].stride == run &&
         b->dims[outer - 1].stride == run) {
    --outer;
    run *= a->dims[outer].extent;
  }
  size_t count = 1;
  for (size_t i = 0; i < outer; ++i) {
    count *= static_cast<size_t>(a->dims[i].extent);
    if (count > max_runs) return std::nullopt;
  }
  std::vector<PairedRun> runs;
  runs.reserve(count);
  std::vector<int64_t> index(outer, 0);
  for (size_t r = 0; r < count; ++r) {
    uint64_t from_at = a->corner, to_at = b->corner;
    for (size_t i = 0; i < outer; ++i) {
      from_at += static_cast<uint64_t>(index[i] * a->dims[i].stride);
      to_at += static_cast<uint64_t>(index[i] * b->dims[i].stride);
    }
    runs.push_back({from_at, to_at, static_cast<uint64_t>(run)});
    for (size_t i = outer; i-- > 0;) {
      if (++index[i] < a->dims[i].extent) break;
      index[i] = 0;
    }
  }
  return runs;
}

std::vector<rt::Device::CopyRun> view_runs(const DeviceLayout& layout,
                                           std::span<const int64_t> sizes,
                                           std::span<const int64_t> strides,
                                           int64_t offset) {
  if (sizes.size() != strides.size()) {
    throw std::invalid_argument("view_runs: sizes and strides differ in rank");
  }
  std::vector<rt::Device::CopyRun> runs;
  int64_t count = 1;
  for (int64_t size : sizes) count *= size;
  if (count == 0) return runs;
  const ElementPlaces places(layout);
  const int64_t elements = layout.host_elements();
  const uint64_t width = layout.element_size;
  std::vector<int64_t> index(sizes.size(), 0);
  int64_t element = offset;
  for (int64_t visited = 0; visited < count; ++visited) {
    if (element < 0 || element >= elements) {
      throw std::invalid_argument("view_runs: element " +
                                  std::to_string(element) +
                                  " of the view lies outside the storage's " +
                                  std::to_string(elements) + " elements");
    }
    const auto at = static_cast<uint64_t>(places.offset_of(element));
    if (!runs.empty() && runs.back().offset + runs.back().bytes == at) {
      runs.back().bytes += width;
    } else {
      runs.push_back({at, width});
    }
    // The next element in row-major order of the view.
    for (size_t d = sizes.size(); d-- > 0;) {
      element += strides[d];
      if (++index[d] < sizes[d]) break;
      element -= strides[d] * sizes[d];
      index[d] = 0;
    }
  }
  return runs;
}

}  // namespace spyre::kernels
