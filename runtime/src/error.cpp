#include "spyre/runtime/error.h"

#include <array>
#include <cstdio>

namespace spyre::rt {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kDeviceError:
      return "device error";
    case ErrorCode::kMalformedProgram:
      return "malformed program";
    case ErrorCode::kBindError:
      return "bind error";
    case ErrorCode::kRelocateError:
      return "relocate error";
    case ErrorCode::kVerifyError:
      return "verify error";
    case ErrorCode::kBackendError:
      return "backend error";
  }
  return "unknown error";
}

std::string format_bytes(uint64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB",
                                                        "GiB", "TiB"};
  if (bytes < 1024) return str(bytes, " B");
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), "%.2f %s", value, kUnits[unit]);
  return buf.data();
}

}  // namespace spyre::rt
