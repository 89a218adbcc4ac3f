#include "layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace spyre::torch_glue {
namespace {

constexpr int64_t kStickBytes = 128;

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * std::max<int64_t>(sizes[i + 1], 1);
  }
  return strides;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string join(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out << (i ? ", " : "") << values[i];
  }
  out << "]";
  return out.str();
}

void fill_stride_map(DeviceLayout& layout) {
  const auto host_strides = row_major_strides(layout.host_sizes);
  layout.stride_map.assign(layout.device_size.size(), -1);
  for (size_t k = 0; k < layout.device_size.size(); ++k) {
    if (layout.dim_map[k] >= 0) {
      layout.stride_map[k] =
          layout.dim_step[k] * host_strides[layout.dim_map[k]];
    }
  }
}

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument("device layout: " + message);
}

// Checks that the device dims of host dim `h` tile it exactly once: sorted by
// step they form a mixed radix starting at 1 that reaches the host size.
void check_host_dim_tiling(const DeviceLayout& layout, int64_t h) {
  std::vector<size_t> dims;
  for (size_t k = 0; k < layout.dim_map.size(); ++k) {
    if (layout.dim_map[k] == h) dims.push_back(k);
  }
  const int64_t size = layout.host_sizes[h];
  if (dims.empty()) {
    require(size <= 1, "host dimension " + std::to_string(h) + " of size " +
                           std::to_string(size) + " has no device dimension");
    return;
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
    return layout.dim_step[a] < layout.dim_step[b];
  });
  int64_t expected_step = 1;
  for (size_t k : dims) {
    require(layout.dim_step[k] == expected_step,
            "device dimension " + std::to_string(k) + " steps " +
                std::to_string(layout.dim_step[k]) + " along host dimension " +
                std::to_string(h) + " where " + std::to_string(expected_step) +
                " tiles it exactly");
    expected_step *= layout.device_size[k];
  }
  require(expected_step >= size || size == 0,
          "device dimensions cover " + std::to_string(expected_step) +
              " of the " + std::to_string(size) +
              " elements of host dimension " + std::to_string(h));
}

// Calls visit(stick_index, host_element_index, host_stick_stride, valid) for
// each stick of the layout; `valid` elements of the stick hold host data.
// Sticks are visited with the stick dimension's tile index varying fastest:
// the host image is then read (or written) along its rows, and the device
// buffer in a few sequential streams, which keeps both caches and TLB warm
// (device order would jump a whole host row per stick).
template <typename Visit>
void for_each_stick(const DeviceLayout& layout, Visit&& visit) {
  const int64_t m = static_cast<int64_t>(layout.device_size.size());
  const int64_t sticks =
      std::accumulate(layout.device_size.begin(), layout.device_size.end() - 1,
                      int64_t{1}, std::multiplies<>());
  if (sticks == 0 || layout.host_elements() == 0) return;
  const auto host_strides = row_major_strides(layout.host_sizes);
  const int64_t stick_dim = layout.dim_map[m - 1];
  const int64_t per_stick = layout.device_size[m - 1];
  const int64_t stick_stride = host_strides[stick_dim];
  const int64_t stick_limit = layout.host_sizes[stick_dim];

  std::vector<int64_t> sticks_per_step(m - 1, 1);  // device stride, in sticks
  for (int64_t k = m - 3; k >= 0; --k) {
    sticks_per_step[k] = sticks_per_step[k + 1] * layout.device_size[k + 1];
  }
  // The odometer walks "virtual" dims, outermost first: each advances one
  // device dim by `mult`. The dim just outside the tile dim is split in
  // blocks of kBlock so a block of host rows is read while each tile's
  // sticks are written contiguously (no 4 KiB-aliased write streams).
  constexpr int64_t kBlock = 16;
  struct Step {
    int64_t dim, mult, count;
  };
  std::vector<Step> order;
  int64_t tile_dim = -1;
  for (int64_t k = 0; k + 1 < m; ++k) {
    if (layout.dim_map[k] == stick_dim && tile_dim < 0) {
      tile_dim = k;
    } else {
      order.push_back({k, 1, layout.device_size[k]});
    }
  }
  if (tile_dim >= 0) {
    if (!order.empty() && layout.device_size[tile_dim] > 1 &&
        order.back().count > kBlock) {
      const Step rows = order.back();
      order.back() = {rows.dim, kBlock, (rows.count + kBlock - 1) / kBlock};
      order.push_back({tile_dim, 1, layout.device_size[tile_dim]});
      order.push_back({rows.dim, 1, kBlock});
    } else {
      order.push_back({tile_dim, 1, layout.device_size[tile_dim]});
    }
  }
  int64_t visits = 1;
  for (const Step& step : order) visits *= step.count;

  std::vector<int64_t> index(m - 1, 0);            // per device dim
  std::vector<int64_t> position(order.size(), 0);  // per virtual dim
  std::vector<int64_t> coord(layout.host_sizes.size(), 0);
  int64_t stick = 0;
  int64_t host = 0;
  auto move = [&](const Step& step, int64_t times) {
    const int64_t h = layout.dim_map[step.dim];
    const int64_t amount = step.mult * times;
    index[step.dim] += amount;
    stick += sticks_per_step[step.dim] * amount;
    if (h >= 0) {
      host += layout.dim_step[step.dim] * host_strides[h] * amount;
      coord[h] += layout.dim_step[step.dim] * amount;
    }
  };
  for (int64_t visited = 0; visited < visits; ++visited) {
    bool inside = true;
    for (const Step& step : order) {
      if (index[step.dim] >= layout.device_size[step.dim]) inside = false;
    }
    for (size_t h = 0; h < coord.size() && inside; ++h) {
      if (static_cast<int64_t>(h) != stick_dim &&
          coord[h] >= layout.host_sizes[h]) {
        inside = false;
      }
    }
    if (inside) {
      const int64_t valid =
          std::clamp<int64_t>(stick_limit - coord[stick_dim], 0, per_stick);
      if (valid > 0) visit(stick, host, stick_stride, valid);
    }
    for (int64_t pos = static_cast<int64_t>(order.size()) - 1; pos >= 0;
         --pos) {
      move(order[pos], 1);
      if (++position[pos] < order[pos].count) break;
      move(order[pos], -order[pos].count);
      position[pos] = 0;
    }
  }
}

}  // namespace

