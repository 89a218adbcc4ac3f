#include "spyre/kernels/layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "spyre/runtime/dtype.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace spyre::kernels {
namespace {

// The program format's stick (spyre/runtime/dtype.h), signed for the
// layout arithmetic.
constexpr int64_t kStickBytes = rt::kStickBytes;

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

// Throws when `ok` is false. A message that costs work to build is passed
// as a callable, so the common, valid case formats nothing.
template <typename Message>
void require(bool ok, const Message& message) {
  if (ok) return;
  if constexpr (std::is_invocable_v<Message>) {
    throw std::invalid_argument("device layout: " + std::string(message()));
  } else {
    throw std::invalid_argument(std::string("device layout: ") + message);
  }
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
    require(size <= 1, [&] {
      return "host dimension " + std::to_string(h) + " of size " +
             std::to_string(size) + " has no device dimension";
    });
    return;
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
    return layout.dim_step[a] < layout.dim_step[b];
  });
  int64_t expected_step = 1;
  for (size_t k : dims) {
    require(layout.dim_step[k] == expected_step, [&] {
      return "device dimension " + std::to_string(k) + " steps " +
             std::to_string(layout.dim_step[k]) + " along host dimension " +
             std::to_string(h) + " where " + std::to_string(expected_step) +
             " tiles it exactly";
    });
    expected_step *= layout.device_size[k];
  }
  require(expected_step >= size || size == 0, [&] {
    return "device dimensions cover " + std::to_string(expected_step) +
           " of the " + std::to_string(size) + " elements of host dimension " +
           std::to_string(h);
  });
}

// A run of sticks met by a walk: `count` sticks, the i-th being device stick
// `stick + i * stick_step` (in device order) and holding the host elements
// `host + i * host_step + e * stride` for e < valid; the rest of each stick
// is padding.
struct StickRun {
  int64_t stick, host, count, stick_step, host_step, stride, valid;
};

// What a walk over the stick grid of a layout (its device dims but the
// last) needs, computed once.
struct StickGrid {
  explicit StickGrid(const DeviceLayout& layout)
      : layout(layout),
        dims(static_cast<int64_t>(layout.device_size.size()) - 1),
        host_strides(row_major_strides(layout.host_sizes)),
        sticks_per_step(dims, 1),
        stick_dim(layout.dim_map.back()),
        per_stick(layout.device_size.back()),
        stick_stride(host_strides[stick_dim]),
        stick_limit(layout.host_sizes[stick_dim]) {
    for (int64_t k = dims - 2; k >= 0; --k) {
      sticks_per_step[k] = sticks_per_step[k + 1] * layout.device_size[k + 1];
    }
    sticks = dims == 0 ? 1 : sticks_per_step[0] * layout.device_size[0];
    // Each host element has one place and each stick holds elements of
    // one row, so the sticks holding data are the rows times their tiles.
    const int64_t rows =
        stick_limit == 0 ? 0 : layout.host_elements() / stick_limit;
    every_stick_holds_data = rows * ceil_div(stick_limit, per_stick) == sticks;
  }

  const DeviceLayout& layout;
  int64_t dims;  // device dims above the stick
  std::vector<int64_t> host_strides;
  std::vector<int64_t> sticks_per_step;  // device stride of each dim, sticks
  int64_t stick_dim;                     // host dim along the sticks
  int64_t per_stick;                     // elements per stick
  int64_t stick_stride;  // host elements between a stick's elements
  int64_t stick_limit;   // host size of the stick dim
  int64_t sticks = 0;
  // Padding only at stick ends: no stick is padding as a whole, so packing
  // needs no zeroing pass.
  bool every_stick_holds_data = false;
};

