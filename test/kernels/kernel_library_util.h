// Helpers for the kernel-library tests: host images of strided device
// matrices (spyre/kernels/matrix.h), filled and read element by element, so
// each test states its operands in the same terms the builders take.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels_test_util.h"
#include "sim_test_util.h"
#include "spyre/kernels/matrix.h"
#include "spyre/kernels/program_builder.h"

namespace spyre::sim::test {

// Byte offset of element (r, c) of batch `batch` of `m`.
inline uint64_t element_offset(const kernels::Matrix& m, uint64_t batch,
                               uint64_t r, uint64_t c) {
  const uint64_t e = m.elements_per_stick();
  const uint64_t in_stick = (c % e) * rt::element_size(m.dtype);
  const uint64_t base = m.batch_offset(batch);
  if (m.kind == kernels::MatrixKind::kRowMajor) {
    return base + r * m.pitch() + (c / e) * rt::kStickBytes + in_stick;
  }
  if (m.kind == kernels::MatrixKind::kStickColumns) {
    return base + ((c / e) * m.rows + r) * rt::kStickBytes + in_stick;
  }
  int64_t addr = static_cast<int64_t>(base + m.offset);
  for (auto it = m.row_dims.rbegin(); it != m.row_dims.rend(); ++it) {
    addr += static_cast<int64_t>(r % it->size) * it->stride;
    r /= it->size;
  }
  addr += static_cast<int64_t>(c / e) * m.stick_stride;
  return static_cast<uint64_t>(addr) + in_stick;
}

// A host image of one argument slot (bytes as on the device).
struct Image {
  std::vector<uint8_t> bytes;
  explicit Image(uint64_t n) : bytes(rt::round_up_to_sticks(n), 0) {}
  double get(const kernels::Matrix& m, uint64_t b, uint64_t r, uint64_t c) {
    uint8_t* p = bytes.data() + element_offset(m, b, r, c);
    if (rt::is_floating(m.dtype)) return load_float(p, m.dtype);
    return static_cast<double>(load_int(p, m.dtype));
  }
  void put(const kernels::Matrix& m, uint64_t b, uint64_t r, uint64_t c,
           double v) {
    uint8_t* p = bytes.data() + element_offset(m, b, r, c);
    if (rt::is_floating(m.dtype)) {
      store_float(p, m.dtype, static_cast<float>(v));
    } else {
      store_int(p, m.dtype, static_cast<int64_t>(v));
    }
  }
  // Fills every element of `m` with uniform values in [lo, hi) (rounded to
  // the dtype) and returns them as doubles [batch][row][col] flattened.
  std::vector<double> fill(const kernels::Matrix& m, std::mt19937& rng,
                           double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<double> values;
    for (uint64_t b = 0; b < m.batch_count(); ++b) {
      for (uint64_t r = 0; r < m.rows; ++r) {
        for (uint64_t c = 0; c < m.cols; ++c) {
          put(m, b, r, c, dist(rng));
          values.push_back(get(m, b, r, c));
        }
      }
    }
    return values;
  }
};

// Runs `program` with one device buffer per slot holding `images[i]`
// (resized to the slot), then reads every slot back into its image.
inline rt::LaunchStats run_images(rt::Device& device,
                                  const rt::Program& program,
                                  std::vector<Image>& images) {
  Buffers buffers(device, program);
  for (size_t i = 0; i < images.size(); ++i) {
    images[i].bytes.resize(buffers.bindings[i].bytes);
    buffers.upload(i, images[i].bytes);
  }
  rt::LaunchStats stats = run(device, program, buffers);
  for (size_t i = 0; i < images.size(); ++i) {
    images[i].bytes = buffers.download<uint8_t>(i);
  }
  return stats;
}

// Relative precision of one rounding to `dtype`.
inline double unit_roundoff(rt::DType dtype) {
  switch (dtype) {
    case rt::DType::kFloat16:
      return 1.0 / 2048;
    case rt::DType::kBFloat16:
      return 1.0 / 256;
    default:
      return 1.0 / (1 << 23);
  }
}

}  // namespace spyre::sim::test
