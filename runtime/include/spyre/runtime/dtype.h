// Element types known to the device layer. Storage may hold any of them;
// the compute units of a backend accept the subset they document.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace spyre::rt {

enum class DType : uint8_t {
  kFloat16 = 0,
  kBFloat16 = 1,
  kFloat32 = 2,
  kInt8 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kBool = 6,  // one byte, 0 or 1
  kUInt8 = 7,
};
inline constexpr int kNumDTypes = 8;

constexpr uint32_t element_size(DType t) {
  switch (t) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kInt8:
    case DType::kBool:
    case DType::kUInt8:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat32;
}

std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
bool is_valid_dtype(uint8_t raw);

// The device moves data in sticks: 128 contiguous, 128-byte-aligned bytes.
inline constexpr uint32_t kStickBytes = 128;

constexpr uint64_t round_up_to_sticks(uint64_t bytes) {
  return (bytes + kStickBytes - 1) / kStickBytes * kStickBytes;
}

constexpr uint32_t elements_per_stick(DType t) {
  return kStickBytes / element_size(t);
}

}  // namespace spyre::rt