// Visits, as StickRuns, the sticks holding host data in the box of the grid
// where device dim k runs over [lo[k], hi[k]). Sticks are met with the stick
// dimension's tile index varying fastest: the host image is then read (or
// written) along its rows, and the device buffer in a few sequential
// streams, which keeps both caches and TLB warm (device order would jump a
// whole host row per stick).
template <typename Visit>
void walk_box(const StickGrid& grid, const std::vector<int64_t>& lo,
              const std::vector<int64_t>& hi, Visit&& visit) {
  const DeviceLayout& layout = grid.layout;
  const int64_t per_stick = grid.per_stick;
  if (grid.dims == 0) {  // one stick
    const int64_t valid = std::min(grid.stick_limit, per_stick);
    if (valid > 0) visit(StickRun{0, 0, 1, 0, 0, grid.stick_stride, valid});
    return;
  }
  // The odometer walks "virtual" dims, outermost first: each advances one
  // device dim by `mult`. The dim just outside the tile dim is split in
  // blocks of kBlock so a block of host rows is read while each tile's
  // sticks are written contiguously (no 4 KiB-aliased write streams). The
  // innermost virtual dim (always mult 1) becomes the run.
  constexpr int64_t kBlock = 16;
  struct Step {
    int64_t dim, mult, count;
  };
  std::vector<Step> order;
  int64_t tile_dim = -1;
  for (int64_t k = 0; k < grid.dims; ++k) {
    const int64_t extent = hi[k] - lo[k];
    if (extent <= 0) return;
    if (layout.dim_map[k] == grid.stick_dim && tile_dim < 0) {
      tile_dim = k;
    } else {
      order.push_back({k, 1, extent});
    }
  }
  if (tile_dim >= 0) {
    const int64_t tiles = hi[tile_dim] - lo[tile_dim];
    if (!order.empty() && tiles > 1 && order.back().count > kBlock) {
      const Step rows = order.back();
      order.back() = {rows.dim, kBlock, ceil_div(rows.count, kBlock)};
      order.push_back({tile_dim, 1, tiles});
      order.push_back({rows.dim, 1, kBlock});
    } else {
      order.push_back({tile_dim, 1, tiles});
    }
  }
  const Step inner = order.back();
  order.pop_back();

  std::vector<int64_t> index(grid.dims, 0);        // per device dim
  std::vector<int64_t> position(order.size(), 0);  // per outer virtual dim
  std::vector<int64_t> coord(layout.host_sizes.size(), 0);
  int64_t stick = 0;
  int64_t host = 0;
  auto move = [&](int64_t dim, int64_t amount) {
    const int64_t h = layout.dim_map[dim];
    index[dim] += amount;
    stick += grid.sticks_per_step[dim] * amount;
    if (h >= 0) {
      host += layout.dim_step[dim] * grid.host_strides[h] * amount;
      coord[h] += layout.dim_step[dim] * amount;
    }
  };
  for (int64_t k = 0; k < grid.dims; ++k) move(k, lo[k]);

  // The run of the inner dim from the current position, cut where it leaves
  // the box or its host dim, and split where its sticks' valid counts change.
  const int64_t run_dim = inner.dim;
  const int64_t run_host_dim = layout.dim_map[run_dim];
  const int64_t run_step = layout.dim_step[run_dim];
  const int64_t run_sticks = grid.sticks_per_step[run_dim];
  const int64_t run_host =
      run_host_dim >= 0 ? run_step * grid.host_strides[run_host_dim] : 0;
  auto emit_run = [&]() {
    int64_t count = std::min(inner.count, hi[run_dim] - index[run_dim]);
    const int64_t along = coord[grid.stick_dim];
    if (run_host_dim != grid.stick_dim) {
      if (run_host_dim >= 0) {
        count = std::min(count, ceil_div(layout.host_sizes[run_host_dim] -
                                             coord[run_host_dim],
                                         run_step));
      }
      const int64_t valid =
          std::clamp<int64_t>(grid.stick_limit - along, 0, per_stick);
      if (valid > 0 && count > 0) {
        visit(StickRun{stick, host, count, run_sticks, run_host,
                       grid.stick_stride, valid});
      }
      return;
    }
    // Along the sticks' own dim: whole sticks, then at most one partial.
    const int64_t whole =
        along + per_stick <= grid.stick_limit
            ? std::min(count,
                       (grid.stick_limit - per_stick - along) / run_step + 1)
            : 0;
    if (whole > 0) {
      visit(StickRun{stick, host, whole, run_sticks, run_host,
                     grid.stick_stride, per_stick});
    }
    const int64_t valid = grid.stick_limit - (along + whole * run_step);
    if (whole < count && valid > 0) {
      visit(StickRun{stick + whole * run_sticks, host + whole * run_host, 1,
                     run_sticks, run_host, grid.stick_stride, valid});
    }
  };

  int64_t visits = 1;
  for (const Step& step : order) visits *= step.count;
  for (int64_t visited = 0; visited < visits; ++visited) {
    bool inside = true;
    for (const Step& step : order) {
      if (index[step.dim] >= hi[step.dim]) inside = false;
    }
    for (size_t h = 0; h < coord.size() && inside; ++h) {
      if (static_cast<int64_t>(h) != grid.stick_dim &&
          coord[h] >= layout.host_sizes[h]) {
        inside = false;
      }
    }
    if (inside) emit_run();
    for (int64_t pos = static_cast<int64_t>(order.size()) - 1; pos >= 0;
         --pos) {
      move(order[pos].dim, order[pos].mult);
      if (++position[pos] < order[pos].count) break;
      move(order[pos].dim, -order[pos].mult * order[pos].count);
      position[pos] = 0;
    }
  }
}

