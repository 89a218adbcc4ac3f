// Shared helpers for the kernel tests: a scratchpad with typed element
// access and deterministic test data.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../../sim_backend/kernels.h"
#include "../../sim_backend/kernels_util.h"

namespace spyre::sim::test {

inline constexpr size_t kSpadBytes = 2u << 20;

struct Spad {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(kSpadBytes, 0);
  std::span<uint8_t> span() { return bytes; }
  uint8_t* at(const rt::Tile& t, int64_t r, int64_t c) {
    return bytes.data() + t.offset + r * t.row_stride + c * t.col_stride;
  }
  double get(const rt::Tile& t, int64_t r, int64_t c) {
    if (rt::is_floating(t.dtype)) return load_float(at(t, r, c), t.dtype);
    return static_cast<double>(load_int(at(t, r, c), t.dtype));
  }
  void put(const rt::Tile& t, int64_t r, int64_t c, double v) {
    if (rt::is_floating(t.dtype)) {
      store_float(at(t, r, c), t.dtype, static_cast<float>(v));
    } else {
      store_int(at(t, r, c), t.dtype, static_cast<int64_t>(v));
    }
  }
};

// A row-major tile with rows padded to whole sticks.
inline rt::Tile row_major(uint32_t offset, rt::DType t, uint32_t cols) {
  int32_t row = static_cast<int32_t>(
      rt::round_up_to_sticks(uint64_t{cols} * rt::element_size(t)));
  return rt::Tile{offset, t, row, static_cast<int32_t>(rt::element_size(t))};
}

// Rounds a double as storing it in dtype t (through fp32) would.
inline double round_to(rt::DType t, double v) {
  uint8_t buf[8] = {};
  if (rt::is_floating(t)) {
    store_float(buf, t, static_cast<float>(v));
    return load_float(buf, t);
  }
  store_int(buf, t, static_cast<int64_t>(v));
  return static_cast<double>(load_int(buf, t));
}

}  // namespace spyre::sim::test
