// view_runs: the device bytes of a view's elements (layout.h).
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

}  // namespace

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
