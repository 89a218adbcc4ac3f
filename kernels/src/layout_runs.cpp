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

// One digit of a view's box in device memory: it walks view dim
// `view_dim` (-1: none) `extent` places from the box's corner, each
// `stride` bytes on and `step` coordinates of that view dim on.
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
  std::vector<BoxDim> dims;  // extents > 1 only, largest stride first
};

// A view dim walking a host dim, `factor` host coordinates per step.
struct Digit {
  int64_t view_dim;
  int64_t factor;
  int64_t extent;
};

// The view as a box of the host image: for each host dim its first
// coordinate and the view dims walking it, outermost first (one, or
// several when the view splits the dim: heads off a hidden dim). View dims
// of size > 1 walk host dims in the host dims' order; nullopt otherwise (a
// transpose, a broadcast, a flattening, a view past a dim's end).
struct HostBox {
  std::vector<int64_t> start;
  std::vector<std::vector<Digit>> digits;
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
  HostBox box{std::vector<int64_t>(n), std::vector<std::vector<Digit>>(n)};
  size_t next = 0;
  for (size_t v = 0; v < view.sizes.size(); ++v) {
    if (view.sizes[v] == 1) continue;
    const int64_t s = view.strides[v];
    if (view.sizes[v] < 1 || s < 1) return std::nullopt;
    while (next < n &&
           (sizes[next] == 1 || stride[next] > s || s % stride[next] != 0)) {
      ++next;
    }
    if (next == n) return std::nullopt;
    std::vector<Digit>& digits = box.digits[next];
    const Digit digit{static_cast<int64_t>(v), s / stride[next], view.sizes[v]};
    // Digits nest: each outer one steps over the whole of the next.
    if (!digits.empty() && digits.back().factor < digit.factor * digit.extent) {
      return std::nullopt;
    }
    digits.push_back(digit);
  }
  if (view.offset < 0) return std::nullopt;
  int64_t rest = view.offset;
  for (size_t j = n; j-- > 0;) {
    box.start[j] = rest % sizes[j];
    rest /= sizes[j];
    int64_t last = box.start[j];
    for (const Digit& d : box.digits[j]) last += d.factor * (d.extent - 1);
    if (last >= sizes[j]) return std::nullopt;
  }
  if (rest != 0) return std::nullopt;
  return box;
}

// The digits of host dim `h` split by the view, over the device dims that
// walk it (`bands`, innermost first: steps 1, size0, size0*size1, ...): a
// digit goes to the band its factor falls in, split where it crosses into
// the next band. Each band's digits must stay inside it (no carry), so the
// device index of a band is the sum of its digits'.
struct Band {
  int64_t step, size, stride;
};

bool split_digits(const std::vector<Digit>& digits,
                  const std::vector<Band>& bands, std::vector<BoxDim>& out) {
  if (bands.empty() || bands.front().step != 1) return false;
  for (size_t t = 1; t < bands.size(); ++t) {
    if (bands[t].step != bands[t - 1].step * bands[t - 1].size) return false;
  }
  std::vector<int64_t> reach(bands.size(), 0);  // largest coordinate per band
  for (const Digit& digit : digits) {
    int64_t factor = digit.factor, extent = digit.extent, view_step = 1;
    while (extent > 1) {
      size_t t = 0;
      while (t + 1 < bands.size() && factor >= bands[t + 1].step) ++t;
      const Band& band = bands[t];
      const int64_t top = band.step * band.size;
      if (factor % band.step != 0) return false;
      // All of the digit in this band, or the part below the next band.
      const bool fits = factor * extent <= top;
      if (!fits && top % factor != 0) return false;
      const int64_t here = fits ? extent : top / factor;
      if (here < 2 && !fits) return false;
      if (extent % here != 0) return false;
      if (here > 1) {
        out.push_back({digit.view_dim, view_step, here,
                       band.stride * (factor / band.step)});
        reach[t] += factor * (here - 1);
      }
      view_step *= here;
      factor *= here;
      extent /= here;
    }
  }
  int64_t below = 0;
  for (size_t t = 0; t < bands.size(); ++t) {
    below += reach[t];
    if (below >= bands[t].step * bands[t].size) return false;
  }
  return true;
}