int64_t DeviceLayout::elements_per_stick() const {
  return kStickBytes / element_size;
}

int64_t DeviceLayout::host_elements() const {
  return std::accumulate(host_sizes.begin(), host_sizes.end(), int64_t{1},
                         std::multiplies<>());
}

uint64_t DeviceLayout::host_bytes() const {
  return static_cast<uint64_t>(host_elements()) * element_size;
}

uint64_t DeviceLayout::device_bytes() const {
  const int64_t elements = std::accumulate(
      device_size.begin(), device_size.end(), int64_t{1}, std::multiplies<>());
  return static_cast<uint64_t>(elements) * element_size;
}

std::vector<int64_t> DeviceLayout::squeezed_host_sizes() const {
  std::vector<int64_t> sizes;
  for (int64_t size : host_sizes) {
    if (size != 1) sizes.push_back(size);
  }
  return sizes;
}

bool DeviceLayout::same_placement(const DeviceLayout& other) const {
  return element_size == other.element_size &&
         device_size == other.device_size && stride_map == other.stride_map &&
         dim_step == other.dim_step &&
         squeezed_host_sizes() == other.squeezed_host_sizes();
}

std::string DeviceLayout::to_string() const {
  return "DeviceLayout(host_size=" + join(host_sizes) +
         ", element_size=" + std::to_string(element_size) +
         ", device_size=" + join(device_size) +
         ", stride_map=" + join(stride_map) + ")";
}

DeviceLayout make_default_layout(std::span<const int64_t> host_sizes,
                                 uint32_t element_size, int64_t stick_dim) {
  require(element_size == 1 || element_size == 2 || element_size == 4 ||
              element_size == 8,
          "element size " + std::to_string(element_size) +
              " does not divide a 128-byte stick");
  const int64_t n = static_cast<int64_t>(host_sizes.size());
  for (int64_t size : host_sizes) {
    require(size >= 0,
            "negative size in " + join({host_sizes.begin(), host_sizes.end()}));
  }
  int64_t stick = -1;  // a host dimension chosen by the caller
  if (stick_dim != -1) {
    stick = stick_dim < 0 ? stick_dim + n : stick_dim;
    require(stick >= 0 && stick < n,
            "stick dimension " + std::to_string(stick_dim) +
                " is out of range for " + std::to_string(n) + " dimensions");
  }
  // Size-1 dims take no part: the layout's host sizes are the others (the
  // chosen stick dimension stays even when it has size 1).
  DeviceLayout layout;
  layout.element_size = element_size;
  int64_t kept_stick = -1;
  for (int64_t h = 0; h < n; ++h) {
    if (host_sizes[h] != 1 || h == stick) {
      if (h == stick)
        kept_stick = static_cast<int64_t>(layout.host_sizes.size());
      layout.host_sizes.push_back(host_sizes[h]);
    }
  }
  const int64_t per_stick = layout.elements_per_stick();
  if (layout.host_sizes.empty()) {  // 0-d or all ones: one synthetic stick
    layout.host_sizes = {1};
    layout.device_size = {1, per_stick};
    layout.dim_map = {-1, 0};
    layout.dim_step = {0, 1};
    fill_stride_map(layout);
    return layout;
  }
  const int64_t kept = static_cast<int64_t>(layout.host_sizes.size());
  if (kept_stick < 0) kept_stick = kept - 1;
  std::vector<int64_t> rest;
  for (int64_t h = 0; h < kept; ++h) {
    if (h != kept_stick) rest.push_back(h);
  }
  const int64_t tiles = ceil_div(layout.host_sizes[kept_stick], per_stick);
  if (rest.empty()) {
    layout.device_size = {tiles, per_stick};
    layout.dim_map = {kept_stick, kept_stick};
    layout.dim_step = {per_stick, 1};
  } else {
    for (size_t i = 1; i < rest.size(); ++i) {
      layout.device_size.push_back(layout.host_sizes[rest[i]]);
      layout.dim_map.push_back(rest[i]);
      layout.dim_step.push_back(1);
    }
    layout.device_size.insert(layout.device_size.end(),
                              {tiles, layout.host_sizes[rest[0]], per_stick});
    layout.dim_map.insert(layout.dim_map.end(),
                          {kept_stick, rest[0], kept_stick});
    layout.dim_step.insert(layout.dim_step.end(), {per_stick, 1, 1});
  }
  fill_stride_map(layout);
  return layout;
}