// Visits the sticks [first, last) of the device buffer (device order) that
// hold host data, as the boxes of the grid that tile the range: at each dim
// a partial block on either side and whole blocks between.
template <typename Visit>
void walk_sticks(const StickGrid& grid, int64_t first, int64_t last,
                 Visit&& visit) {
  if (first >= last || grid.layout.host_elements() == 0) return;
  std::vector<int64_t> lo(grid.dims, 0);
  std::vector<int64_t> hi(grid.dims, 0);
  // Covers sticks [begin, end), counted from the start of the block of dims
  // k.. whose outer indices are already set in lo/hi.
  auto cover = [&](auto& self, int64_t k, int64_t begin, int64_t end) -> void {
    if (begin >= end) return;
    if (k == grid.dims) {
      walk_box(grid, lo, hi, visit);
      return;
    }
    const int64_t block = grid.sticks_per_step[k];
    const int64_t head = begin / block;
    const int64_t tail = (end - 1) / block;
    auto partial = [&](int64_t i, int64_t from, int64_t to) {
      lo[k] = i;
      hi[k] = i + 1;
      self(self, k + 1, from, to);
    };
    if (head == tail) {
      partial(head, begin - head * block, end - head * block);
      return;
    }
    int64_t whole_lo = head;
    int64_t whole_hi = tail + 1;
    if (begin % block != 0) {
      partial(head, begin % block, block);
      whole_lo = head + 1;
    }
    if (end % block != 0) whole_hi = tail;
    if (whole_lo < whole_hi) {
      lo[k] = whole_lo;
      hi[k] = whole_hi;
      for (int64_t j = k + 1; j < grid.dims; ++j) {
        lo[j] = 0;
        hi[j] = grid.layout.device_size[j];
      }
      walk_box(grid, lo, hi, visit);
    }
    if (end % block != 0) partial(tail, 0, end % block);
  };
  cover(cover, 0, first, last);
}

// The sticks of [first, last) as walk_sticks gives them, but up to kRuns
// runs at a time taking turns: `turn` sticks of each run, then the next
// `turn` of each. Runs of the default layout walk the rows of one column
// block, so the sticks of a run are a host row apart; turns of one stick
// visit whole host rows in order. Which order is fastest depends on which
// side is read (64 MiB [8192, 4096] fp16 on the 2-core VM, streaming stores
// on the written side, memcpy 6-7 ms): reading the host image row by row
// (turn 1) packs in 6.4-11 ms against 9.3-12 ms in turns of 32 sticks;
// unpacking must read the device buffer in long stretches instead (turn 1:
// 24-35 ms, turns of 8 sticks: 14-15 ms, of 32 or whole runs: ~12 ms).
// Calls visit(run, i) for stick i of `run`.
template <typename Visit>
void walk_sticks_in_turns(const StickGrid& grid, int64_t first, int64_t last,
                          int64_t turn, Visit&& visit) {
  constexpr size_t kRuns = 64;
  std::vector<StickRun> runs;
  runs.reserve(kRuns);
  auto visit_runs = [&] {
    int64_t longest = 0;
    for (const StickRun& run : runs) longest = std::max(longest, run.count);
    for (int64_t from = 0; from < longest; from += turn) {
      for (const StickRun& run : runs) {
        const int64_t to = std::min(run.count, from + turn);
        for (int64_t i = from; i < to; ++i) visit(run, i);
      }
    }
    runs.clear();
  };
  walk_sticks(grid, first, last, [&](const StickRun& run) {
    runs.push_back(run);
    if (runs.size() == kRuns) visit_runs();
  });
  visit_runs();
}