// The host box in device dims. A host dim walked by one device dim of step
// 1 may be cut anywhere; one tiled over several device dims only at one
// coordinate, not at all (the whole dim, padding included), or, from its
// start, along digits that each stay inside a device dim.
std::optional<DeviceBox> device_box(const DeviceLayout& layout,
                                    const ViewGeometry& view) {
  const std::optional<HostBox> host = host_box(layout, view);
  if (!host) return std::nullopt;
  const size_t dims = layout.device_size.size();
  std::vector<int64_t> strides(dims);
  for (int64_t s = layout.element_size, k = static_cast<int64_t>(dims) - 1;
       k >= 0; --k) {
    strides[k] = s;
    s *= layout.device_size[k];
  }
  std::vector<std::vector<Band>> bands(layout.host_sizes.size());
  for (size_t k = dims; k-- > 0;) {
    const int64_t h = layout.dim_map[k];
    if (h < 0) {
      if (layout.device_size[k] != 1) return std::nullopt;
      continue;
    }
    bands[h].push_back({layout.dim_step[k], layout.device_size[k], strides[k]});
  }
  DeviceBox box;
  for (size_t h = 0; h < bands.size(); ++h) {
    std::ranges::sort(bands[h], {}, &Band::step);
    const std::vector<Digit>& digits = host->digits[h];
    const int64_t start = host->start[h];
    if (digits.empty()) {
      for (const Band& b : bands[h]) {
        box.corner += static_cast<uint64_t>(start / b.step % b.size * b.stride);
      }
    } else if (digits.size() == 1 && digits[0].factor == 1 &&
               bands[h].size() == 1 && bands[h][0].step == 1) {
      box.corner += static_cast<uint64_t>(start * bands[h][0].stride);
      box.dims.push_back(
          {digits[0].view_dim, 1, digits[0].extent, bands[h][0].stride});
    } else if (digits.size() == 1 && digits[0].factor == 1 && start == 0 &&
               digits[0].extent == layout.host_sizes[h]) {
      for (const Band& b : bands[h]) {
        if (b.size > 1) {
          box.dims.push_back({digits[0].view_dim, b.step, b.size, b.stride});
        }
      }
    } else if (start != 0 || !split_digits(digits, bands[h], box.dims)) {
      return std::nullopt;
    }
  }
  std::ranges::sort(box.dims, std::ranges::greater{}, &BoxDim::stride);
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
  // The same digits on both sides, in the destination's order: the source's
  // stride of each.
  std::vector<int64_t> from_stride;
  std::vector<bool> used(a->dims.size(), false);
  for (const BoxDim& d : b->dims) {
    size_t i = 0;
    while (i < a->dims.size() && (used[i] || !a->dims[i].same_walk(d))) ++i;
    if (i == a->dims.size()) return std::nullopt;
    used[i] = true;
    from_stride.push_back(a->dims[i].stride);
  }
  // Inner digits packed on both sides join the run.
  int64_t run = src.element_size;
  size_t outer = b->dims.size();
  while (outer > 0 && b->dims[outer - 1].stride == run &&
         from_stride[outer - 1] == run) {
    --outer;
    run *= b->dims[outer].extent;
  }
  size_t count = 1;
  for (size_t i = 0; i < outer; ++i) {
    count *= static_cast<size_t>(b->dims[i].extent);
    if (count > max_runs) return std::nullopt;
  }
  std::vector<PairedRun> runs;
  runs.reserve(count);
  std::vector<int64_t> index(outer, 0);
  for (size_t r = 0; r < count; ++r) {
    uint64_t from_at = a->corner, to_at = b->corner;
    for (size_t i = 0; i < outer; ++i) {
      from_at += static_cast<uint64_t>(index[i] * from_stride[i]);
      to_at += static_cast<uint64_t>(index[i] * b->dims[i].stride);
    }
    runs.push_back({from_at, to_at, static_cast<uint64_t>(run)});
    for (size_t i = outer; i-- > 0;) {
      if (++index[i] < b->dims[i].extent) break;
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