DeviceLayout make_layout(std::vector<int64_t> host_sizes, uint32_t element_size,
                         std::vector<int64_t> device_size,
                         std::vector<int64_t> dim_map,
                         std::vector<int64_t> dim_step) {
  DeviceLayout layout = make_default_layout(host_sizes, element_size);
  layout.host_sizes = host_sizes.empty() ? std::vector<int64_t>{1} : host_sizes;
  const int64_t n = static_cast<int64_t>(layout.host_sizes.size());
  require(!device_size.empty(), "device_size is empty");
  require(dim_map.size() == device_size.size() &&
              dim_step.size() == device_size.size(),
          "device_size " + join(device_size) + ", dim_map " + join(dim_map) +
              " and dim_step " + join(dim_step) + " differ in length");
  for (size_t k = 0; k < device_size.size(); ++k) {
    require(device_size[k] >= 0,
            "negative device size in " + join(device_size));
    require(dim_map[k] >= -1 && dim_map[k] < n,
            "dim_map entry " + std::to_string(dim_map[k]) +
                " is not a host dimension of " + join(layout.host_sizes));
    require(dim_map[k] >= 0 || device_size[k] == 1,
            "synthetic device dimension " + std::to_string(k) +
                " must have size 1");
  }
  require(device_size.back() == layout.elements_per_stick() &&
              dim_step.back() == 1 && dim_map.back() >= 0,
          "the last device dimension must be one stick of " +
              std::to_string(layout.elements_per_stick()) +
              " elements with step 1, got size " +
              std::to_string(device_size.back()));
  layout.device_size = std::move(device_size);
  layout.dim_map = std::move(dim_map);
  layout.dim_step = std::move(dim_step);
  for (int64_t h = 0; h < n; ++h) check_host_dim_tiling(layout, h);
  fill_stride_map(layout);
  return layout;
}

void pack(const DeviceLayout& layout, const uint8_t* image, uint8_t* device) {
  if (layout.device_bytes() != layout.host_bytes()) {
    std::memset(device, 0, layout.device_bytes());  // the padding
  }
  const size_t es = layout.element_size;
  const int64_t per_stick = layout.elements_per_stick();
  for_each_stick(
      layout, [&](int64_t stick, int64_t host, int64_t stride, int64_t valid) {
        uint8_t* out = device + static_cast<size_t>(stick * per_stick) * es;
        if (stride == 1) {
          std::memcpy(out, image + static_cast<size_t>(host) * es, valid * es);
          return;
        }
        for (int64_t e = 0; e < valid; ++e) {
          std::memcpy(out + e * es,
                      image + static_cast<size_t>(host + e * stride) * es, es);
        }
      });
}

void unpack(const DeviceLayout& layout, const uint8_t* device, uint8_t* image) {
  const size_t es = layout.element_size;
  const int64_t per_stick = layout.elements_per_stick();
  for_each_stick(layout, [&](int64_t stick, int64_t host, int64_t stride,
                             int64_t valid) {
    const uint8_t* in = device + static_cast<size_t>(stick * per_stick) * es;
    if (stride == 1) {
      std::memcpy(image + static_cast<size_t>(host) * es, in, valid * es);
      return;
    }
    for (int64_t e = 0; e < valid; ++e) {
      std::memcpy(image + static_cast<size_t>(host + e * stride) * es,
                  in + e * es, es);
    }
  });
}

}  // namespace spyre::torch_glue