// One stick's elements between the host image and the device buffer, one
// element size per instantiation, so each element is a fixed-size copy.
template <size_t kElement>
void gather_elements(uint8_t* out, const uint8_t* image, int64_t stride,
                     int64_t valid) {
  for (int64_t e = 0; e < valid; ++e) {
    std::memcpy(out + e * kElement, image + e * stride * kElement, kElement);
  }
}

template <size_t kElement>
void scatter_elements(uint8_t* image, const uint8_t* in, int64_t stride,
                      int64_t valid) {
  for (int64_t e = 0; e < valid; ++e) {
    std::memcpy(image + e * stride * kElement, in + e * kElement, kElement);
  }
}

// f(std::integral_constant<size_t, es>) for an element size of 1, 2, 4 or
// 8 bytes (layouts hold no other).
template <typename F>
void with_element_size(size_t es, F&& f) {
  switch (es) {
    case 1:
      return f(std::integral_constant<size_t, 1>{});
    case 2:
      return f(std::integral_constant<size_t, 2>{});
    case 4:
      return f(std::integral_constant<size_t, 4>{});
    default:
      return f(std::integral_constant<size_t, 8>{});
  }
}

// A whole stick, 128 contiguous bytes, either way between the host image and
// the device buffer. x86: non-temporal stores, as a large memcpy does: a
// copy writes each destination line once, so caching it would cost a read
// of the line first (a third stream of memory traffic) and evict the source
// being read (a [8192, 4096] fp16 copy host->device: 11-13 ms -> 9-11 ms,
// a memcpy 6-7 ms; device->host stays ~12 ms either way). pack_range and
// unpack_range end with finish_whole_sticks(), the fence these stores need
// before another thread reads the data.
void copy_whole_stick(uint8_t* out, const uint8_t* image) {
#if defined(__SSE2__)
  if (reinterpret_cast<uintptr_t>(out) % sizeof(__m128i) == 0) {
    auto* to = reinterpret_cast<__m128i*>(out);
    const auto* from = reinterpret_cast<const __m128i*>(image);
    for (size_t j = 0; j < kStickBytes / sizeof(__m128i); ++j) {
      _mm_stream_si128(to + j, _mm_loadu_si128(from + j));
    }
    return;
  }
#endif
  std::memcpy(out, image, kStickBytes);
}

void finish_whole_sticks() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void pack_stick(uint8_t* out, const uint8_t* image, int64_t stride,
                int64_t valid, size_t es) {
  if (valid * static_cast<int64_t>(es) == kStickBytes && stride == 1) {
    copy_whole_stick(out, image);
    return;
  }
  if (stride == 1) {
    std::memcpy(out, image, valid * es);
  } else {
    with_element_size(es, [&](auto size) {
      gather_elements<size()>(out, image, stride, valid);
    });
  }
  std::memset(out + valid * es, 0, kStickBytes - valid * es);
}

void unpack_stick(uint8_t* image, const uint8_t* in, int64_t stride,
                  int64_t valid, size_t es) {
  if (valid * static_cast<int64_t>(es) == kStickBytes && stride == 1) {
    copy_whole_stick(image, in);
    return;
  }
  if (stride == 1) {
    std::memcpy(image, in, valid * es);
    return;
  }
  with_element_size(es, [&](auto size) {
    scatter_elements<size()>(image, in, stride, valid);
  });
}

