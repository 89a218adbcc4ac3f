// Bit-exact conversions between fp32 and the 16-bit storage formats, rounding
// to nearest even as IEEE 754 and PyTorch's CPU kernels do. Header-only and
// branch-light so the emulator's loops vectorise.
#pragma once

#include <bit>
#include <cstdint>

namespace spyre::rt {

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}

inline uint16_t float_to_fp16(float f) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}

}  // namespace spyre::rt
