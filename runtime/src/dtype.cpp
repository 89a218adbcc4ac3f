#include "spyre/runtime/dtype.h"

#include <array>

namespace spyre::rt {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {
    "float16", "bfloat16", "float32", "int8",
    "int32",   "int64",    "bool",    "uint8"};
}  // namespace

std::string_view dtype_name(DType t) {
  auto index = static_cast<size_t>(t);
  return index < kNames.size() ? kNames[index] : "invalid";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

bool is_valid_dtype(uint8_t raw) { return raw < kNumDTypes; }

}  // namespace spyre::rt