void check_range(const DeviceLayout& layout, uint64_t begin, uint64_t end) {
  require(begin <= end && end <= layout.device_bytes(), [&] {
    return "byte range [" + std::to_string(begin) + ", " + std::to_string(end) +
           ") is not inside the " + std::to_string(layout.device_bytes()) +
           " device bytes of " + layout.to_string();
  });
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
          [&] {
            return "element size " + std::to_string(element_size) +
                   " does not divide a 128-byte stick";
          });
  const int64_t n = static_cast<int64_t>(host_sizes.size());
  for (int64_t size : host_sizes) {
    require(size >= 0, [&] {
      return "negative size in " + join({host_sizes.begin(), host_sizes.end()});
    });
  }
  int64_t stick = -1;  // a host dimension chosen by the caller
  if (stick_dim != -1) {
    stick = stick_dim < 0 ? stick_dim + n : stick_dim;
    require(stick >= 0 && stick < n, [&] {
      return "stick dimension " + std::to_string(stick_dim) +
             " is out of range for " + std::to_string(n) + " dimensions";
    });
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
          [&] {
            return "device_size " + join(device_size) + ", dim_map " +
                   join(dim_map) + " and dim_step " + join(dim_step) +
                   " differ in length";
          });
  for (size_t k = 0; k < device_size.size(); ++k) {
    require(device_size[k] >= 0,
            [&] { return "negative device size in " + join(device_size); });
    require(dim_map[k] >= -1 && dim_map[k] < n, [&] {
      return "dim_map entry " + std::to_string(dim_map[k]) +
             " is not a host dimension of " + join(layout.host_sizes);
    });
    require(dim_map[k] >= 0 || device_size[k] == 1, [&] {
      return "synthetic device dimension " + std::to_string(k) +
             " must have size 1";
    });
  }
  require(device_size.back() == layout.elements_per_stick() &&
              dim_step.back() == 1 && dim_map.back() >= 0,
          [&] {
            return "the last device dimension must be one stick of " +
                   std::to_string(layout.elements_per_stick()) +
                   " elements with step 1, got size " +
                   std::to_string(device_size.back());
          });
  layout.device_size = std::move(device_size);
  layout.dim_map = std::move(dim_map);
  layout.dim_step = std::move(dim_step);
  for (int64_t h = 0; h < n; ++h) check_host_dim_tiling(layout, h);
  fill_stride_map(layout);
  return layout;
}

void pack_range(const DeviceLayout& layout, const uint8_t* image,
                uint64_t begin, uint64_t end, uint8_t* out) {
  check_range(layout, begin, end);
  if (begin == end) return;
  const StickGrid grid(layout);
  if (!grid.every_stick_holds_data) std::memset(out, 0, end - begin);
  const size_t es = layout.element_size;
  const uint64_t first = begin / kStickBytes;
  const uint64_t last = (end + kStickBytes - 1) / kStickBytes;
  constexpr int64_t kHostRowsInOrder = 1;
  walk_sticks_in_turns(
      grid, first, last, kHostRowsInOrder, [&](const StickRun& run, int64_t i) {
        const auto at = static_cast<uint64_t>((run.stick + i * run.stick_step) *
                                              kStickBytes);
        const uint8_t* from = image + (run.host + i * run.host_step) * es;
        if (at >= begin && at + kStickBytes <= end) {
          pack_stick(out + (at - begin), from, run.stride, run.valid, es);
          return;
        }
        // A stick cut by the range: pack it whole, keep the part inside.
        uint8_t whole[kStickBytes];
        pack_stick(whole, from, run.stride, run.valid, es);
        const uint64_t lo = std::max(at, begin);
        const uint64_t hi = std::min<uint64_t>(at + kStickBytes, end);
        std::memcpy(out + (lo - begin), whole + (lo - at), hi - lo);
      });
  finish_whole_sticks();
}

void unpack_range(const DeviceLayout& layout, const uint8_t* in, uint64_t begin,
                  uint64_t end, uint8_t* image) {
  check_range(layout, begin, end);
  if (begin == end) return;
  const StickGrid grid(layout);
  const size_t es = layout.element_size;
  const uint64_t first = begin / kStickBytes;
  const uint64_t last = (end + kStickBytes - 1) / kStickBytes;
  constexpr int64_t kDeviceStretch = 32;
  walk_sticks_in_turns(
      grid, first, last, kDeviceStretch, [&](const StickRun& run, int64_t i) {
        const auto at = static_cast<uint64_t>((run.stick + i * run.stick_step) *
                                              kStickBytes);
        uint8_t* to = image + (run.host + i * run.host_step) * es;
        if (at >= begin && at + kStickBytes <= end) {
          unpack_stick(to, in + (at - begin), run.stride, run.valid, es);
          return;
        }
        // A stick cut by the range: only its bytes inside, byte by byte (an
        // element may be cut too).
        for (uint64_t b = 0; b < run.valid * es; ++b) {
          if (at + b < begin || at + b >= end) continue;
          to[(b / es) * run.stride * es + b % es] = in[at + b - begin];
        }
      });
  finish_whole_sticks();
}

void pack(const DeviceLayout& layout, const uint8_t* image, uint8_t* device) {
  pack_range(layout, image, 0, layout.device_bytes(), device);
}

void unpack(const DeviceLayout& layout, const uint8_t* device, uint8_t* image) {
  unpack_range(layout, device, 0, layout.device_bytes(), image);
}

}  // namespace spyre::kernels
