// Counter-based random fill. Element i of the tile (row-major over rows x
// cols) draws the Philox block for counter offset + i under key = seed, so
// a value depends only on (seed, offset + i), never on how tiles are split.
#include <cmath>

#include "kernels.h"
#include "kernels_util.h"

namespace spyre::sim {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

PhiloxCounter block_for(uint64_t seed, uint64_t counter) {
  PhiloxKey key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  PhiloxCounter ctr{static_cast<uint32_t>(counter),
                    static_cast<uint32_t>(counter >> 32), 0, 0};
  return philox4x32_10(ctr, key);
}

// The 24 high bits of a word as a float in [0, 1): exact in fp32.
double unit_24(uint32_t word) { return (word >> 8) * (1.0 / 16777216.0); }

// Uniform in [a, b). If rounding to a 16-bit dst lands on b, step back one
// representable value so the bound stays open.
void store_uniform(uint8_t* p, rt::DType t, double a, double b, uint32_t w) {
  float v = static_cast<float>(a + unit_24(w) * (b - a));
  if (v >= static_cast<float>(b))
    v = std::nextafter(static_cast<float>(b), -INFINITY);
  store_float(p, t, v);
  if (t == rt::DType::kFloat16 || t == rt::DType::kBFloat16) {
    if (load_float(p, t) >= static_cast<float>(b) && b > a) {
      uint16_t bits = load_as<uint16_t>(p);
      bool positive = (bits & 0x8000u) == 0;
      store_as<uint16_t>(p, positive ? bits - 1 : bits + 1);
    }
  }
}

// Box-Muller from two words: u1 in (0, 1] so the log is finite.
double normal_from(uint32_t w0, uint32_t w1) {
  double u1 = ((w0 >> 8) + 1) * (1.0 / 16777216.0);
  double u2 = unit_24(w1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

void run_rand(const rt::RandFill& inst, std::span<uint8_t> spad) {
  TileRef dst = bind_tile(spad, inst.dst, inst.rows, inst.cols, "rand dst");
  for (uint32_t r = 0; r < inst.rows; ++r) {
    for (uint32_t c = 0; c < inst.cols; ++c) {
      uint64_t i = static_cast<uint64_t>(r) * inst.cols + c;
      PhiloxCounter words = block_for(inst.seed, inst.offset + i);
      uint8_t* p = dst.at(r, c);
      if (inst.dist == rt::RandDist::kUniform) {
        store_uniform(p, dst.dtype, inst.a, inst.b, words[0]);
      } else {
        double z = normal_from(words[0], words[1]);
        store_float(p, dst.dtype, static_cast<float>(inst.a + inst.b * z));
      }
    }
  }
}

}  // namespace spyre::sim
